// Ctrl-C during long C++ calls (see bindings.h: SigintScope).
#include <pybind11/pybind11.h>

#include <atomic>
#include <csignal>

#include "bindings.h"

namespace py = pybind11;

namespace bft::python {
namespace {

std::atomic<bool> sigint_seen{false};
struct sigaction previous_sigint {};
int depth = 0;  // nesting on the main thread (only the main thread installs)

extern "C" void OnSigint(int sig, siginfo_t* info, void* context) {
  sigint_seen.store(true);
  // Chain to the handler that was there (Python's, which trips its own flag).
  if ((previous_sigint.sa_flags & SA_SIGINFO) != 0) {
    if (previous_sigint.sa_sigaction != nullptr) previous_sigint.sa_sigaction(sig, info, context);
  } else if (previous_sigint.sa_handler == SIG_DFL) {
    sigaction(SIGINT, &previous_sigint, nullptr);  // default action: end the process, as asked
    raise(sig);
  } else if (previous_sigint.sa_handler != SIG_IGN && previous_sigint.sa_handler != nullptr) {
    previous_sigint.sa_handler(sig);
  }
}

bool OnMainThread() {
  py::module_ threading = py::module_::import("threading");
  return threading.attr("current_thread")().is(threading.attr("main_thread")());
}

}  // namespace

SigintScope::SigintScope() {
  if (!OnMainThread()) return;  // signals reach Python's handler on the main thread only
  counted_ = true;
  if (depth++ > 0) return;  // an outer scope has installed the handler
  sigint_seen.store(false);
  // A process that ignores SIGINT (started with nohup, or in the background of a script) asked
  // not to be stopped by it: leave it so, rather than stop its solves on a signal it ignores.
  struct sigaction current {};
  if (sigaction(SIGINT, nullptr, &current) != 0 ||
      ((current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == SIG_IGN))
    return;
  struct sigaction action {};
  action.sa_sigaction = OnSigint;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  installed_ = sigaction(SIGINT, &action, &previous_sigint) == 0;
}

SigintScope::~SigintScope() {
  if (installed_) sigaction(SIGINT, &previous_sigint, nullptr);
  if (counted_) --depth;
}

bool SigintScope::Requested() { return sigint_seen.load(); }

std::function<bool()> SigintScope::Poll() {
  return [] { return sigint_seen.load(); };
}

void ThrowIfSignalled() {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

}  // namespace bft::python

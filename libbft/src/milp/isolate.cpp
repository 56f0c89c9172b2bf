// Isolated solves (SolveOptions::isolate): the backend runs in a forked child process and sends its
// Result back through a pipe, so a crash inside a solver library (CBC has segfaulted on valid models)
// ends the child, not the caller.
//
// The child is a copy of the caller at the moment of the fork with a single thread. It only solves,
// writes the result and leaves with _exit (no atexit handlers, no stdio flush of the parent's
// buffers, which are flushed before the fork). It never runs Python code: the interrupt callback is
// polled by the parent, which kills the child when it fires.
#include <poll.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "milp/internal.h"

namespace bft::milp {

double IsolationGraceSeconds(double time_limit_s) { return 5.0 + 0.25 * time_limit_s; }

namespace internal {
namespace {

bool in_isolated_child = false;

constexpr std::uint32_t kMagic = 0x62667452;  // "bftR"

template <typename T>
void Put(std::string* out, const T& value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
bool Take(const std::string& in, std::size_t* at, T* value) {
  if (in.size() - *at < sizeof(T)) return false;
  std::memcpy(value, in.data() + *at, sizeof(T));
  *at += sizeof(T);
  return true;
}

std::string Serialize(const Result& r) {
  std::string out;
  Put(&out, kMagic);
  Put(&out, static_cast<std::int32_t>(r.termination));
  Put(&out, static_cast<std::uint8_t>(r.has_solution ? 1 : 0));
  Put(&out, r.objective);
  Put(&out, r.best_bound);
  Put(&out, r.gap);
  Put(&out, static_cast<std::uint64_t>(r.message.size()));
  out += r.message;
  Put(&out, static_cast<std::uint64_t>(r.values.size()));
  for (double v : r.values) Put(&out, v);
  Put(&out, kMagic);
  return out;
}

bool Deserialize(const std::string& in, Result* r) {
  std::size_t at = 0;
  std::uint32_t magic = 0, end_magic = 0;
  std::int32_t termination = 0;
  std::uint8_t has_solution = 0;
  std::uint64_t message_size = 0, values_size = 0;
  if (!Take(in, &at, &magic) || magic != kMagic || !Take(in, &at, &termination) ||
      !Take(in, &at, &has_solution) || !Take(in, &at, &r->objective) || !Take(in, &at, &r->best_bound) ||
      !Take(in, &at, &r->gap) || !Take(in, &at, &message_size) || in.size() - at < message_size) {
    return false;
  }
  if (termination < static_cast<std::int32_t>(Termination::kOptimal) ||
      termination > static_cast<std::int32_t>(Termination::kInterrupted)) {
    return false;
  }
  r->termination = static_cast<Termination>(termination);
  r->has_solution = has_solution != 0;
  r->message.assign(in, at, message_size);
  at += message_size;
  if (!Take(in, &at, &values_size) || (in.size() - at) / sizeof(double) < values_size) return false;
  r->values.resize(values_size);
  for (double& v : r->values) Take(in, &at, &v);
  return Take(in, &at, &end_magic) && end_magic == kMagic && at == in.size();
}

bool WriteAll(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// The child's side: solve, send, leave without running anything of the parent's.
[[noreturn]] void RunChild(int fd, const std::function<Result()>& solve) {
  in_isolated_child = true;
  Result result;
  try {
    result = solve();
  } catch (const std::exception& e) {
    result = Result{};
    result.termination = Termination::kError;
    result.message = std::string("the isolated solve threw: ") + e.what();
  } catch (...) {
    result = Result{};
    result.termination = Termination::kError;
    result.message = "the isolated solve threw an unknown exception";
  }
  const bool sent = WriteAll(fd, Serialize(result));
  std::fflush(nullptr);  // a verbose backend's log (the parent flushed its own buffers before the fork)
  _exit(sent ? 0 : 3);
}

}  // namespace

bool InIsolatedChild() { return in_isolated_child; }

Result SolveIsolated(const std::string& backend, const Model& model, const SolveOptions& options,
                     const std::function<Result()>& solve) {
  const Stopwatch clock;
  Result result;
  result.backend = backend;
  result.model_id = model.id();
  result.best_bound = model.sense() == Sense::kMaximize ? kInf : -kInf;
  result.gap = kInf;
  auto finish = [&](Termination termination, std::string message) {
    result.termination = termination;
    result.message = std::move(message);
    result.wall_time_s = clock.ElapsedSeconds();
    return result;
  };

  int fds[2];
  if (pipe(fds) != 0) return finish(Termination::kError, Errno("isolated solve: cannot create a pipe"));
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return finish(Termination::kError, Errno("isolated solve: cannot fork"));
  }
  if (pid == 0) {
    close(fds[0]);
    RunChild(fds[1], solve);
  }
  close(fds[1]);

  // Read the child's result while polling the interrupt and the deadline.
  const double deadline_s = std::isinf(options.time_limit_s)
                                ? kInf
                                : options.time_limit_s + IsolationGraceSeconds(options.time_limit_s);
  InterruptPoller interrupt(&options.interrupt);
  std::string bytes;
  bool interrupted = false, killed_late = false;
  char buffer[65536];
  while (true) {
    if (interrupt.Requested()) {
      interrupted = true;
      break;
    }
    if (clock.ElapsedSeconds() > deadline_s) {
      killed_late = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(kInterruptPollSeconds * 1000));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of file: the child is done (or dead)
    bytes.append(buffer, static_cast<std::size_t>(n));
  }
  close(fds[0]);
  if (interrupted || killed_late) kill(pid, SIGKILL);
  int status = 0;
  pid_t waited;
  do {
    waited = waitpid(pid, &status, 0);
  } while (waited < 0 && errno == EINTR);

  if (interrupted)
    return finish(Termination::kInterrupted, "interrupted; the isolated " + backend + " solve was stopped");
  if (killed_late) {
    return finish(Termination::kTimeLimit, "the isolated " + backend + " solve outlived its time limit of " +
                                               FormatNumber(options.time_limit_s) + " s and was killed");
  }
  if (waited == pid && WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return finish(Termination::kError, "the " + backend +
                                           " backend crashed in its isolated child process (signal " +
                                           std::to_string(sig) + ", " + strsignal(sig) + ")");
  }
  Result child;
  if (!Deserialize(bytes, &child)) {
    std::string why =
        "the " + backend + " backend ended its isolated child process without a complete result";
    if (waited == pid && WIFEXITED(status))
      why += " (exit status " + std::to_string(WEXITSTATUS(status)) + ")";
    return finish(Termination::kError, why);
  }
  if (child.has_solution && child.values.size() != static_cast<std::size_t>(model.num_vars())) {
    return finish(Termination::kError, "the isolated " + backend + " solve returned " +
                                           std::to_string(child.values.size()) + " values for " +
                                           std::to_string(model.num_vars()) + " variables");
  }
  child.backend = backend;
  child.model_id = model.id();
  child.wall_time_s = clock.ElapsedSeconds();
  return child;
}

}  // namespace internal
}  // namespace bft::milp

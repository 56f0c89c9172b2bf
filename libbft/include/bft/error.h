// The exceptions libbft throws at its API boundary. Solver outcomes (infeasible, time limit, ...)
// are results, not exceptions: an exception always means the call itself could not be carried out.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace bft {

// Base of every exception libbft throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller passed something invalid: a NaN coefficient, min_nodes > max_nodes, an unknown job id.
// The message names the offending field, variable, constraint or job. Python sees ValueError.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A file could not be opened. Python sees FileNotFoundError.
class FileNotFound : public Error {
 public:
  using Error::Error;
};

// The longest line any reader of a file takes, in bytes (docs/formats.md), in C++ and in Python
// (bft._core.MAX_LINE_BYTES): a longer one is a ParseError naming it, found while holding at most
// this much of it, so a file with a huge line (or no newline at all) costs bounded memory and time.
inline constexpr std::size_t kMaxLineBytes = std::size_t{1} << 20;

// A file's content is malformed; the message starts with "path:line:". Python sees ValueError.
class ParseError : public InvalidArgument {
 public:
  ParseError(const std::string& path, long line, const std::string& what)
      : InvalidArgument(path + ":" + std::to_string(line) + ": " + what), path_(path), line_(line) {}
  const std::string& path() const { return path_; }
  long line() const { return line_; }

 private:
  std::string path_;
  long line_;
};

// A long call (a replay) was stopped by its interrupt (SolveOptions::interrupt, e.g. Ctrl-C).
// Python sees KeyboardInterrupt.
class Interrupted : public Error {
 public:
  using Error::Error;
};

// Something this build cannot do, e.g. a MILP backend that was not compiled in. Python sees RuntimeError.
class NotAvailable : public Error {
 public:
  using Error::Error;
};

}  // namespace bft

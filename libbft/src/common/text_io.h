// Reading and writing the text files libbft's formats live in (traces, workloads, scheduler logs):
// plain or gzip, streamed line by line, every line checked, so that every reader takes and refuses
// the same files with the same messages.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "bft/error.h"  // kMaxLineBytes

namespace bft::text {

// f(line, number): one line without its terminator (a trailing '\r' and a UTF-8 byte order mark
// before the first line removed), numbered from 1.
using LineFn = std::function<void(std::string_view line, long number)>;

// Calls f for every line of the file at `path`, plain or gzip (concatenated members too), reading it
// in chunks (never whole). Throws FileNotFound, or ParseError / InvalidArgument naming the file (and
// line) of a corrupt or truncated gzip stream, a bzip2/xz/zstd/zip file, a NUL byte or text that is
// not UTF-8.
void ForEachFileLine(const std::string& path, const LineFn& f);
// The same for text in memory; `source` names it in messages.
void ForEachTextLine(const std::string& text, const std::string& source, const LineFn& f);
// Writes `content` to `path`, gzip-compressed if the path ends in ".gz". Throws FileNotFound or Error.
void WriteFileMaybeGzip(const std::string& path, const std::string& content);

// At most 60 bytes of s for a message, never cutting a UTF-8 character in half.
std::string Shorten(std::string_view s);

}  // namespace bft::text

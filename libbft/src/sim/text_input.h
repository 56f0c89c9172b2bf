// What the readers of the sim formats share: the streaming line reader (plain or gzip, every line
// checked for NUL bytes and UTF-8) and the node-name rules, so that an importer reads and checks
// its input exactly as the trace reader does.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace bft::sim::detail {

// Calls f(line, number) for every line of the file at `path`, plain or gzip, reading it in chunks
// (never whole). Throws FileNotFound, or ParseError / InvalidArgument naming the file (and line) of
// a corrupt or truncated gzip stream, a bzip2/xz/zstd/zip file, a NUL byte or text that is not UTF-8.
void ForEachFileLine(const std::string& path, const std::function<void(std::string_view, long)>& f);

// At most 60 bytes of s for a message, never cutting a UTF-8 character in half.
std::string Shorten(std::string_view s);

// True if `name` may name a node in a trace (non-empty; no space, comma, quote or control
// character); else false with the reason in *why.
bool ValidNodeName(std::string_view name, std::string* why);

}  // namespace bft::sim::detail

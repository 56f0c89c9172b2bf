#include "common/text_io.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "bft/error.h"

namespace bft::text {
namespace {

std::string LineTooLong() {
  return "a line longer than " + std::to_string(kMaxLineBytes) +
         " bytes, the formats' limit (is this the right file?)";
}

// Checks one line of an input file: not too long, no NUL byte, valid UTF-8. Throws ParseError
// naming the line.
void CheckText(std::string_view line, const std::string& source, long number) {
  if (line.size() > kMaxLineBytes) throw ParseError(source, number, LineTooLong());
  std::size_t k = 0;
  while (k < line.size()) {
    const auto c = static_cast<unsigned char>(line[k]);
    if (c == 0) {
      throw ParseError(source, number, "NUL byte at column " + std::to_string(k + 1) + " (a binary file?)");
    }
    if (c < 0x80) {
      ++k;
      continue;
    }
    // A multi-byte sequence: a lead byte and 1-3 continuation bytes; no overlong forms, no surrogates.
    std::size_t extra = 0;
    std::uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
      cp = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      cp = c & 0x0Fu;
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      cp = c & 0x07u;
    }
    bool ok = extra > 0 && k + extra < line.size();
    for (std::size_t e = 1; ok && e <= extra; ++e) {
      const auto cc = static_cast<unsigned char>(line[k + e]);
      ok = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    if (ok && extra == 2) ok = cp >= 0x800 && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (ok && extra == 3) ok = cp >= 0x10000 && cp <= 0x10FFFF;
    if (!ok) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", c);
      throw ParseError(source, number,
                       std::string("not UTF-8 text: byte ") + hex + " at column " + std::to_string(k + 1));
    }
    k += extra + 1;
  }
}

// Names a compressed or archive format by its first bytes; empty for anything else.
std::string CompressedFormat(std::string_view head) {
  auto starts = [&](std::string_view magic) { return head.substr(0, magic.size()) == magic; };
  if (starts("BZh")) return "bzip2";
  if (starts(std::string_view("\xFD"
                              "7zXZ\0",
                              6)))
    return "xz";
  if (starts("\x28\xB5\x2F\xFD")) return "zstd";
  if (starts("PK\x03\x04")) return "zip";
  if (starts("\x1F\x9D")) return "compress (.Z)";
  return "";
}

// Hands the lines of a file to f(line, number) as it reads them (a line has no terminator; a
// trailing '\r' and a UTF-8 byte order mark before the first line are removed), so that a file is never held
// whole in memory (a gzip bomb is read line by line, and the parser stops at the first bad one). The file is
// gunzipped when it starts with the gzip magic; concatenated gzip members are read in turn. Errors name the
// file (and the line where there is one): a corrupt gzip stream; one that ends before its trailer (a
// truncated file: inside a line, that line is named); anything but another gzip member after the trailer;
// bzip2, xz, zstd, zip files; NUL bytes and text that is not UTF-8 (CheckText).
// A path with a NUL byte would be cut short by the C library: refuse it.
void CheckPath(const std::string& path) {
  if (path.find('\0') != std::string::npos) {
    throw InvalidArgument("path \"" + path.substr(0, path.find('\0')) + "\\0...\": contains a NUL byte");
  }
}

void StreamLines(const std::string& path, const LineFn& f) {
  CheckPath(path);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw FileNotFound(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) throw FileNotFound(path + ": is a directory, not a file");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) throw FileNotFound(path + ": cannot be opened");

  std::string pending;  // text not yet handed out: at most one partial line between chunks
  long number = 0;
  auto emit = [&](std::string_view line) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (number == 1 && line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);  // a UTF-8 byte order mark
    CheckText(line, path, number);
    f(line, number);
  };
  auto feed = [&](const char* data, std::size_t size) {
    pending.append(data, size);
    std::size_t pos = 0;
    while (true) {
      const std::size_t end = pending.find('\n', pos);
      if (end == std::string::npos) break;
      emit(std::string_view(pending.data() + pos, end - pos));
      pos = end + 1;
    }
    pending.erase(0, pos);
    if (pending.size() > kMaxLineBytes) throw ParseError(path, number + 1, LineTooLong());
  };

  std::vector<char> in(1 << 17);
  std::size_t have = std::fread(in.data(), 1, in.size(), file.get());
  const std::string format = CompressedFormat(std::string_view(in.data(), have));
  if (!format.empty()) {
    throw InvalidArgument(path + ": a " + format +
                          " file; only plain text and gzip are read (decompress it first)");
  }
  const bool gzip =
      have >= 2 && static_cast<unsigned char>(in[0]) == 0x1F && static_cast<unsigned char>(in[1]) == 0x8B;
  if (!gzip) {
    while (have > 0) {
      feed(in.data(), have);
      have = std::fread(in.data(), 1, in.size(), file.get());
    }
    if (std::ferror(file.get()) != 0) throw Error(path + ": read error");
    if (!pending.empty()) emit(pending);
    return;
  }

  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw Error(path + ": cannot start gzip decompression");
  struct InflateEnd {
    z_stream* zs;
    ~InflateEnd() { inflateEnd(zs); }
  } inflate_end{&zs};
  std::vector<char> out(1 << 18);
  std::uint64_t consumed = 0;  // compressed bytes consumed so far (for messages)
  bool member_done = false;    // the last gzip member ended with a valid trailer
  bool output_full = false;    // the last inflate filled `out`: it may hold more output
  zs.next_in = reinterpret_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(have);
  while (true) {
    if (zs.avail_in == 0 && !output_full) {
      have = std::fread(in.data(), 1, in.size(), file.get());
      if (have == 0) break;
      zs.next_in = reinterpret_cast<Bytef*>(in.data());
      zs.avail_in = static_cast<uInt>(have);
    }
    if (member_done) {
      // Only another gzip member may follow a member's trailer.
      if (zs.avail_in < 2) {  // one byte left in the buffer: move it to the front and read on
        const std::size_t left = zs.avail_in;
        std::memmove(in.data(), zs.next_in, left);
        have = left + std::fread(in.data() + left, 1, in.size() - left, file.get());
        zs.next_in = reinterpret_cast<Bytef*>(in.data());
        zs.avail_in = static_cast<uInt>(have);
      }
      if (zs.avail_in < 2 || zs.next_in[0] != 0x1F || zs.next_in[1] != 0x8B) {
        throw InvalidArgument(path + ": unexpected data after the end of the gzip stream (compressed byte " +
                              std::to_string(consumed) + ", after line " + std::to_string(number) + ")");
      }
      if (inflateReset(&zs) != Z_OK) throw Error(path + ": cannot restart gzip decompression");
      member_done = false;
    }
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = static_cast<uInt>(out.size());
    const uInt before = zs.avail_in;
    const int ret = inflate(&zs, Z_NO_FLUSH);
    consumed += before - zs.avail_in;
    if (ret != Z_OK && ret != Z_STREAM_END && ret != Z_BUF_ERROR) {
      throw InvalidArgument(path +
                            ": cannot be decompressed (gzip: " + (zs.msg != nullptr ? zs.msg : "data error") +
                            ", after line " + std::to_string(number) + ")");
    }
    feed(out.data(), out.size() - zs.avail_out);
    output_full = zs.avail_out == 0;
    if (ret == Z_STREAM_END) member_done = true;
  }
  if (std::ferror(file.get()) != 0) throw Error(path + ": read error");
  if (!member_done) {
    if (!pending.empty()) {
      throw ParseError(path, number + 1,
                       "the gzip stream is truncated inside this line: the file ends before the gzip trailer "
                       "(was it copied while being written?)");
    }
    throw InvalidArgument(path + ": the gzip stream is truncated after line " + std::to_string(number) +
                          ": the file ends before the gzip trailer (was it copied while being written?)");
  }
  if (!pending.empty()) emit(pending);
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Splits text into lines (without the terminator; a trailing '\r' and a leading UTF-8 byte order
// mark are removed), calling f(line, number).
// Checks each line with CheckText (naming `source`).
void ForEachLine(const std::string& text, const std::string& source, const LineFn& f) {
  std::size_t pos = 0;
  long number = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (number == 0 && line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);
    CheckText(line, source, ++number);
    f(line, number);
    pos = end + 1;
  }
}

}  // namespace

void ForEachFileLine(const std::string& path, const LineFn& f) { StreamLines(path, f); }

void WriteFileMaybeGzip(const std::string& path, const std::string& content) {
  CheckPath(path);
  if (EndsWith(path, ".gz")) {
    gzFile f = gzopen(path.c_str(), "wb");
    if (f == nullptr) throw FileNotFound(path + ": cannot be opened for writing");
    std::size_t off = 0;
    while (off < content.size()) {
      const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(content.size() - off, 1 << 20));
      if (gzwrite(f, content.data() + off, chunk) != static_cast<int>(chunk)) {
        gzclose(f);
        throw Error(path + ": write failed");
      }
      off += chunk;
    }
    if (gzclose(f) != Z_OK) throw Error(path + ": write failed");
    return;
  }
  std::ofstream out(path, std::ios::binary);
  if (!out) throw FileNotFound(path + ": cannot be opened for writing");
  out << content;
  out.close();  // a full disk shows only when the buffer is flushed
  if (!out) throw Error(path + ": write failed");
}

void ForEachTextLine(const std::string& text, const std::string& source, const LineFn& f) {
  ForEachLine(text, source, f);
}

std::string Shorten(std::string_view s) {
  if (s.size() <= 60) return std::string(s);
  std::size_t cut = 57;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return std::string(s.substr(0, cut)) + "...";
}

}  // namespace bft::text

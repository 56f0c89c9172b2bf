#include "jobs/json.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <system_error>

namespace bft::jobs::detail {
namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  std::vector<Field> ParseObject() {
    SkipSpace();
    std::vector<Field> fields = ParseObjectBody(/*nested=*/false);
    SkipSpace();
    if (pos_ != s_.size()) Fail("unexpected text after the end of the object");
    return fields;
  }

 private:
  [[noreturn]] void Fail(const std::string& what, std::size_t column = 0) const {
    throw JsonError("column " + std::to_string(column ? column : pos_ + 1) + ": " + what);
  }
  char Peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool AtEnd() const { return pos_ >= s_.size(); }
  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r' || s_[pos_] == '\n')) {
      ++pos_;
    }
  }
  void Expect(char c, const std::string& what) {
    if (Peek() != c || AtEnd()) Fail(what);
    ++pos_;
  }

  // An object from its '{' to its '}'. A nested object (an element of an array of objects) must be
  // flat: its values may not be arrays of objects.
  std::vector<Field> ParseObjectBody(bool nested) {
    std::vector<Field> fields;
    Expect('{', "expected '{' at the start of the object");
    SkipSpace();
    if (Peek() == '}' && !AtEnd()) {
      ++pos_;
      return fields;
    }
    while (true) {
      SkipSpace();
      if (Peek() != '"' || AtEnd()) Fail("expected a field name in double quotes");
      const std::size_t key_column = pos_ + 1;
      Field field;
      field.key = ParseString();
      for (const Field& f : fields) {
        if (f.key == field.key) Fail("duplicate field \"" + field.key + "\"", key_column);
      }
      SkipSpace();
      Expect(':', "expected ':' after field name \"" + field.key + "\"");
      SkipSpace();
      field.value = ParseValue(field.key, nested);
      fields.push_back(std::move(field));
      SkipSpace();
      const char c = Peek();
      if (c == ',' && !AtEnd()) {
        ++pos_;
        continue;
      }
      if (c == '}' && !AtEnd()) {
        ++pos_;
        return fields;
      }
      Fail("expected ',' or '}' after the value of \"" + fields.back().key + "\"");
    }
  }

  Value ParseValue(const std::string& key, bool nested) {
    Value v;
    const char c = Peek();
    if (AtEnd()) Fail("missing value of \"" + key + "\"");
    if (c == '"') {
      v.kind = Value::Kind::kString;
      v.text = ParseString();
    } else if (c == '[') {
      ++pos_;
      SkipSpace();
      if (Peek() == ']' && !AtEnd()) {
        ++pos_;
        v.kind = Value::Kind::kNumberArray;
        return v;
      }
      v.kind = Peek() == '{' ? Value::Kind::kObjectArray : Value::Kind::kNumberArray;
      if (v.kind == Value::Kind::kObjectArray && nested) {
        Fail("\"" + key + "\": objects nested this deep are not supported");
      }
      while (true) {
        SkipSpace();
        if (v.kind == Value::Kind::kObjectArray) {
          if (Peek() != '{' || AtEnd()) Fail("\"" + key + "\": an array of objects may hold objects only");
          v.objects.push_back(ParseObjectBody(/*nested=*/true));
        } else {
          if (!(Peek() == '-' || (Peek() >= '0' && Peek() <= '9')) || AtEnd()) {
            Fail("\"" + key + "\": arrays may hold numbers only (or objects only)");
          }
          v.array.push_back(ParseNumber(key));
        }
        SkipSpace();
        if (Peek() == ',' && !AtEnd()) {
          ++pos_;
          continue;
        }
        if (Peek() == ']' && !AtEnd()) {
          ++pos_;
          break;
        }
        Fail("\"" + key + "\": expected ',' or ']' in the array");
      }
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Value::Kind::kNumber;
      v.number = ParseNumber(key);
    } else if (c == '{') {
      Fail("\"" + key + "\": an object is not supported as a value (only in an array of objects)");
    } else if (s_.substr(pos_, 4) == "true" || s_.substr(pos_, 5) == "false" ||
               s_.substr(pos_, 4) == "null") {
      Fail("\"" + key +
           "\": true, false and null are not supported (expected a string, number or array of numbers)");
    } else {
      Fail("\"" + key + "\": expected a string, a number or an array of numbers");
    }
    return v;
  }

  // JSON number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  double ParseNumber(const std::string& key) {
    const std::size_t begin = pos_;
    auto digit = [&] { return pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9'; };
    if (Peek() == '-' && !AtEnd()) ++pos_;
    if (!digit()) Fail("\"" + key + "\": malformed number");
    if (s_[pos_] == '0') {
      ++pos_;
      if (digit()) Fail("\"" + key + "\": leading zeros are not allowed in numbers");
    } else {
      while (digit()) ++pos_;
    }
    if (Peek() == '.' && !AtEnd()) {
      ++pos_;
      if (!digit()) Fail("\"" + key + "\": malformed number (digits expected after '.')");
      while (digit()) ++pos_;
    }
    if ((Peek() == 'e' || Peek() == 'E') && !AtEnd()) {
      ++pos_;
      if ((Peek() == '+' || Peek() == '-') && !AtEnd()) ++pos_;
      if (!digit()) Fail("\"" + key + "\": malformed number (digits expected in the exponent)");
      while (digit()) ++pos_;
    }
    double x = 0.0;
    const char* first = s_.data() + begin;
    const char* last = s_.data() + pos_;
    const auto [ptr, ec] = std::from_chars(first, last, x);
    if (ec == std::errc::result_out_of_range || !std::isfinite(x)) {
      Fail("\"" + key + "\": number out of range", begin + 1);
    }
    if (ec != std::errc() || ptr != last) Fail("\"" + key + "\": malformed number", begin + 1);
    return x;
  }

  static void AppendUtf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::uint32_t ParseHex4() {
    if (pos_ + 4 > s_.size()) Fail("truncated \\u escape");
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<std::uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<std::uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<std::uint32_t>(c - 'A' + 10);
      } else {
        Fail("malformed \\u escape");
      }
    }
    return v;
  }

  std::string ParseString() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (AtEnd()) Fail("unterminated string");
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) Fail("control character in a string (escape it)");
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      if (AtEnd()) Fail("unterminated escape in a string");
      const char e = s_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          std::uint32_t cp = ParseHex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.substr(pos_, 2) != "\\u") Fail("unpaired surrogate in a \\u escape");
            pos_ += 2;
            const std::uint32_t low = ParseHex4();
            if (low < 0xDC00 || low > 0xDFFF) Fail("unpaired surrogate in a \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            Fail("unpaired surrogate in a \\u escape");
          }
          AppendUtf8(out, cp);
          break;
        }
        default:
          Fail(std::string("unknown escape \\") + e + " in a string");
      }
    }
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

}  // namespace

std::vector<Field> ParseJobJsonObject(std::string_view text) { return Parser(text).ParseObject(); }

std::string JsonQuote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static const char* kHex = "0123456789abcdef";
          out += "\\u00";
          out += kHex[(c >> 4) & 0xF];
          out += kHex[c & 0xF];
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string JsonNumber(double x) {
  char buf[64];
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), x);
  if (ec != std::errc()) return "0";
  std::string s(buf, ptr);
  // to_chars may write "1e+20"; that is valid JSON. "inf"/"nan" never reach here (checked before).
  return s;
}

}  // namespace bft::jobs::detail

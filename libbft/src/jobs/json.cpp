// The jobs JSON reader: nlohmann-json's SAX parser does the JSON; this handler keeps only the shapes
// the format allows and names the column of anything else.
#include "jobs/json.h"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <system_error>
#include <utility>

namespace bft::jobs::detail {
namespace {

using Json = nlohmann::json;

// The parser's input: a const char* that records how far the lexer has read, so that the handler can
// name the column of what it is handed (nlohmann's SAX events carry no position).
class TrackingIterator {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackingIterator(const char* p, const char** furthest) : p_(p), furthest_(furthest) {}
  reference operator*() const { return *p_; }
  TrackingIterator& operator++() {
    if (++p_ > *furthest_) *furthest_ = p_;
    return *this;
  }
  TrackingIterator operator++(int) {
    TrackingIterator old = *this;
    ++*this;
    return old;
  }
  bool operator==(const TrackingIterator& other) const { return p_ == other.p_; }
  bool operator!=(const TrackingIterator& other) const { return p_ != other.p_; }

 private:
  const char* p_;
  const char** furthest_;
};

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsStructural(char c) { return c == '{' || c == '}' || c == '[' || c == ']' || c == ',' || c == ':'; }
bool IsNumberChar(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

// Builds the fields of one job object from the parser's events. Depth 1 is the job object, 2 an
// array that is one of its values, 3 an object in such an array (a configuration), 4 an array that
// is one of that object's values; nothing deeper is allowed.
class Handler {
 public:
  explicit Handler(std::string_view text) : text_(text), read_(text.data()) {}

  const char** read() { return &read_; }
  std::vector<Field> TakeFields() { return std::move(fields_); }

  bool null() { return Literal(4); }
  bool boolean(bool value) { return Literal(value ? 4 : 5); }
  bool number_integer(std::int64_t x) { return Number(static_cast<double>(x)); }
  bool number_unsigned(std::uint64_t x) { return Number(static_cast<double>(x)); }
  bool number_float(double x, const std::string&) { return Number(x); }
  bool binary(Json::binary_t&) { return true; }  // JSON text holds no binary values

  bool string(std::string& s) {
    const std::size_t column = StringColumn();
    if (depth_ == 0) Fail("expected '{' at the start of the object", column);
    if (depth_ == 2 || depth_ == 4) ArrayElementError(column);
    Value v;
    v.kind = Value::Kind::kString;
    v.text = std::move(s);
    SetValue(std::move(v));
    return true;
  }

  bool start_object(std::size_t) {
    const std::size_t column = Consumed();  // just after '{': its 1-based column
    if (depth_ == 0) {
      if (done_) Fail("unexpected text after the end of the object", column);
      depth_ = 1;
      return true;
    }
    if (depth_ == 1 || depth_ == 3) {
      Fail("\"" + Key() + "\": an object is not supported as a value (only in an array of objects)", column);
    }
    if (depth_ == 4) Fail("\"" + Key() + "\": objects nested this deep are not supported", column);
    Value& array = Array();
    if (!array.array.empty())
      Fail("\"" + Key() + "\": arrays may hold numbers only (or objects only)", column);
    array.kind = Value::Kind::kObjectArray;
    array.objects.emplace_back();
    depth_ = 3;
    return true;
  }

  bool end_object() {
    if (depth_ == 1) {
      depth_ = 0;
      done_ = true;
    } else {
      depth_ = 2;
    }
    return true;
  }

  bool key(std::string& k) {
    const std::size_t column = StringColumn();
    std::vector<Field>& object = Object();
    for (const Field& f : object) {
      if (f.key == k) Fail("duplicate field \"" + k + "\"", column);
    }
    object.push_back({std::move(k), Value{}});
    awaiting_value_ = true;
    return true;
  }

  bool start_array(std::size_t) {
    const std::size_t column = Consumed();
    if (depth_ == 0) Fail("expected '{' at the start of the object", column);
    if (depth_ == 2 || depth_ == 4) ArrayElementError(column);
    Value v;
    v.kind = Value::Kind::kNumberArray;
    SetValue(std::move(v));
    ++depth_;
    return true;
  }

  bool end_array() {
    --depth_;
    return true;
  }

  // Names what the parser refused in the words of the format, at the column where it starts.
  // `position` counts the characters the lexer read (one past the text at its end).
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    const bool end = position > text_.size();
    const std::size_t column = end ? position : TokenColumn(position - 1);
    if (e.id == 406) Fail("\"" + Key() + "\": number out of range", column);
    // A number with a leading zero ("05") lexes as 0 and then 5: name the digit after the zero.
    if (!end && IsDigit(text_[position - 1])) {
      std::size_t z = position - 1;
      while (z > 0 && IsNumberChar(text_[z - 1])) --z;
      if (text_[z] == '-') ++z;
      if (text_[z] == '0' && z + 1 < text_.size() && IsDigit(text_[z + 1])) {
        Fail("\"" + Key() + "\": leading zeros are not allowed in numbers", z + 2);
      }
    }
    if (depth_ == 0) {
      Fail(done_ ? "unexpected text after the end of the object" : "expected '{' at the start of the object",
           column);
    }
    const std::string what = e.what();
    if (what.find("invalid string") != std::string::npos) {
      Fail("malformed string: " + LexerDetail(what, "invalid string: "), position);
    }
    // The character before the refused token (whitespace skipped) says what was expected.
    std::size_t k = column - 1;
    while (k > 0 && IsSpace(text_[k - 1])) --k;
    const char before = k > 0 ? text_[k - 1] : '\0';
    if (depth_ == 2 || depth_ == 4) {
      if (before == '[' || before == ',') ArrayElementError(column);
      Fail("\"" + Key() + "\": expected ',' or ']' in the array", column);
    }
    if (awaiting_value_) {
      if (before != ':') Fail("expected ':' after field name \"" + Key() + "\"", column);
      if (end) Fail("missing value of \"" + Key() + "\"", column);
      if (what.find("invalid number") != std::string::npos)
        Fail("\"" + Key() + "\": malformed number", column);
      Fail("\"" + Key() + "\": expected a string, a number or an array of numbers", column);
    }
    if (before == '{' || before == ',') Fail("expected a field name in double quotes", column);
    Fail("expected ',' or '}' after the value of \"" + Key() + "\"", column);
  }

 private:
  [[noreturn]] static void Fail(const std::string& what, std::size_t column) {
    throw JsonError("column " + std::to_string(column) + ": " + what);
  }

  // The part of nlohmann's message after `marker`, up to "; last read".
  static std::string LexerDetail(const std::string& what, const std::string& marker) {
    const std::size_t from = what.find(marker);
    if (from == std::string::npos) return what;
    const std::size_t to = what.find("; last read", from);
    return what.substr(from + marker.size(),
                       to == std::string::npos ? std::string::npos : to - from - marker.size());
  }

  std::size_t Consumed() const { return static_cast<std::size_t>(read_ - text_.data()); }

  // The 1-based column of the opening quote of the string whose closing quote ends at `end` (by
  // default, the one the lexer has just read).
  std::size_t StringColumn() const { return StringColumn(Consumed()); }
  std::size_t StringColumn(std::size_t end) const {
    std::size_t i = end - 1;  // the closing quote
    while (i > 0) {
      --i;
      if (text_[i] != '"') continue;
      std::size_t slashes = 0;
      while (slashes < i && text_[i - 1 - slashes] == '\\') ++slashes;
      if (slashes % 2 == 0) break;
    }
    return i + 1;
  }

  // The 1-based column where the token that ends at text_[last] starts: a structural character, a
  // string (back to its opening quote) or a run of anything else (a number, a literal, garbage).
  std::size_t TokenColumn(std::size_t last) const {
    if (IsStructural(text_[last])) return last + 1;
    if (text_[last] == '"') return StringColumn(last + 1);
    std::size_t i = last;
    while (i > 0 && !IsSpace(text_[i - 1]) && !IsStructural(text_[i - 1]) && text_[i - 1] != '"') --i;
    return i + 1;
  }

  // The 1-based column of the number the lexer has just read (it reads one character past a number
  // that does not end the text).
  std::size_t NumberColumn() const {
    std::size_t i = Consumed();
    if (i > 0 && !IsNumberChar(text_[i - 1])) --i;
    while (i > 0 && IsNumberChar(text_[i - 1])) --i;
    return i + 1;
  }

  // The object whose fields are being read (the job's, or a configuration's at depth 3 and 4).
  std::vector<Field>& Object() { return depth_ >= 3 ? fields_.back().value.objects.back() : fields_; }
  const std::vector<Field>& Object() const {
    return depth_ >= 3 ? fields_.back().value.objects.back() : fields_;
  }
  // The array whose elements are being read (depth 2 and 4).
  Value& Array() { return Object().back().value; }
  // The field a message is about: the one being read, else the array the reader is in.
  const std::string& Key() const {
    static const std::string none;
    if (depth_ == 0) return none;
    const std::vector<Field>& object = Object();
    if (!object.empty()) return object.back().key;
    return depth_ == 3 ? fields_.back().key : none;
  }

  void SetValue(Value v) {
    Object().back().value = std::move(v);
    awaiting_value_ = false;
  }

  [[noreturn]] void ArrayElementError(std::size_t column) {
    if (Array().kind == Value::Kind::kObjectArray)
      Fail("\"" + Key() + "\": an array of objects may hold objects only", column);
    Fail("\"" + Key() + "\": arrays may hold numbers only (or objects only)", column);
  }

  bool Literal(std::size_t length) {
    const std::size_t column = Consumed() - length + 1;
    if (depth_ == 0) Fail("expected '{' at the start of the object", column);
    if (depth_ == 2 || depth_ == 4) ArrayElementError(column);
    Fail("\"" + Key() +
             "\": true, false and null are not supported (expected a string, number or array of numbers)",
         column);
  }

  bool Number(double x) {
    if (depth_ == 0) Fail("expected '{' at the start of the object", NumberColumn());
    if (depth_ == 2 || depth_ == 4) {
      Value& array = Array();
      if (array.kind == Value::Kind::kObjectArray) ArrayElementError(NumberColumn());
      array.array.push_back(x);
      return true;
    }
    Value v;
    v.number = x;
    SetValue(std::move(v));
    return true;
  }

  std::string_view text_;
  const char* read_;
  std::vector<Field> fields_;
  int depth_ = 0;
  bool done_ = false;
  bool awaiting_value_ = false;
};

}  // namespace

std::vector<Field> ParseJobJsonObject(std::string_view text) {
  // nlohmann's lexer takes a NUL byte for the end of the text; the line reader refuses them anyway.
  const std::size_t nul = text.find('\0');
  if (nul != std::string_view::npos) throw JsonError("column " + std::to_string(nul + 1) + ": NUL byte");
  Handler handler(text);
  const TrackingIterator first(text.data(), handler.read());
  const TrackingIterator last(text.data() + text.size(), handler.read());
  Json::sax_parse(first, last, &handler);
  return handler.TakeFields();
}

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

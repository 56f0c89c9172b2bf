// A small strict parser for the JSON objects of a jobs JSONL line: an object whose values are
// strings, numbers, arrays of numbers, or arrays of flat objects (objects whose own values are
// strings, numbers or arrays of numbers: a job's configurations). Anything else (an object as a
// value, objects nested deeper, true/false/null, arrays of strings, mixed arrays, trailing commas,
// duplicate keys, text after the object) is an error.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace bft::sim::detail {

// Thrown with a message such as "column 17: expected ',' or '}'"; the reader adds file and line.
class JsonError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct JsonField;

struct JsonValue {
  // An empty array is kNumberArray: `[]` holds neither numbers nor objects.
  enum class Kind { kString, kNumber, kNumberArray, kObjectArray };
  Kind kind = Kind::kNumber;
  std::string text;                             // kString
  double number = 0.0;                          // kNumber
  std::vector<double> array;                    // kNumberArray
  std::vector<std::vector<JsonField>> objects;  // kObjectArray: each object's fields in order
  std::vector<std::size_t> object_columns;      // kObjectArray: where each object starts (1-based)
};

struct JsonField {
  std::string key;
  JsonValue value;
};

// Parses one object (surrounding whitespace allowed). Fields are returned in their order.
std::vector<JsonField> ParseJobJsonObject(std::string_view text);

// `s` as a JSON string literal, quotes included.
std::string JsonQuote(std::string_view s);
// The shortest text that reads back as exactly `x` (finite x), as a JSON number.
std::string JsonNumber(double x);

}  // namespace bft::sim::detail

// The strict reader of the JSON objects of a jobs JSONL line (nlohmann-json's SAX parser underneath,
// json.cpp): an object whose values are
// strings, numbers, arrays of numbers, or arrays of flat objects (objects whose own values are
// strings, numbers or arrays of numbers: a job's configurations). Anything else (an object as a
// value, objects nested deeper, true/false/null, arrays of strings, mixed arrays, trailing commas,
// duplicate keys, text after the object) is an error.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bft/jobs.h"

namespace bft::jobs::detail {

// Thrown with a message such as "column 17: expected ',' or '}'"; the reader adds file and line.
class JsonError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses one object (surrounding whitespace allowed). Fields are returned in their order.
std::vector<Field> ParseJobJsonObject(std::string_view text);

// `s` as a JSON string literal, quotes included.
std::string JsonQuote(std::string_view s);
// The shortest text that reads back as exactly `x` (finite x), as a JSON number.
std::string JsonNumber(double x);

}  // namespace bft::jobs::detail

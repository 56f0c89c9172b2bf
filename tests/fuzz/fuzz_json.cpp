// libFuzzer target: the JSON parser of the workload format. It either parses or throws
// JsonError; what it parses must survive a round trip through JsonQuote / JsonNumber.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "jobs/json.h"

namespace detail = bft::jobs::detail;
using bft::jobs::Field;
using bft::jobs::Value;

namespace {

// The object written back with JsonQuote / JsonNumber.
std::string Write(const std::vector<Field>& fields) {
  std::string out = "{";
  for (std::size_t k = 0; k < fields.size(); ++k) {
    const Value& v = fields[k].value;
    out += (k ? ", " : "") + detail::JsonQuote(fields[k].key) + ": ";
    if (v.kind == Value::Kind::kString) {
      out += detail::JsonQuote(v.text);
    } else if (v.kind == Value::Kind::kNumber) {
      out += detail::JsonNumber(v.number);
    } else if (v.kind == Value::Kind::kObjectArray) {
      out += "[";
      for (std::size_t i = 0; i < v.objects.size(); ++i) out += (i ? ", " : "") + Write(v.objects[i]);
      out += "]";
    } else {
      out += "[";
      for (std::size_t i = 0; i < v.array.size(); ++i)
        out += (i ? ", " : "") + detail::JsonNumber(v.array[i]);
      out += "]";
    }
  }
  return out + "}";
}

bool Same(const std::vector<Field>& a, const std::vector<Field>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t k = 0; k < a.size(); ++k) {
    const Value& x = a[k].value;
    const Value& y = b[k].value;
    if (a[k].key != b[k].key || x.kind != y.kind || x.text != y.text || x.array != y.array ||
        !(x.number == y.number) || x.objects.size() != y.objects.size()) {
      return false;
    }
    for (std::size_t i = 0; i < x.objects.size(); ++i)
      if (!Same(x.objects[i], y.objects[i])) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<Field> fields;
  try {
    fields = detail::ParseJobJsonObject(text);
  } catch (const detail::JsonError&) {
    return 0;
  }
  // Write the object back and parse it again: the same keys and values.
  const std::vector<Field> back = detail::ParseJobJsonObject(Write(fields));  // must not throw
  if (!Same(fields, back)) std::abort();
  return 0;
}

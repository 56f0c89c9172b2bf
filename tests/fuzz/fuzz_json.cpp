// libFuzzer target: the JSON parser of the workload format. It either parses or throws
// JsonError; what it parses must survive a round trip through JsonQuote / JsonNumber.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "sim/json.h"

namespace detail = bft::sim::detail;

namespace {

// The object written back with JsonQuote / JsonNumber.
std::string Write(const std::vector<detail::JsonField>& fields) {
  std::string out = "{";
  for (std::size_t k = 0; k < fields.size(); ++k) {
    const detail::JsonValue& v = fields[k].value;
    out += (k ? ", " : "") + detail::JsonQuote(fields[k].key) + ": ";
    if (v.kind == detail::JsonValue::Kind::kString) {
      out += detail::JsonQuote(v.text);
    } else if (v.kind == detail::JsonValue::Kind::kNumber) {
      out += detail::JsonNumber(v.number);
    } else if (v.kind == detail::JsonValue::Kind::kObjectArray) {
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

bool Same(const std::vector<detail::JsonField>& a, const std::vector<detail::JsonField>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t k = 0; k < a.size(); ++k) {
    const detail::JsonValue& x = a[k].value;
    const detail::JsonValue& y = b[k].value;
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
  std::vector<detail::JsonField> fields;
  try {
    fields = detail::ParseJobJsonObject(text);
  } catch (const detail::JsonError&) {
    return 0;
  }
  // Write the object back and parse it again: the same keys and values.
  const std::vector<detail::JsonField> back = detail::ParseJobJsonObject(Write(fields));  // must not throw
  if (!Same(fields, back)) std::abort();
  return 0;
}

// libFuzzer target: the flat JSON parser of the workload format. It either parses or throws
// JsonError; what it parses must survive a round trip through JsonQuote / JsonNumber.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "sim/json.h"

namespace detail = bft::sim::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<detail::JsonField> fields;
  try {
    fields = detail::ParseFlatJsonObject(text);
  } catch (const detail::JsonError&) {
    return 0;
  }
  // Write the object back and parse it again: the same keys and values.
  std::string again = "{";
  for (std::size_t k = 0; k < fields.size(); ++k) {
    const detail::JsonValue& v = fields[k].value;
    again += (k ? ", " : "") + detail::JsonQuote(fields[k].key) + ": ";
    if (v.kind == detail::JsonValue::Kind::kString) {
      again += detail::JsonQuote(v.text);
    } else if (v.kind == detail::JsonValue::Kind::kNumber) {
      again += detail::JsonNumber(v.number);
    } else {
      again += "[";
      for (std::size_t i = 0; i < v.array.size(); ++i)
        again += (i ? ", " : "") + detail::JsonNumber(v.array[i]);
      again += "]";
    }
  }
  again += "}";
  const std::vector<detail::JsonField> back = detail::ParseFlatJsonObject(again);  // must not throw
  if (back.size() != fields.size()) std::abort();
  for (std::size_t k = 0; k < fields.size(); ++k) {
    if (back[k].key != fields[k].key || back[k].value.kind != fields[k].value.kind ||
        back[k].value.text != fields[k].value.text || back[k].value.array != fields[k].value.array ||
        !(back[k].value.number == fields[k].value.number)) {
      std::abort();
    }
  }
  return 0;
}

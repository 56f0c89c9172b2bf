// Slurm's hostlist expressions ("c[01-03,07]n[1-2]"), expanded to node names: what sacct's NodeList
// holds, and what `bft trace import` takes for the machine's nodes.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bft/sim.h"
#include "common/text_io.h"
#include "sim/trace/import_common.h"
#include "sim/trace/text_input.h"

namespace bft::sim {

using detail::IsDigits;
using detail::ParseInt64;
using detail::Split;
using text::Shorten;

// The memory a hostlist's names may take, each counted as its characters plus the string itself: a
// million names of up to 31 characters, more than any real hostlist.
constexpr std::uint64_t kMaxHostlistBytes = 64ULL << 20;

namespace {

// 1000000 as "1,000,000", for messages.
std::string WithThousands(std::uint64_t n) {
  std::string digits = std::to_string(n);
  for (std::size_t i = digits.size(); i > 3; i -= 3) digits.insert(i - 3, ",");
  return digits;
}

}  // namespace

std::vector<std::string> ExpandHostlist(const std::string& expression, std::size_t max_names) {
  auto fail = [&](const std::string& what) -> void {
    throw InvalidArgument("hostlist \"" + Shorten(expression) + "\": " + what);
  };
  // Top-level comma-separated items; commas inside brackets separate ranges.
  std::vector<std::string_view> items;
  {
    const std::string_view e(expression);
    int depth = 0;
    std::size_t begin = 0;
    for (std::size_t i = 0; i <= e.size(); ++i) {
      const char c = i < e.size() ? e[i] : ',';
      if (c == '[') {
        if (++depth > 1) fail("nested '['");
      } else if (c == ']') {
        if (--depth < 0) fail("']' without '['");
      } else if (c == ',' && depth == 0) {
        items.push_back(e.substr(begin, i - begin));
        begin = i + 1;
      }
    }
    if (depth != 0) fail("'[' without ']'");
  }
  const std::string too_many = "more than " + WithThousands(max_names) + " names";
  std::vector<std::string> out;
  std::uint64_t out_bytes = 0;
  for (const std::string_view item : items) {
    if (item.empty()) fail("an empty name (two commas in a row, or a comma at an end)");
    // The item as literals around bracket lists: each name is literals[0] + a suffix of lists[0] +
    // literals[1] + ... The count of names is checked before a list's suffixes are made, their
    // memory before any name is, so a typo cannot exhaust memory; each name is then built once.
    std::vector<std::string_view> literals;
    std::vector<std::vector<std::string>> lists;
    std::uint64_t count = 1;  // names of the item
    std::size_t pos = 0;
    for (;;) {
      const std::size_t open = item.find('[', pos);
      literals.push_back(item.substr(pos, open == std::string_view::npos ? item.npos : open - pos));
      if (open == std::string_view::npos) break;
      const std::size_t close = item.find(']', open);
      struct Range {
        std::int64_t lo, hi;
        std::size_t width;  // zero padding of the first bound
      };
      std::vector<Range> ranges;
      std::uint64_t list_size = 0;
      for (const std::string_view range : Split(item.substr(open + 1, close - open - 1), ',')) {
        const std::size_t dash = range.find('-');
        const std::string_view lo = range.substr(0, dash);
        const std::string_view hi = dash == std::string_view::npos ? lo : range.substr(dash + 1);
        if (!IsDigits(lo) || !IsDigits(hi) || lo.size() > 18 || hi.size() > 18) {
          fail("\"" + std::string(range) + "\" inside brackets is not a number or a range a-b of numbers");
        }
        Range r{0, 0, lo.size()};
        ParseInt64(lo, &r.lo);
        ParseInt64(hi, &r.hi);
        if (r.hi < r.lo) fail("range " + std::string(range) + " runs backwards");
        list_size += static_cast<std::uint64_t>(r.hi - r.lo) + 1;
        if (list_size > max_names) fail(too_many);
        ranges.push_back(r);
      }
      if (count * list_size + out.size() > max_names) fail(too_many);
      count *= list_size;
      std::vector<std::string>& suffixes = lists.emplace_back();
      suffixes.reserve(list_size);
      for (const Range& r : ranges) {
        for (std::int64_t v = r.lo; v <= r.hi; ++v) {
          std::string digits = std::to_string(v);
          if (digits.size() < r.width) digits.insert(0, r.width - digits.size(), '0');
          suffixes.push_back(std::move(digits));
        }
      }
      pos = close + 1;
    }
    // The memory the names take: every name holds every literal; each suffix of a list is in
    // count / (its list's size) names.
    std::uint64_t bytes = count * sizeof(std::string);
    for (const std::string_view literal : literals) bytes += count * literal.size();
    for (const std::vector<std::string>& suffixes : lists) {
      std::uint64_t suffix_bytes = 0;
      for (const std::string& suffix : suffixes) suffix_bytes += suffix.size();
      bytes += count / suffixes.size() * suffix_bytes;
    }
    if (bytes + out_bytes > kMaxHostlistBytes) fail("its names would take more than 64 MiB");
    out_bytes += bytes;
    // Every combination, the last list turning fastest: r[1-2]n[8-10] gives r1n8 r1n9 r1n10 r2n8 ...
    std::vector<std::size_t> digit(lists.size(), 0);
    for (std::uint64_t k = 0; k < count; ++k) {
      std::string name(literals[0]);
      for (std::size_t i = 0; i < lists.size(); ++i) {
        name += lists[i][digit[i]];
        name += literals[i + 1];
      }
      std::string why;
      if (!detail::ValidNodeName(name, &why)) fail(why);
      out.push_back(std::move(name));
      for (std::size_t i = lists.size(); i-- > 0;) {
        if (++digit[i] < lists[i].size()) break;
        digit[i] = 0;
      }
    }
  }
  return out;
}

}  // namespace bft::sim

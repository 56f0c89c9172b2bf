// Dates as sacct prints them (ParseSacctTime): epoch seconds or an ISO local time.
#include <cstdint>
#include <string>
#include <string_view>

#include "bft/sim.h"
#include "common/text_io.h"
#include "sim/trace/import_common.h"

namespace bft::sim {
namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
std::int64_t DaysFromCivil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

}  // namespace

using detail::IsDigits;
using detail::ParseInt64;
using text::Shorten;

std::int64_t ParseSacctTime(const std::string& text) {
  const std::string_view t(text);
  std::int64_t value = 0;
  if (IsDigits(t) && t.size() <= 12 && ParseInt64(t, &value)) return value;
  // YYYY-MM-DDTHH:MM:SS
  auto digits_at = [&](std::size_t pos, std::size_t n, std::int64_t* v) {
    return pos + n <= t.size() && IsDigits(t.substr(pos, n)) && ParseInt64(t.substr(pos, n), v);
  };
  std::int64_t y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  const bool shape = t.size() == 19 && t[4] == '-' && t[7] == '-' && t[10] == 'T' && t[13] == ':' &&
                     t[16] == ':' && digits_at(0, 4, &y) && digits_at(5, 2, &mo) && digits_at(8, 2, &d) &&
                     digits_at(11, 2, &h) && digits_at(14, 2, &mi) && digits_at(17, 2, &s);
  static constexpr int kDaysInMonth[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (!shape || mo < 1 || mo > 12 || d < 1 || d > kDaysInMonth[mo - 1] || (mo == 2 && d == 29 && !leap) ||
      h > 23 || mi > 59 || s > 59) {
    throw InvalidArgument("time \"" + Shorten(t) +
                          "\": expected Unix seconds or YYYY-MM-DDTHH:MM:SS (sacct's formats)");
  }
  return DaysFromCivil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d)) * 86400 + h * 3600 + mi * 60 +
         s;
}

}  // namespace bft::sim

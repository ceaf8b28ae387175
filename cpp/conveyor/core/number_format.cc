#include "conveyor/core/number_format.h"

#include <charconv>
#include <cmath>
#include <iterator>

namespace conveyor {
namespace {

std::string to_text(double value, std::chars_format format, int precision) {
  // Enough for any double in either format at the precisions used (a fixed
  // 1e308 has 309 digits).
  char text[400];
  const std::to_chars_result result = std::to_chars(text, text + sizeof text, value, format, precision);
  if (result.ec != std::errc()) return "?";  // Only for a precision far beyond any message's.
  return std::string(text, result.ptr);
}

}  // namespace

std::string format_general(double value, int significant) {
  return to_text(value, std::chars_format::general, significant);
}

std::string format_fixed(double value, int decimals) { return to_text(value, std::chars_format::fixed, decimals); }

std::string human_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  double value = bytes;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return format_fixed(value, value == std::floor(value) ? 0 : 1) + " " + kUnits[unit];
}

std::string format_shortest(double value) {
  char text[32];  // The longest is "-2.2250738585072014e-308" (24).
  const std::to_chars_result result = std::to_chars(text, text + sizeof text, value);
  return std::string(text, result.ptr);
}

}  // namespace conveyor

#pragma once

#include <cstdint>

namespace conveyor {

/// IEEE binary16 from binary32, rounded to nearest even (F. Giesen's
/// float_to_half_fast3_rtne); matches numpy's astype(float16) and torch's
/// .half(). Thread-safe (pure).
uint16_t float_to_half(float value) noexcept;

/// The binary32 value of an IEEE binary16 (exact: every half is a float).
/// Thread-safe (pure).
float half_to_float(uint16_t half) noexcept;

/// bfloat16 (the high 16 bits of a binary32) from binary32, rounded to
/// nearest even; NaN stays a quiet NaN. Matches torch's .bfloat16().
/// Thread-safe (pure).
uint16_t float_to_bfloat16(float value) noexcept;

/// The binary32 value of a bfloat16 (exact). Thread-safe (pure).
float bfloat16_to_float(uint16_t value) noexcept;

}  // namespace conveyor

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

}  // namespace conveyor

#pragma once

#include <cstdint>
#include <cstring>

namespace conveyor {

/// IEEE binary16 bits of a binary32 value, rounded to nearest even (F.
/// Giesen's float_to_half_fast3_rtne); matches numpy's astype(float16) and
/// torch's .half(). Pure; thread-safe.
inline uint16_t float_to_half(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint16_t h;
  if (x >= (127u + 16u) << 23) {  // Overflow to infinity, or NaN.
    h = x > (255u << 23) ? 0x7e00 : 0x7c00;
  } else if (x < (113u << 23)) {  // Subnormal or zero: let the FPU round.
    const uint32_t magic_bits = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    float magic;
    std::memcpy(&magic, &magic_bits, sizeof(magic));
    float f;
    std::memcpy(&f, &x, sizeof(f));
    f += magic;
    std::memcpy(&x, &f, sizeof(x));
    h = static_cast<uint16_t>(x - magic_bits);
  } else {
    const uint32_t mantissa_odd = (x >> 13) & 1u;
    x -= 112u << 23;  // Rebias the exponent from 127 to 15.
    x += 0xfffu + mantissa_odd;
    h = static_cast<uint16_t>(x >> 13);
  }
  return static_cast<uint16_t>(h | (sign >> 16));
}

}  // namespace conveyor

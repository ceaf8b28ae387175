#include "conveyor/core/float16.h"

#include <cstring>

namespace conveyor {

uint16_t float_to_half(float value) noexcept {
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

float half_to_float(uint16_t half) noexcept {
  // F. Giesen's half_to_float: shift the exponent and mantissa into place,
  // then fix up infinities/NaNs and subnormals (renormalised by the FPU).
  const uint32_t shifted_exp = 0x7c00u << 13;
  uint32_t x = (static_cast<uint32_t>(half) & 0x7fffu) << 13;
  const uint32_t exp = shifted_exp & x;
  x += (127u - 15u) << 23;
  if (exp == shifted_exp) {
    x += (128u - 16u) << 23;  // Infinity or NaN.
  } else if (exp == 0) {
    x += 1u << 23;  // Zero or subnormal.
    const uint32_t magic_bits = 113u << 23;
    float magic, f;
    std::memcpy(&magic, &magic_bits, sizeof(magic));
    std::memcpy(&f, &x, sizeof(f));
    f -= magic;
    std::memcpy(&x, &f, sizeof(x));
  }
  x |= (static_cast<uint32_t>(half) & 0x8000u) << 16;
  float result;
  std::memcpy(&result, &x, sizeof(result));
  return result;
}

uint16_t float_to_bfloat16(float value) noexcept {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // NaN: keep it quiet.
  x += 0x7fffu + ((x >> 16) & 1u);  // Round to nearest, ties to even (may carry into the exponent: rounds up to inf).
  return static_cast<uint16_t>(x >> 16);
}

float bfloat16_to_float(uint16_t value) noexcept {
  const uint32_t x = static_cast<uint32_t>(value) << 16;
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}

}  // namespace conveyor

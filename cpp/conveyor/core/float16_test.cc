#include "conveyor/core/float16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace conveyor {
namespace {

TEST(Float16Test, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_EQ(float_to_half(f) & 0x7c00u, 0x7c00u) << h;
      continue;
    }
    EXPECT_EQ(float_to_half(f), h) << h;
  }
}

TEST(Float16Test, KnownValues) {
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(half_to_float(0x7c00)));
  EXPECT_EQ(float_to_half(0.1f), 0x2e66);
}

}  // namespace
}  // namespace conveyor

#include "conveyor/core/number_format.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <limits>

namespace conveyor {
namespace {

TEST(NumberFormatTest, GeneralIsPrintfG) {
  EXPECT_EQ(format_general(0.25), "0.25");
  EXPECT_EQ(format_general(1500000), "1.5e+06");
  EXPECT_EQ(format_general(1e-9, 17), "1.0000000000000001e-09");
  EXPECT_EQ(format_general(0.1, 17), "0.10000000000000001");
  EXPECT_EQ(format_general(2.0 / 3, 2), "0.67");
  EXPECT_EQ(format_general(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(format_general(-std::numeric_limits<double>::infinity()), "-inf");
}

TEST(NumberFormatTest, FixedIsPrintfF) {
  EXPECT_EQ(format_fixed(1500, 0), "1500");
  EXPECT_EQ(format_fixed(1.5, 1), "1.5");
  EXPECT_EQ(format_fixed(12.345, 1), "12.3");
  EXPECT_EQ(format_fixed(1e300, 0).size(), 301u);
}

TEST(NumberFormatTest, HumanBytesUseBinaryUnitsWithOneDecimalUnlessWhole) {
  EXPECT_EQ(human_bytes(768), "768 bytes");
  EXPECT_EQ(human_bytes(1024), "1 KiB");
  EXPECT_EQ(human_bytes(1.5 * 1024 * 1024 * 1024), "1.5 GiB");
  EXPECT_EQ(human_bytes(8.0 * 1024 * 1024 * 1024 * 1024), "8 TiB");
}

TEST(NumberFormatTest, ShortestReadsBack) {
  EXPECT_EQ(format_shortest(0.1), "0.1");
  EXPECT_EQ(format_shortest(1e-9), "1e-09");
  EXPECT_EQ(format_shortest(0.5), "0.5");
  EXPECT_EQ(format_shortest(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(format_shortest(-std::numeric_limits<double>::denorm_min()), "-5e-324");
  EXPECT_EQ(format_shortest(std::numeric_limits<double>::quiet_NaN()), "nan");
}

TEST(NumberFormatTest, MatchesPrintfAcrossMagnitudes) {
  for (double v : {0.0, 1e-300, 3.14159, 123456789.0, 1e300}) {
    for (int p : {0, 1, 3, 17}) {
      char g[512], f[512];
      std::snprintf(g, sizeof g, "%.*g", p, v);
      std::snprintf(f, sizeof f, "%.*f", p, v);
      EXPECT_EQ(format_general(v, p), g) << v << " " << p;
      EXPECT_EQ(format_fixed(v, p), f) << v << " " << p;
    }
  }
}

}  // namespace
}  // namespace conveyor

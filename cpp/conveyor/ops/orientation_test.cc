#include "conveyor/ops/orientation.h"

#include <gtest/gtest.h>

#include <vector>

namespace conveyor::detail {
namespace {

// An EXIF block: optional "Exif\0\0", a TIFF header and IFD0 with one entry.
std::vector<uint8_t> exif(bool little, uint16_t tag, uint16_t type, uint32_t value, bool prefix) {
  std::vector<uint8_t> out;
  if (prefix) out = {'E', 'x', 'i', 'f', 0, 0};
  auto put = [&](uint32_t x, int bytes) {
    for (int i = 0; i < bytes; ++i) {
      const int shift = little ? 8 * i : 8 * (bytes - 1 - i);
      out.push_back(static_cast<uint8_t>(x >> shift));
    }
  };
  out.push_back(little ? 'I' : 'M');
  out.push_back(little ? 'I' : 'M');
  put(42, 2);
  put(8, 4);
  put(1, 2);
  put(tag, 2);
  put(type, 2);
  put(1, 4);
  if (type == 3) {
    put(value, 2);
    put(0, 2);
  } else {
    put(value, 4);
  }
  put(0, 4);
  return out;
}

TEST(OrientationTest, ReadsTheTagInEitherByteOrderWithOrWithoutPrefix) {
  for (bool little : {true, false}) {
    for (bool prefix : {true, false}) {
      for (int o = 1; o <= 8; ++o) {
        EXPECT_EQ(exif_orientation(exif(little, 0x0112, 3, static_cast<uint32_t>(o), prefix)), o);
      }
      EXPECT_EQ(exif_orientation(exif(little, 0x0112, 4, 6, prefix)), 6);  // LONG
    }
  }
}

TEST(OrientationTest, AbsentOrMalformedIsOne) {
  EXPECT_EQ(exif_orientation({}), 1);
  EXPECT_EQ(exif_orientation(exif(true, 0x0110, 3, 6, false)), 1);  // Another tag.
  EXPECT_EQ(exif_orientation(exif(true, 0x0112, 3, 9, false)), 1);  // Out of 1..8.
  EXPECT_EQ(exif_orientation(exif(true, 0x0112, 2, 6, false)), 1);  // Wrong type.
  std::vector<uint8_t> bad = exif(true, 0x0112, 3, 6, false);
  bad[4] = 0xF0;  // IFD offset past the end.
  EXPECT_EQ(exif_orientation(bad), 1);
  bad = exif(true, 0x0112, 3, 6, false);
  bad[8] = 200;  // 200 entries, one present: reads stop at the end.
  EXPECT_EQ(exif_orientation(bad), 6);
  bad.resize(bad.size() - 8);  // The entry cut short.
  EXPECT_EQ(exif_orientation(bad), 1);
}

TEST(OrientationTest, RegionsMapBothWays) {
  const int w = 30, h = 20;
  const Region r{3, 4, 5, 6};
  for (int o = 1; o <= 8; ++o) {
    const Region s = to_stored(r, o, w, h);
    const auto back = to_displayed({double(s.x), double(s.y), double(s.width), double(s.height)}, o, w, h);
    EXPECT_EQ(back[0], r.x) << o;
    EXPECT_EQ(back[1], r.y) << o;
    EXPECT_EQ(back[2], r.width) << o;
    EXPECT_EQ(back[3], r.height) << o;
  }
}

}  // namespace
}  // namespace conveyor::detail

#include "conveyor/core/geometry.h"

#include <gtest/gtest.h>

namespace conveyor {
namespace {

// A 100 x 200 (h x w) crop at (top 50, left 20) of a source, resized to 50 x 100.
SampleGeometry crop_and_halve(bool flip) { return {20, 50, 2, 2, flip, 50, 100}; }

TEST(TransformBoxesTest, CropsAndResizes) {
  auto out = transform_boxes({{40, 60, 20, 10, 7}}, crop_and_halve(false));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], (BoundingBox{10, 5, 10, 5, 7}));
}

TEST(TransformBoxesTest, FlipsMirrorTheBox) {
  auto out = transform_boxes({{40, 60, 20, 10, 7}}, crop_and_halve(true));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], (BoundingBox{80, 5, 10, 5, 7}));
}

TEST(TransformBoxesTest, ClipsPartlyVisibleAndDropsCroppedAway) {
  auto out = transform_boxes({{0, 0, 30, 60, 1},       // Top-left corner partly inside: clipped.
                              {300, 60, 10, 10, 2},    // Right of the crop: dropped.
                              {40, 0, 10, 50, 3},      // Ends exactly at the crop's top edge: dropped.
                              {210, 140, 40, 40, 4}},  // Bottom-right partly inside: clipped.
                             crop_and_halve(false));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], (BoundingBox{0, 0, 5, 5, 1}));
  EXPECT_EQ(out[1], (BoundingBox{95, 45, 5, 5, 4}));
}

}  // namespace
}  // namespace conveyor

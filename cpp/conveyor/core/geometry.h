#pragma once

#include <cstdint>
#include <vector>

namespace conveyor {

/// An object's box in pixels (COCO's x, y, width, height) and its category.
struct BoundingBox {
  float x = 0;
  float y = 0;
  float width = 0;
  float height = 0;
  int64_t category = 0;

  bool operator==(const BoundingBox&) const = default;
};

/// Where a transformed image's pixels come from: output pixel edge (y, x)
/// maps to source position (y0 + y * sy, x0 + x * sx), then the output is
/// mirrored horizontally when `flip`, vertically when `vflip`. Used by the
/// image pipeline so that annotations follow the image's crops, resizes and
/// flips.
struct SampleGeometry {
  double x0 = 0;
  double y0 = 0;
  double sx = 1;
  double sy = 1;
  bool flip = false;
  int out_height = 0;
  int out_width = 0;
  bool vflip = false;
};

/// Maps boxes of the source image onto the transformed image: boxes entirely
/// cropped away are dropped, partly visible ones are clipped to the image.
/// A pure function.
std::vector<BoundingBox> transform_boxes(const std::vector<BoundingBox>& boxes, const SampleGeometry& geometry);

}  // namespace conveyor

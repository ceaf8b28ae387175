#include "conveyor/core/geometry.h"

#include <algorithm>

namespace conveyor {

std::vector<BoundingBox> transform_boxes(const std::vector<BoundingBox>& boxes, const SampleGeometry& g) {
  std::vector<BoundingBox> out;
  out.reserve(boxes.size());
  const double w = g.out_width, h = g.out_height;
  for (const BoundingBox& box : boxes) {
    double x0 = (box.x - g.x0) / g.sx, x1 = (box.x + box.width - g.x0) / g.sx;
    double y0 = std::clamp((box.y - g.y0) / g.sy, 0.0, h);
    double y1 = std::clamp((box.y + box.height - g.y0) / g.sy, 0.0, h);
    x0 = std::clamp(x0, 0.0, w);
    x1 = std::clamp(x1, 0.0, w);
    if (x1 <= x0 || y1 <= y0) continue;  // Cropped away.
    if (g.flip) {
      const double mirrored = w - x1;
      x1 = w - x0;
      x0 = mirrored;
    }
    if (g.vflip) {
      const double mirrored = h - y1;
      y1 = h - y0;
      y0 = mirrored;
    }
    out.push_back({static_cast<float>(x0), static_cast<float>(y0), static_cast<float>(x1 - x0),
                   static_cast<float>(y1 - y0), box.category});
  }
  return out;
}

}  // namespace conveyor

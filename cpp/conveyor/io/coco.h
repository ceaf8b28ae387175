#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace conveyor {

/// One object of a COCO "instances" annotation file (segmentation is not kept).
struct CocoAnnotation {
  int64_t id = 0;
  int64_t category_id = 0;
  std::array<double, 4> bbox{};  ///< x, y, width, height in pixels (COCO's xywh).
  double area = 0;
  bool iscrowd = false;
};

/// One image and its annotations, in the order of the annotation file.
struct CocoImage {
  int64_t id = 0;
  std::string file_name;
  int64_t width = 0;
  int64_t height = 0;
  std::vector<CocoAnnotation> annotations;
};

struct CocoCategory {
  int64_t id = 0;
  std::string name;
  std::string supercategory;
};

/// The content of a COCO instances file that detection training uses.
struct CocoDataset {
  std::vector<CocoImage> images;  ///< Sorted by id, as torchvision's CocoDetection.
  std::vector<CocoCategory> categories;
};

/// Parses a COCO instances JSON file (images, annotations, categories).
/// Throws Error{kRead} naming the file when it is unreadable, not valid JSON,
/// or does not follow the schema (the message names the offending entry, e.g.
/// "annotations[3].bbox: expected 4 numbers"), or when an annotation refers to
/// an unknown image id.
///
/// Thread-safety: a pure function.
CocoDataset read_coco(const std::string& path);

}  // namespace conveyor

// libFuzzer target: the COCO instances JSON mapper (read_coco) on an arbitrary
// file: JSON syntax, then the schema (images, annotations, categories, ids
// written as integers or floats, bboxes, image references).
//
// Contract checked: read_coco() either returns a dataset whose annotations all
// belong to its images, sorted by id, or throws conveyor::Error of kind kRead
// naming the file. Any other exception, a crash or a sanitizer report
// (including UBSan's float-to-integer overflow) is a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "conveyor/core/error.h"
#include "conveyor/io/coco.h"
#include "fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = conveyor::fuzz::write_file("instances.json", data, size);
  conveyor::CocoDataset dataset;
  try {
    dataset = conveyor::read_coco(path);
  } catch (const conveyor::Error& e) {
    if (e.kind() != conveyor::ErrorKind::kRead || e.key() != path) std::abort();
    return 0;
  }
  const auto by_id = [](const conveyor::CocoImage& a, const conveyor::CocoImage& b) { return a.id < b.id; };
  if (!std::is_sorted(dataset.images.begin(), dataset.images.end(), by_id)) std::abort();
  size_t annotations = 0;
  for (const auto& image : dataset.images) annotations += image.annotations.size();
  (void)annotations;
  return 0;
}

// libFuzzer target: the IDX reader (IdxSource, MNIST's format), plain and
// gzip, then RawTensorTransform on every record.
//
// Input layout: byte 0 = flags (bit 0: the image file is named ".gz", bit 1:
// the label file is), bytes 1..4 = little-endian length of the image file,
// then the image file, then the label file. (zlib reads a non-gzip file named
// ".gz" as plain bytes, so both paths see structured input.)
//
// Contract checked: construction either succeeds or throws conveyor::Error of
// kind kRead or kConfig naming a file; every record then has exactly the
// sample's bytes, and converting it never fails.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/core/rng.h"
#include "conveyor/io/idx_source.h"
#include "conveyor/ops/raw_tensor_transform.h"
#include "fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  const uint8_t flags = data[0];
  size_t images_size = size_t{data[1]} | (size_t{data[2]} << 8) | (size_t{data[3]} << 16) | (size_t{data[4]} << 24);
  data += 5;
  size -= 5;
  if (images_size > size) images_size = size;
  const std::string images = conveyor::fuzz::write_file((flags & 1) ? "images.gz" : "images", data, images_size);
  const std::string labels =
      conveyor::fuzz::write_file((flags & 2) ? "labels.gz" : "labels", data + images_size, size - images_size);

  std::unique_ptr<conveyor::IdxSource> source;
  try {
    source = std::make_unique<conveyor::IdxSource>(images, labels);
  } catch (const conveyor::Error& e) {
    if (e.kind() == conveyor::ErrorKind::kConfig) return 0;  // The two files disagree on N (names both).
    if (e.kind() != conveyor::ErrorKind::kRead || (e.key() != images && e.key() != labels)) std::abort();
    return 0;
  }
  const std::vector<int64_t>& shape = source->sample_shape();
  // Unsigned: with no samples the header's dimensions are unchecked and their
  // product may wrap (harmless: nothing is read then).
  uint64_t sample_bytes = 1;
  for (int64_t d : shape) sample_bytes *= static_cast<uint64_t>(d);
  std::unique_ptr<conveyor::RawTensorTransform> transform;
  std::vector<uint8_t> out;
  if (sample_bytes > 0 && sample_bytes <= (1 << 20)) {
    conveyor::RawTensorSpec spec;
    spec.height = shape[0];
    spec.width = shape[1];
    spec.channels = shape.size() > 2 ? shape[2] : 1;
    spec.dtype = (flags & 4) ? conveyor::DType::kFloat32 : conveyor::DType::kUInt8;
    spec.channels_first = (flags & 8) != 0;
    transform = std::make_unique<conveyor::RawTensorTransform>(spec);
    out.resize(transform->output_spec().num_bytes());
  }
  const int64_t n = std::min<int64_t>(source->size(), 256);
  for (int64_t i = 0; i < n; ++i) {
    const conveyor::Record record = source->read(i);
    if (record.data.size() != sample_bytes) std::abort();
    volatile uint8_t sink = 0;
    for (size_t k = 0; k < record.data.size(); ++k) sink = sink ^ record.data.data()[k];
    (void)sink;
    if (transform) {
      conveyor::SampleRng rng(0, 0, static_cast<uint64_t>(i));
      transform->apply(record.data.span(), rng, out.data());
    }
  }
  if (source->size() > 0) source->read(source->size() - 1);
  try {
    source->read(source->size());
    std::abort();
  } catch (const conveyor::Error&) {
  }
  return 0;
}

// libFuzzer target: the image decode entry points on arbitrary bytes, through
// format detection (JPEG, PNG, WebP, TIFF, and everything else that must be refused).
//
// Contract checked: read_image_info() and decode_image() either succeed with
// an image whose size matches the header, or throw conveyor::Error of kind
// kDecode or kTooLarge. Any other exception, a crash or a sanitizer report is
// a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "conveyor/core/error.h"
#include "conveyor/ops/image_decode.h"

namespace {

// Small enough that a header claiming a huge image cannot exhaust the fuzzer's
// memory limit, nor make each run slow (libjpeg decodes a whole corrupt image
// after its data ran out, as PIL does); large enough for every seed.
constexpr int64_t kMaxPixels = int64_t{1} << 20;

bool expected(const conveyor::Error& e) {
  return e.kind() == conveyor::ErrorKind::kDecode || e.kind() == conveyor::ErrorKind::kTooLarge;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  conveyor::ImageInfo info;
  try {
    info = conveyor::read_image_info(bytes, kMaxPixels);
  } catch (const conveyor::Error& e) {
    if (!expected(e)) std::abort();
    return 0;
  }
  if (info.height <= 0 || info.width <= 0 || int64_t{info.height} * info.width > kMaxPixels) std::abort();
  for (int channels : {3, 1}) {
    try {
      const conveyor::Image image = conveyor::decode_image(bytes, channels, kMaxPixels);
      // The decoded image is the size the header announced, fully written.
      if (image.height != info.height || image.width != info.width || image.channels != channels ||
          image.pixels.size() != static_cast<size_t>(image.height) * image.width * channels) {
        std::abort();
      }
      volatile uint8_t sink = 0;
      for (uint8_t v : image.pixels) sink = sink ^ v;  // Reads every byte (MSan/ASan see uninitialised/out of range).
      (void)sink;
    } catch (const conveyor::Error& e) {
      if (!expected(e)) std::abort();
    }
  }
  return 0;
}

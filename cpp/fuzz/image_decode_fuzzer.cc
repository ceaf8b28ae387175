// libFuzzer target: arbitrary bytes through decode_image and the train chain.
// Any outcome but a conveyor::Error (or success) is a bug: crashes, hangs,
// sanitizer reports, other exceptions.
//
//   cmake -S . -B build/fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCONVEYOR_BUILD_FUZZERS=ON \
//     -DCONVEYOR_BUILD_TESTS=OFF -DCONVEYOR_SANITIZE=address && cmake --build build/fuzz
//   build/fuzz/image_decode_fuzzer -max_total_time=60 -max_len=65536
#include <cstddef>
#include <cstdint>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/ops/image_decode.h"
#include "conveyor/ops/image_pipeline.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace conveyor;
  // A small pixel limit keeps each run fast; large headers must fail cleanly.
  constexpr int64_t kMaxPixels = 4 << 20;
  const std::span<const uint8_t> bytes(data, size);
  try {
    (void)decode_image(bytes, 3, kMaxPixels);
  } catch (const Error&) {
  }
  static const ImagePipeline pipeline({RandomResizedCropSpec{{32, 32}}, HorizontalFlipSpec{0.5}}, {DType::kUInt8},
                                      kMaxPixels);
  std::vector<uint8_t> out(pipeline.output_spec().num_bytes());
  SampleRng rng(0, 0, size);
  try {
    pipeline.apply(bytes, rng, out.data());
  } catch (const Error&) {
  }
  return 0;
}

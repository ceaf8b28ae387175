// libFuzzer target: ImagePipeline::apply — decode fused with the crop, resize,
// flip, normalize and the output pass — on arbitrary bytes with a transform
// chain chosen by the input's last 8 bytes (the seeds carry them after the
// image; decoders ignore trailing bytes).
//
// Contract checked: apply() writes at most output_spec().num_bytes() (the
// buffer is exactly that large, so ASan sees any overflow) or throws
// conveyor::Error of kind kDecode or kTooLarge.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/core/rng.h"
#include "conveyor/ops/image_pipeline.h"

namespace {

constexpr int64_t kMaxPixels = int64_t{1} << 22;
constexpr size_t kConfigBytes = 8;

// The chain and output described by 8 bytes.
std::unique_ptr<conveyor::ImagePipeline> make_pipeline(const uint8_t* c) {
  using namespace conveyor;
  const Size2D size{1 + c[0] % 48, 1 + c[1] % 48};
  ImageOutputSpec output;
  output.dtype = c[2] % 3 == 0 ? DType::kUInt8 : (c[2] % 3 == 1 ? DType::kFloat16 : DType::kFloat32);
  output.layout = (c[2] >> 2) & 1 ? Layout::kHWC : Layout::kCHW;
  output.channels = (c[2] >> 3) & 1 ? 1 : 3;
  ImagePipelineOptions options;
  options.crop_decode = ((c[2] >> 4) & 1) == 0;
  options.dct_scale = ((c[2] >> 5) & 1) == 0;
  const bool antialias = ((c[2] >> 6) & 1) == 0;
  std::vector<TransformSpec> chain;
  switch (c[3] % 5) {
    case 0: {  // The training chain.
      RandomResizedCropSpec rrc{size};
      // Scale in (0, 1], ratio around 1: includes extreme boxes (1 pixel, whole image).
      rrc.scale = {(1 + c[4] % 100) / 100.0, 1.0};
      rrc.ratio = {1.0 / (1 + c[5] % 8), 1.0 + c[6] % 8};
      rrc.antialias = antialias;
      chain.push_back(rrc);
      chain.push_back(HorizontalFlipSpec{(c[7] % 3) / 2.0});
      break;
    }
    case 1:  // The evaluation chain: Resize(shorter) then CenterCrop (may pad).
      chain.push_back(ResizeSpec{1 + c[4] % 64, {}, antialias});
      chain.push_back(CenterCropSpec{size});
      break;
    case 2:
      chain.push_back(ResizeSpec{0, size, antialias});
      chain.push_back(HorizontalFlipSpec{1.0});
      break;
    case 3:  // A crop larger or smaller than the image: padding and clipping.
      chain.push_back(CenterCropSpec{size});
      break;
    default:  // Two random crops in a row, with a flip between them.
      chain.push_back(RandomResizedCropSpec{{size.height * 2, size.width * 2}});
      chain.push_back(HorizontalFlipSpec{0.5});
      chain.push_back(RandomResizedCropSpec{size});
      break;
  }
  if (output.dtype != DType::kUInt8) {
    const auto n = static_cast<size_t>(output.channels);
    chain.push_back(NormalizeSpec{std::vector<float>(n, 0.5f), std::vector<float>(n, 0.25f)});
  }
  return std::make_unique<ImagePipeline>(std::move(chain), output, kMaxPixels, options);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kConfigBytes) return 0;
  const uint8_t* config = data + size - kConfigBytes;
  std::unique_ptr<conveyor::ImagePipeline> pipeline;
  try {
    pipeline = make_pipeline(config);
  } catch (const conveyor::Error&) {
    std::abort();  // Every configuration above is valid.
  }
  // Exactly the sample's bytes, heap-allocated: a write past it is an ASan report.
  const size_t out_bytes = static_cast<size_t>(pipeline->output_spec().num_bytes());
  std::unique_ptr<uint8_t[]> out(new uint8_t[out_bytes]);
  uint64_t seed = 0;
  std::memcpy(&seed, config, sizeof(seed));
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    conveyor::SampleRng rng(seed, epoch, 0);
    try {
      pipeline->apply(std::span<const uint8_t>(data, size), rng, out.get());
    } catch (const conveyor::Error& e) {
      if (e.kind() != conveyor::ErrorKind::kDecode && e.kind() != conveyor::ErrorKind::kTooLarge) std::abort();
      return 0;
    }
  }
  return 0;
}

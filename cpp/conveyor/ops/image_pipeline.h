#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <variant>
#include <vector>

#include "conveyor/core/dtype.h"
#include "conveyor/core/rng.h"
#include "conveyor/core/sample_transform.h"
#include "conveyor/ops/image_decode.h"

namespace conveyor {

/// Height and width in pixels.
struct Size2D {
  int height = 0;
  int width = 0;
};

/// torchvision.transforms.Resize: `shorter` > 0 resizes the shorter side to it
/// (aspect kept); otherwise resizes to exactly `size`. Antialiased downscaling.
struct ResizeSpec {
  int shorter = 0;
  Size2D size;
  bool antialias = true;
};

/// torchvision.transforms.CenterCrop (pads with zeros when the image is smaller).
struct CenterCropSpec {
  Size2D size;
};

/// torchvision.transforms.RandomResizedCrop: torchvision's sampling rule (10
/// attempts, then the central-crop fallback), then an antialiased resize.
struct RandomResizedCropSpec {
  Size2D size;
  std::array<double, 2> scale{0.08, 1.0};
  std::array<double, 2> ratio{3.0 / 4.0, 4.0 / 3.0};
  bool antialias = true;
};

/// torchvision.transforms.RandomHorizontalFlip.
struct HorizontalFlipSpec {
  double p = 0.5;
};

/// torchvision.transforms.Normalize on values scaled to [0, 1]
/// (out = (x / 255 - mean) / std), one entry per channel.
struct NormalizeSpec {
  std::vector<float> mean;
  std::vector<float> std;
};

using TransformSpec =
    std::variant<ResizeSpec, CenterCropSpec, RandomResizedCropSpec, HorizontalFlipSpec, NormalizeSpec>;

/// Memory layout of an image sample.
enum class Layout { kCHW, kHWC };

/// What the last step writes into the batch slot.
struct ImageOutputSpec {
  DType dtype = DType::kFloat32;  ///< uint8, float16 or float32. uint8 keeps 0..255 (no Normalize allowed).
  Layout layout = Layout::kCHW;
  int channels = 3;  ///< 3 (RGB) or 1 (grayscale).
};

/// How the decode is fused with the first crop; both on by default. Turning
/// them off is for measurements and tests (the output barely changes).
struct ImagePipelineOptions {
  bool crop_decode = true;  ///< JPEG, WebP: decode only the rows/columns of the source box.
  bool dct_scale = true;    ///< JPEG: decode at 1/2, 1/4, 1/8 when the box stays >= dct_margin x the output.
  /// How much larger than the output the DCT-scaled box must stay (>= 1). At 1 the
  /// IDCT's own low-pass replaces much of PIL's tent filter and parity drops
  /// (docs/design/resize.md: mean error up to 2.5 per channel); at 2 it stays about 1.
  double dct_margin = 2.0;
};

/// A crop box in pixels: rows [top, top + height), columns [left, left + width).
struct CropBox {
  int top = 0;
  int left = 0;
  int height = 0;
  int width = 0;
};

/// torchvision's RandomResizedCrop.get_params for an image of `height` x
/// `width`: up to 10 draws of a log-uniform aspect ratio and uniform area
/// fraction (w = round(sqrt(area * ratio)), h = round(sqrt(area / ratio)),
/// top = randint(0, H - h + 1), left = randint(0, W - w + 1)), then the central
/// crop fallback (aspect clamped to `ratio`). Draws only from `rng`.
CropBox sample_random_resized_crop(int height, int width, const std::array<double, 2>& scale,
                                   const std::array<double, 2>& ratio, SampleRng& rng);

/// A transform chain planned once per loader: all crops and resizes compose
/// into one source box that is decoded alone (crop-window decode, DCT
/// downscale) and resampled once like PIL's antialiased bilinear; pointwise
/// steps (flip, normalize, dtype, layout) run in one pass writing into the
/// batch slot. Normalize must come after every crop and resize. Decodes JPEG,
/// PNG and WebP, detected from the bytes.
///
/// Thread-safety: immutable after construction; apply() may run concurrently.
class ImagePipeline final : public SampleTransform {
 public:
  /// Throws Error{kConfig} when the chain cannot produce a fixed output size
  /// (it must end in a crop or a Resize to (h, w) before pointwise steps),
  /// or when an argument is invalid (e.g. Normalize with the wrong channel count).
  ImagePipeline(std::vector<TransformSpec> transforms, ImageOutputSpec output, int64_t max_pixels = kDefaultMaxPixels,
                ImagePipelineOptions options = {});
  ~ImagePipeline() override;

  SampleSpec output_spec() const override;
  void apply(std::span<const uint8_t> input, SampleRng& rng, void* out) const override;
  /// As apply(); `geometry` receives the chain's crop/resize/flip as one map.
  bool apply_tracked(std::span<const uint8_t> input, SampleRng& rng, void* out,
                     SampleGeometry& geometry) const override;

 private:
  struct Plan;
  void run(std::span<const uint8_t> input, SampleRng& rng, void* out, SampleGeometry* geometry) const;
  std::unique_ptr<const Plan> plan_;
};

}  // namespace conveyor

#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "conveyor/core/dtype.h"
#include "conveyor/core/rng.h"
#include "conveyor/core/sample_transform.h"
#include "conveyor/ops/device_resample.h"
#include "conveyor/ops/image_decode.h"
// The built-in transforms' specs, for C++ callers writing chains as
// {ResizeSpec{256}, CenterCropSpec{{224, 224}}}; any registered transform can
// also be given as TransformSpec{"name", {params}}.
#include "conveyor/ops/transforms/center_crop.h"
#include "conveyor/ops/transforms/flip.h"
#include "conveyor/ops/transforms/normalize.h"
#include "conveyor/ops/transforms/random_resized_crop.h"
#include "conveyor/ops/transforms/registry.h"
#include "conveyor/ops/transforms/resize.h"

namespace conveyor {

/// Memory layout of an image sample.
enum class Layout { kCHW, kHWC };

/// What the last step writes into the batch slot.
struct ImageOutputSpec {
  DType dtype = DType::kFloat32;  ///< uint8, float16, float32 or bfloat16. uint8 keeps 0..255 (no Normalize allowed).
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
  /// When set, inputs are raw pixels of this shape instead of encoded images:
  /// the "decode" is a view of the bytes (no copy), and the chain starts
  /// from this fixed size (so an empty chain, or one of flips and Normalize
  /// only, has a fixed output size).
  std::optional<RawImageShape> raw_input;
  /// Accept a chain without a fixed output size (e.g. only Resize(256), or
  /// no transform): each sample is then the size its steps give (at most
  /// max_pixels), fixed_shape() is false, output_spec() has -1 for height
  /// and width, and samples go through apply_variable() only.
  bool variable_size = false;
  /// Write float32 CHW outputs with streaming (non-temporal) stores: faster
  /// when each output goes to memory the thread does not read again soon (a
  /// loader's batch buffers: what conveyor::Loader's sources ask for), slower
  /// when the same output is rewritten while it is in cache. Same values.
  bool stream_output = false;
  /// Apply the EXIF orientation tag (as PIL's ImageOps.exif_transpose);
  /// false: the stored pixels as they are, as torchvision's ImageFolder (PIL's
  /// open + convert) gives them. A TIFF's own Orientation tag is applied
  /// either way, as PIL applies it.
  bool exif_orientation = true;
};

/// A transform chain planned once per loader: each TransformSpec becomes a
/// registered TransformStep (see transforms/registry.h). The chain splits
/// into groups of geometric and mirror steps, one at each step on the image
/// (StepKind::kImage). Per sample, the leading group composes into one
/// source box that is decoded alone (crop-window decode, DCT downscale) and
/// resampled once like PIL's antialiased bilinear; each image step then runs
/// on the materialized image, and the group after it resamples that image
/// once. One output pass (the last flip, pointwise steps through per-channel
/// tables, dtype, layout) writes into the batch slot. Pointwise steps
/// (Normalize) must come after every geometric and image step. Decodes JPEG,
/// PNG, WebP, TIFF, BMP, PNM and GIF, detected from the bytes, or takes raw
/// pixels of a shape given in the options (ImagePipelineOptions::raw_input).
///
/// Thread-safety: immutable after construction; apply() may run concurrently.
class ImagePipeline final : public SampleTransform {
 public:
  /// Throws Error{kConfig} when the chain cannot produce a fixed output size
  /// (it must end in a crop or a Resize to (h, w) before pointwise steps)
  /// unless options.variable_size,
  /// or when an argument is invalid (e.g. Normalize with the wrong channel count,
  /// an unknown transform name, an output of more bytes than an int64 holds).
  ImagePipeline(std::vector<TransformSpec> transforms, ImageOutputSpec output, int64_t max_pixels = kDefaultMaxPixels,
                ImagePipelineOptions options = {});
  ~ImagePipeline() override;

  SampleSpec output_spec() const override;
  bool fixed_shape() const override;
  void apply(std::span<const uint8_t> input, SampleRng& rng, void* out) const override;
  /// As apply(); `boxes` follow every geometric and image step (see
  /// SampleTransform::apply_tracked). apply() and apply_tracked() throw
  /// Error{kDecode} for an invalid image and Error{kTooLarge} for one over
  /// max_pixels, an intermediate image over max_pixels, or a resized size
  /// that overflows.
  void apply_tracked(std::span<const uint8_t> input, SampleRng& rng, void* out,
                     std::vector<BoundingBox>& boxes) const override;
  /// Every chain; the only entry point when fixed_shape() is false (apply()
  /// and apply_tracked() then throw Error{kConfig}).
  void apply_variable(std::span<const uint8_t> input, SampleRng& rng, const SampleAllocator& allocate,
                      std::vector<BoundingBox>* boxes) const override;

  /// Why a device that decodes JPEGs and resamples (ops/device_plan.h)
  /// cannot run this chain, naming the step or option, or "" when it can:
  /// one resample (crops, bilinear resizes, flips, padding with one fill),
  /// then pointwise steps; RGB output of a fixed size; encoded inputs.
  const std::string& device_unsupported() const noexcept;
  /// The one resample's placement for a `height` x `width` image, drawing
  /// from `rng` exactly as apply() does (`pixels` and `pitch` left 0).
  /// Throws Error{kConfig} when device_unsupported() is not empty.
  DeviceSample place_on_device(int height, int width, SampleRng& rng) const;
  /// What the pointwise steps, dtype and all, make of each 8-bit value:
  /// channels x 256 values of the output dtype, as bytes (the output pass's tables).
  std::vector<uint8_t> output_tables() const;
  const ImageOutputSpec& output() const noexcept;
  const ImagePipelineOptions& options() const noexcept;
  /// The most pixels an image may have (the constructor's max_pixels).
  int64_t max_pixels() const noexcept;

 private:
  struct Plan;
  // Writes into `fixed_out`, or with `allocate` (variable sizes) into memory
  // it gives for the sample's size.
  void run(std::span<const uint8_t> input, SampleRng& rng, void* fixed_out, std::vector<BoundingBox>* boxes,
           const SampleAllocator* allocate) const;
  std::unique_ptr<const Plan> plan_;
};

}  // namespace conveyor

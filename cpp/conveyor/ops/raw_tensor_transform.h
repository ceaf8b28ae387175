#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "conveyor/core/dtype.h"
#include "conveyor/core/sample_transform.h"

namespace conveyor {

/// Options of a RawTensorTransform.
struct RawTensorSpec {
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 1;         ///< Input pixels are H×W×C, interleaved (H×W when 1).
  DType dtype = DType::kUInt8;  ///< uint8 (copied as is) or float32 (scaled to [0, 1]).
  bool channels_first = true;   ///< Output C×H×W (true) or H×W×C.
  /// Optional normalization for float32, one entry per channel (or one for
  /// all): out = (x / 255 - mean) / std. Empty: none.
  std::vector<float> mean;
  std::vector<float> std;
};

/// The SampleTransform of raw-pixel sources (e.g. IdxSource for MNIST): the
/// input is exactly H×W×C uint8 pixels, written into the batch slot as uint8,
/// or as float32 scaled by 1/255 and optionally normalized, in C×H×W or H×W×C.
/// Float values are computed as torchvision does, (v / 255 - mean) / std in
/// float32, so they match it bit for bit.
///
/// Thread-safety: immutable after construction; apply() may run concurrently.
class RawTensorTransform final : public SampleTransform {
 public:
  /// Throws Error{kConfig} for non-positive dimensions, an unsupported dtype,
  /// normalization with uint8 output, a mean/std of the wrong length or a zero std.
  explicit RawTensorTransform(RawTensorSpec spec);

  SampleSpec output_spec() const override;
  /// Throws Error{kDecode} when `input` is not exactly H×W×C bytes.
  void apply(std::span<const uint8_t> input, SampleRng& rng, void* out) const override;

 private:
  RawTensorSpec spec_;
  std::vector<float> lut_;  // Output value of each (channel, byte): lut_[c * 256 + v].
};

/// The SampleTransform of sources whose samples are tensors, not images (an
/// ArraySource over float32 features, int64 targets, ...): each sample's bytes
/// are copied as they are into a batch slot of `spec` (shape and dtype).
///
/// Thread-safety: immutable after construction; apply() may run concurrently.
class TensorCopyTransform final : public SampleTransform {
 public:
  /// Throws Error{kConfig} for a negative dimension or a size that overflows.
  explicit TensorCopyTransform(SampleSpec spec);

  SampleSpec output_spec() const override { return spec_; }
  /// Throws Error{kDecode} when `input` is not exactly spec.num_bytes() bytes.
  void apply(std::span<const uint8_t> input, SampleRng& rng, void* out) const override;

 private:
  SampleSpec spec_;
  size_t bytes_ = 0;
};

}  // namespace conveyor

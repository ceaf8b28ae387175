#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "conveyor/core/dtype.h"
#include "conveyor/core/geometry.h"
#include "conveyor/core/rng.h"

namespace conveyor {

/// Gives the memory of one variable-shape sample: called once per sample with
/// the sample's spec (every dimension known), returns spec.num_bytes()
/// writable bytes that stay valid until the sample is done.
using SampleAllocator = std::function<void*(const SampleSpec& spec)>;

/// Turns one sample's encoded bytes into its final tensor, written straight
/// into the sample's slot of a batch buffer. Implemented by the image
/// pipeline (ops/image_pipeline.h) and by raw-tensor sources (e.g. MNIST).
///
/// Thread-safety: apply() is called concurrently from many threads and must
/// not mutate shared state.
class SampleTransform {
 public:
  virtual ~SampleTransform() = default;

  /// Shape and dtype of every output sample; fixed for the transform's life.
  /// With fixed_shape() false, the dimensions that vary per sample are -1.
  virtual SampleSpec output_spec() const = 0;

  /// Whether every sample has output_spec()'s shape. When false (e.g. an
  /// image chain without a final crop or resize to (h, w)), samples go
  /// through apply_variable() and a batch holds one buffer per sample.
  virtual bool fixed_shape() const { return true; }

  /// Decodes/transforms `input` into `out`, which has output_spec().num_bytes()
  /// writable bytes. Random choices come only from `rng`. Throws conveyor::Error
  /// (kDecode, kTooLarge, ...) on bad input; the loader adds the sample's key.
  virtual void apply(std::span<const uint8_t> input, SampleRng& rng, void* out) const = 0;

  /// As apply(), and moves `boxes` (the sample's boxes in the input image's
  /// pixels) with the image: crops, resizes, flips and warps move them as the
  /// pixels move, boxes that leave the image are dropped, the rest clipped to
  /// it. Transforms without a geometric meaning keep the default: apply(),
  /// boxes unchanged.
  virtual void apply_tracked(std::span<const uint8_t> input, SampleRng& rng, void* out,
                             std::vector<BoundingBox>& boxes) const {
    (void)boxes;
    apply(input, rng, out);
  }

  /// As apply_tracked() (`boxes` null: none to move), writing into the
  /// memory `allocate` gives for this sample's spec. The default (fixed
  /// shapes) allocates output_spec() and calls apply() or apply_tracked().
  virtual void apply_variable(std::span<const uint8_t> input, SampleRng& rng, const SampleAllocator& allocate,
                              std::vector<BoundingBox>* boxes) const {
    void* out = allocate(output_spec());
    if (boxes == nullptr) {
      apply(input, rng, out);
    } else {
      apply_tracked(input, rng, out, *boxes);
    }
  }
};

}  // namespace conveyor

#pragma once

#include <cstdint>
#include <span>

#include "conveyor/core/dtype.h"
#include "conveyor/core/geometry.h"
#include "conveyor/core/rng.h"

namespace conveyor {

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
  virtual SampleSpec output_spec() const = 0;

  /// Decodes/transforms `input` into `out`, which has output_spec().num_bytes()
  /// writable bytes. Random choices come only from `rng`. Throws conveyor::Error
  /// (kDecode, kTooLarge, ...) on bad input; the loader adds the sample's key.
  virtual void apply(std::span<const uint8_t> input, SampleRng& rng, void* out) const = 0;

  /// As apply(), and also reports how output pixels map to input pixels, so
  /// that annotations (boxes) can follow the image. Transforms without a
  /// geometric meaning keep the default: apply() and no geometry (false).
  virtual bool apply_tracked(std::span<const uint8_t> input, SampleRng& rng, void* out,
                             SampleGeometry& geometry) const {
    (void)geometry;
    apply(input, rng, out);
    return false;
  }
};

}  // namespace conveyor

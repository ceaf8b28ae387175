#pragma once

#include <optional>

#include "conveyor/ops/image.h"

namespace conveyor {

/// torchvision's float32 `(x / 255 - mean) / std` of uint8 values (ToDtype
/// with scale, then Normalize) computed eight at a time with AVX2 instead of
/// one table lookup per value: the same IEEE divisions and subtraction as the
/// output pass's tables are built with, so the same bits (41 against 58 µs on
/// a 224 x 224 image). Immutable: thread-safe.
class NormalizeArithmetic {
 public:
  /// An instance for `channels` (1 or 3) channels with these means and stds
  /// when the CPU has AVX2; none otherwise (the caller keeps its tables).
  static std::optional<NormalizeArithmetic> make(int channels, const float* mean, const float* std);

  /// Writes `image` (uint8 HWC, the instance's channel count) as float32
  /// CHW into `out` (channels x height x width floats), mirrored left to
  /// right when `flip`. `stream`: non-temporal stores (see write_chw_float).
  void write_chw(const ImageView& image, bool flip, float* out, bool stream) const;

 private:
  NormalizeArithmetic() = default;

  int channels_ = 0;
  float mean_[3] = {};
  float std_[3] = {};
};

/// The float32 CHW output pass through per-channel tables (channels x 256
/// floats; 1 or 3 channels), mirrored when `flip`. With `stream`, each row
/// is computed into a per-thread row and copied out with non-temporal
/// stores: into a batch slot this thread does not read again, plain stores
/// would first read every line of it from memory (read for ownership); into
/// an output rewritten while it is still in cache, plain stores are faster.
/// Either way the stores are complete (fenced) on return.
void write_chw_float(const ImageView& image, bool flip, const float* tables, float* out, bool stream);

}  // namespace conveyor

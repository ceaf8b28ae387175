#pragma once

#include <optional>

#include "conveyor/ops/image.h"

namespace conveyor {

/// torchvision's float32 `(x / 255 - mean) / std` of uint8 values, computed
/// with vector arithmetic instead of one table lookup per value. Each
/// division is a product by the divisor's reciprocal corrected by two fused
/// multiply-adds (Markstein's step), which gives the correctly rounded
/// quotient for almost every divisor; `matching` checks all 256 values of
/// every channel against the output pass's tables, so an instance gives the
/// tables' values bit for bit or does not exist. Immutable: thread-safe.
class NormalizeArithmetic {
 public:
  /// An instance for `channels` (1 or 3) channels with these means and stds
  /// when its values equal `tables` (channels x 256 floats: value v of
  /// channel c is tables[c * 256 + v]) and the CPU has AVX2 and FMA; none
  /// otherwise (the caller keeps the tables).
  static std::optional<NormalizeArithmetic> matching(const float* tables, int channels, const float* mean,
                                                     const float* std);

  /// What the vector code computes for value v of channel c (scalar, same
  /// roundings).
  float value(int channel, int v) const;

  /// Writes `image` (uint8 HWC, the instance's channel count) as float32
  /// CHW into `out` (channels x height x width floats), mirrored left to
  /// right when `flip`. `stream`: non-temporal stores (see write_chw_float).
  void write_chw(const ImageView& image, bool flip, float* out, bool stream) const;

 private:
  NormalizeArithmetic() = default;

  int channels_ = 0;
  float mean_[3] = {};
  float std_[3] = {};
  float inverse_std_[3] = {};
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

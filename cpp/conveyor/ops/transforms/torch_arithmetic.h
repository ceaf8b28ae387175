#pragma once

namespace conveyor {

/// a * b + c rounded once to float32, as PyTorch's vectorised CPU kernels
/// compute `x.add_(y, alpha=a)` (a fused multiply-add). The product of two
/// floats is exact in double, so one double addition then one rounding to
/// float gives the fused result (up to a double-rounding tie, which needs a
/// sum exactly halfway between two floats). Portable: no FMA instruction
/// needed. Thread-safe (pure).
inline float fused_multiply_add(float a, float b, float c) {
  return static_cast<float>(static_cast<double>(a) * static_cast<double>(b) + static_cast<double>(c));
}

}  // namespace conveyor

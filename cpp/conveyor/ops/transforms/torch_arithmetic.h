#pragma once

#include <cmath>

namespace conveyor {

/// a * b + c rounded once to float32, as PyTorch's vectorised CPU kernels
/// compute `x.add_(y, alpha=a)` (a fused multiply-add): std::fma, one
/// instruction in the FMA clones (CONVEYOR_FMA_CLONES), else the C library's
/// correctly rounded fma; the same value either way. Thread-safe (pure).
inline float fused_multiply_add(float a, float b, float c) { return std::fma(a, b, c); }

}  // namespace conveyor

#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "conveyor/ops/image_decoder.h"

namespace conveyor::detail {

/// Opens the "decoder" of raw pixels: `data` must be exactly `shape.height` ×
/// `shape.width` × `shape.channels` uint8, HWC, with no header. decode()
/// returns the requested region as a view into `data` (no copy) when the
/// channel counts agree; otherwise the region alone is converted (gray
/// replicated to RGB, or RGB to luma as PIL's convert("L")) into the scratch.
/// Throws Error{kDecode} when `data` has another size, Error{kTooLarge} above
/// `max_pixels`. `data` must outlive the decoder.
std::unique_ptr<ImageDecoder> open_raw(std::span<const uint8_t> data, const RawImageShape& shape, int64_t max_pixels);

/// Throws Error{kConfig} unless `shape` has positive sides and 1 or 3 channels.
void check_raw_shape(const RawImageShape& shape);

}  // namespace conveyor::detail

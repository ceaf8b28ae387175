#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "conveyor/ops/image_decoder.h"

namespace conveyor::detail {

/// Opens a GIF decoder (giflib; the first frame, as PIL shows it): parses the
/// records up to the first image and checks `max_pixels` before any pixel
/// allocation. Throws Error{kDecode} (corrupt, truncated, no image) or
/// Error{kTooLarge}. `data` must outlive the decoder.
std::unique_ptr<ImageDecoder> open_gif(std::span<const uint8_t> data, int64_t max_pixels);

}  // namespace conveyor::detail

#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "conveyor/ops/image_decoder.h"

namespace conveyor::detail {

/// Opens a WebP decoder (libwebp; still images, and the first frame of an animation): parses the header and checks
/// `max_pixels` before any pixel allocation. Throws Error{kDecode} (corrupt/truncated header) or Error{kTooLarge}.
/// `data` must outlive the decoder.
std::unique_ptr<ImageDecoder> open_webp(std::span<const uint8_t> data, int64_t max_pixels);

}  // namespace conveyor::detail

#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "conveyor/ops/image_decoder.h"

namespace conveyor::detail {

/// Opens a JPEG decoder (libjpeg API; EXIF orientation, crop-window and DCT-scaled decode): parses the header and
/// checks `max_pixels` before any pixel allocation. Throws Error{kDecode} (corrupt/truncated header) or
/// Error{kTooLarge}. `data` must outlive the decoder.
std::unique_ptr<ImageDecoder> open_jpeg(std::span<const uint8_t> data, int64_t max_pixels);

}  // namespace conveyor::detail

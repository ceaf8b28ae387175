#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "conveyor/ops/image_decoder.h"

namespace conveyor::detail {

/// Opens a BMP decoder (Windows and OS/2 headers; 1/4/8-bit palette, 16, 24
/// and 32-bit, bit fields, RLE4/RLE8): parses the header and checks
/// `max_pixels` and the data's length before any pixel allocation. Throws
/// Error{kDecode} (malformed, truncated or unsupported) or Error{kTooLarge}.
/// `data` must outlive the decoder.
std::unique_ptr<ImageDecoder> open_bmp(std::span<const uint8_t> data, int64_t max_pixels);

}  // namespace conveyor::detail

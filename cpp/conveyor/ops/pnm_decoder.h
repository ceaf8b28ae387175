#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "conveyor/ops/image_decoder.h"

namespace conveyor::detail {

/// Opens a PNM decoder (PBM, PGM, PPM: P1-P6, 1 to 16 bits per sample):
/// parses the header and checks `max_pixels` and the data's length before any
/// pixel allocation. Throws Error{kDecode} (malformed or truncated) or
/// Error{kTooLarge}. `data` must outlive the decoder.
std::unique_ptr<ImageDecoder> open_pnm(std::span<const uint8_t> data, int64_t max_pixels);

}  // namespace conveyor::detail

#pragma once

// Test helpers: encoded images generated at run time (no fixtures).

#include <cstdint>
#include <vector>

#include "conveyor/ops/image.h"

namespace conveyor::testing {

/// A deterministic textured RGB (or gray) image: gradients plus a pattern.
Image make_pattern(int height, int width, int channels = 3);

/// Uniform random bytes (std::mt19937 from `seed`): every value, no structure.
Image make_noise(int height, int width, int channels, uint32_t seed);

/// JPEG via TurboJPEG; `subsampling` is 444, 422 or 420 (ignored for gray).
std::vector<uint8_t> encode_jpeg(const Image& image, int quality = 90, int subsampling = 420, bool progressive = false);

/// 8-bit PNG (RGB or gray) via libspng.
std::vector<uint8_t> encode_png(const Image& image);

/// Lossless WebP (RGB).
std::vector<uint8_t> encode_webp_lossless(const Image& image);

/// Uncompressed little-endian TIFF (RGB or gray), strips of 4 rows, the IFD
/// before the pixel data; an Orientation tag when `orientation` > 0.
std::vector<uint8_t> encode_tiff(const Image& image, int orientation = 0);

/// `jpeg` with an APP1 EXIF segment carrying `orientation` inserted after SOI.
std::vector<uint8_t> with_exif_orientation(const std::vector<uint8_t>& jpeg, int orientation);

}  // namespace conveyor::testing

#pragma once

// Internal: EXIF orientation, shared by every decoder that carries it (JPEG
// APP1, PNG eXIf, WebP EXIF, the TIFF Orientation tag). The mapping follows
// PIL's ImageOps.exif_transpose: 2 mirror, 3 rotate 180, 4 flip, 5 transpose,
// 6 rotate 90 clockwise, 7 transverse, 8 rotate 90 counter-clockwise.

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "conveyor/ops/image.h"
#include "conveyor/ops/image_decoder.h"

namespace conveyor::detail {

/// The orientation tag (0x0112) of IFD0 in a TIFF-structured EXIF block
/// (`exif` starts with "II"/"MM", or with "Exif\0\0" before it); 1 when
/// absent, malformed or out of 1..8. Every read is bounds-checked.
int exif_orientation(std::span<const uint8_t> exif) noexcept;

/// Orientations 5..8 swap width and height.
constexpr bool transposes(int orientation) noexcept { return orientation >= 5; }

/// Maps a region of the displayed image to the stored image (`w`, `h`: stored size).
Region to_stored(const Region& r, int orientation, int w, int h) noexcept;

/// The inverse of to_stored, on fractional rectangles {x, y, width, height}.
std::array<double, 4> to_displayed(const std::array<double, 4>& r, int orientation, int w, int h) noexcept;

/// `view` (stored orientation) turned to displayed orientation, into `out`;
/// `view` itself when orientation is 1.
ImageView orient(const ImageView& view, int orientation, std::vector<uint8_t>& out);

/// The common tail of decoders that decode the whole stored image: `stored`
/// (all of it, 1 or 3 channels as requested) restricted to the request's
/// region (displayed coordinates) and turned upright. Only the region is
/// copied when turning.
Decoded oriented_region(const ImageView& stored, int orientation, const DecodeRequest& request, Scratch& scratch);

}  // namespace conveyor::detail

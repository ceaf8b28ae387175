#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "conveyor/ops/image.h"

namespace conveyor {

/// Default decompression-bomb limit: where PIL refuses an image
/// (DecompressionBombError, above twice Image.MAX_IMAGE_PIXELS).
inline constexpr int64_t kDefaultMaxPixels = 178956970;

/// Image container formats conveyor decodes (kUnknown: anything else).
enum class ImageFormat { kUnknown, kJpeg, kPng, kWebp, kTiff, kBmp, kPnm, kGif };

/// Detects the format from the first bytes (magic numbers), never from a name.
ImageFormat detect_image_format(std::span<const uint8_t> data) noexcept;

/// "jpeg", "png", "webp", "tiff", "bmp", "pnm", "gif" or "unknown".
std::string_view image_format_name(ImageFormat format) noexcept;

/// What an image header says, in displayed orientation (EXIF applied).
struct ImageInfo {
  ImageFormat format = ImageFormat::kUnknown;
  int height = 0;
  int width = 0;
  int orientation = 1;  ///< EXIF/TIFF orientation tag (1..8); 1 when absent.
};

/// The shape of raw (unencoded) image samples: exactly height × width ×
/// channels uint8 bytes, HWC, no header -- e.g. an MNIST or CIFAR record.
/// The source knows the shape; the bytes do not say it (see
/// ImagePipelineOptions::raw_input).
struct RawImageShape {
  int height = 0;
  int width = 0;
  int channels = 0;  ///< 1 (grayscale) or 3 (RGB).
};

/// The RawImageShape of samples of `height` × `width` × `channels`, sizes as a
/// source knows them (an array's shape, an IDX header: 64-bit). Throws
/// Error{kConfig} naming them unless the sides are in [1, INT_MAX] (the
/// pipeline's int sides) and channels is 1 or 3; nothing is narrowed before.
RawImageShape raw_image_shape(int64_t height, int64_t width, int64_t channels);

/// Reads the header only. Throws Error{kDecode} for unknown, corrupt or
/// truncated headers and Error{kTooLarge} above `max_pixels` (height * width).
/// Thread-safe (pure function).
ImageInfo read_image_info(std::span<const uint8_t> data, int64_t max_pixels = kDefaultMaxPixels);

/// Decodes a whole JPEG, PNG, WebP (the first frame of an animation) or TIFF
/// (the first page) image to 8-bit RGB (`channels` = 3) or grayscale
/// (`channels` = 1), HWC, with the EXIF orientation (JPEG, PNG, WebP; TIFF's
/// Orientation tag) applied as PIL's ImageOps.exif_transpose does. Alpha is
/// dropped, 16-bit samples keep their high byte, CMYK is converted to RGB as
/// PIL does. The
/// pixel limit is checked from the header before any pixel allocation.
/// Throws Error{kDecode} (corrupt, truncated, unsupported) or Error{kTooLarge}.
/// Thread-safe (pure function).
Image decode_image(std::span<const uint8_t> data, int channels = 3, int64_t max_pixels = kDefaultMaxPixels);

}  // namespace conveyor

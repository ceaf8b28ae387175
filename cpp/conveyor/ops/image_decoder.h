#pragma once

// Internal: the per-format decoders behind decode_image() and ImagePipeline.
// No third-party header appears here; each format's .cc owns its library.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "conveyor/ops/image.h"
#include "conveyor/ops/image_decode.h"

namespace conveyor::detail {

/// A rectangle in displayed (EXIF-oriented) image coordinates.
struct Region {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
};

/// What part of the image to decode, and how small it may come out.
struct DecodeRequest {
  Region region;  ///< Must lie inside the image; empty regions are not allowed.
  int channels = 3;
  /// When both are > 0, the decoder may return the region downscaled by 2, 4
  /// or 8 (JPEG DCT scaling) as long as it stays >= min_width x min_height.
  int min_width = 0;
  int min_height = 0;
};

/// Reusable buffers owned by the caller (one per thread); decoded views point
/// into them and stay valid until the next decode using the same scratch.
struct Scratch {
  std::vector<uint8_t> decoded;
  std::vector<uint8_t> converted;
  std::vector<uint8_t> oriented;
  std::vector<uint8_t> prefiltered;
  std::vector<uint8_t> resized;
  std::vector<uint8_t> padded;
};

/// Makes `buffer` hold at least `bytes` and returns its data. It never shrinks:
/// a per-thread buffer reused for images of varying sizes is zero-filled only
/// when it grows past its largest size so far, not on every sample.
inline uint8_t* grow_to(std::vector<uint8_t>& buffer, size_t bytes) {
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

/// A decoded region and where it lies in the (displayed) image: view pixel
/// (row r, column c) covers image pixels [x + c * scale, x + (c + 1) * scale)
/// horizontally, likewise vertically; scale > 1 after a DCT-scaled decode.
struct Decoded {
  ImageView view;
  double x = 0;
  double y = 0;
  double scale = 1;
};

/// One image being decoded: the header is parsed at open, decode() runs once.
/// The encoded bytes must outlive the decoder. Not thread-safe.
class ImageDecoder {
 public:
  virtual ~ImageDecoder() = default;

  /// The header's facts (displayed orientation).
  const ImageInfo& info() const noexcept { return info_; }

  /// Decodes (at least) `request.region`; the returned view points into
  /// `scratch`. Throws Error{kDecode} on corrupt or truncated data.
  virtual Decoded decode(const DecodeRequest& request, Scratch& scratch) = 0;

  /// From now on an EXIF orientation tag (JPEG, PNG, WebP) is left out: the
  /// stored pixels come as they are, as PIL's open + convert() gives them
  /// (torchvision's ImageFolder), and info() gives their size and orientation
  /// 1. A TIFF's own Orientation tag stays applied, as PIL applies it when
  /// it loads the image. Call before decode().
  void ignore_exif_orientation() noexcept;

 protected:
  ImageInfo info_;
  /// The orientation decode() applies (1..8): set by each format's decoder
  /// from its tag, 1 where the format has none.
  int orientation_ = 1;
  /// Whether orientation_ comes from an EXIF block (JPEG, PNG, WebP), not
  /// from TIFF's own tag.
  bool orientation_is_exif_ = false;
};

/// Opens the decoder for `data`'s format (from magic bytes) and checks
/// `max_pixels` against the header. Throws Error{kDecode} or Error{kTooLarge}.
std::unique_ptr<ImageDecoder> open_image_decoder(std::span<const uint8_t> data, int64_t max_pixels);

/// Throws Error{kTooLarge} when height * width > max_pixels.
void check_pixel_limit(int64_t height, int64_t width, int64_t max_pixels, const char* format);

/// `src` restricted to `region` (no copy).
ImageView crop_view(const ImageView& src, const Region& region) noexcept;

/// PIL's convert("L") of one RGB pixel, bit-exact: ITU-R 601-2 luma in its
/// 16-bit fixed point, rounded.
inline uint8_t pil_luma(uint8_t r, uint8_t g, uint8_t b) noexcept {
  return static_cast<uint8_t>((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

/// RGB (3 channels) to luma as PIL's convert("L") (pil_luma), into `out`.
ImageView rgb_to_gray(const ImageView& rgb, std::vector<uint8_t>& out);

}  // namespace conveyor::detail

#include "conveyor/ops/png_decoder.h"

#include <spng.h>

#include <string>

#include "conveyor/core/error.h"
#include "conveyor/ops/orientation.h"

namespace conveyor::detail {

namespace {

class PngDecoder final : public ImageDecoder {
 public:
  PngDecoder() = default;
  PngDecoder(const PngDecoder&) = delete;
  PngDecoder& operator=(const PngDecoder&) = delete;
  ~PngDecoder() override { spng_ctx_free(ctx_); }

  void open(std::span<const uint8_t> data, int64_t max_pixels) {
    ctx_ = spng_ctx_new(0);
    if (ctx_ == nullptr) throw Error(ErrorKind::kInternal, "PNG: out of memory");
    check(spng_set_png_buffer(ctx_, data.data(), data.size()));
    spng_ihdr ihdr{};
    check(spng_get_ihdr(ctx_, &ihdr));
    check_pixel_limit(ihdr.height, ihdr.width, max_pixels, "PNG");
    // EXIF orientation from an eXIf chunk before IDAT (where PIL writes it);
    // a malformed one is ignored, as PIL does.
    spng_exif exif{};
    if (spng_get_exif(ctx_, &exif) == 0 && exif.data != nullptr) {
      orientation_ = exif_orientation({reinterpret_cast<const uint8_t*>(exif.data), exif.length});
      orientation_is_exif_ = true;
    }
    info_.format = ImageFormat::kPng;
    info_.orientation = orientation_;
    info_.width = static_cast<int>(transposes(orientation_) ? ihdr.height : ihdr.width);
    info_.height = static_cast<int>(transposes(orientation_) ? ihdr.width : ihdr.height);
  }

  // libspng converts every colour type and depth to RGB8: palette expanded,
  // alpha dropped (not composited, as PIL's convert("RGB")), gray replicated,
  // 16-bit samples reduced to their high byte. No gamma correction (as PIL).
  Decoded decode(const DecodeRequest& request, Scratch& scratch) override {
    size_t size = 0;
    check(spng_decoded_image_size(ctx_, SPNG_FMT_RGB8, &size));
    scratch.decoded.resize(size);
    check(spng_decode_image(ctx_, scratch.decoded.data(), size, SPNG_FMT_RGB8, 0));
    const int w = transposes(orientation_) ? info_.height : info_.width;
    const int h = transposes(orientation_) ? info_.width : info_.height;
    ImageView full{scratch.decoded.data(), h, w, 3, static_cast<ptrdiff_t>(w) * 3};
    if (request.channels == 1) full = rgb_to_gray(full, scratch.converted);
    return oriented_region(full, orientation_, request, scratch);
  }

 private:
  static void check(int code) {
    if (code != 0) throw Error(ErrorKind::kDecode, std::string("PNG: ") + spng_strerror(code));
  }

  spng_ctx* ctx_ = nullptr;
};

}  // namespace

std::unique_ptr<ImageDecoder> open_png(std::span<const uint8_t> data, int64_t max_pixels) {
  auto decoder = std::make_unique<PngDecoder>();
  decoder->open(data, max_pixels);
  return decoder;
}

}  // namespace conveyor::detail

#include "conveyor/ops/webp_decoder.h"

#include <webp/decode.h>

#include <algorithm>
#include <string>

#include "conveyor/core/error.h"

namespace conveyor::detail {

namespace {

class WebpDecoder final : public ImageDecoder {
 public:
  void open(std::span<const uint8_t> data, int64_t max_pixels) {
    data_ = data;
    WebPBitstreamFeatures features;
    const VP8StatusCode status = WebPGetFeatures(data.data(), data.size(), &features);
    if (status == VP8_STATUS_NOT_ENOUGH_DATA) throw Error(ErrorKind::kDecode, "WebP: truncated header");
    if (status != VP8_STATUS_OK) throw Error(ErrorKind::kDecode, "WebP: invalid header");
    if (features.has_animation) throw Error(ErrorKind::kDecode, "WebP: animated WebP is not supported");
    check_pixel_limit(features.height, features.width, max_pixels, "WebP");
    info_.format = ImageFormat::kWebp;
    info_.width = features.width;
    info_.height = features.height;
  }

  // Decodes only the region and a small margin (libwebp's cropping; its
  // origin must be even). Alpha, if any, is
  // dropped (as PIL's convert("RGB")).
  Decoded decode(const DecodeRequest& request, Scratch& scratch) override {
    const Region& r = request.region;
    WebPDecoderConfig config;
    if (!WebPInitDecoderConfig(&config)) throw Error(ErrorKind::kInternal, "WebP: decoder version mismatch");
    const bool crop = r.x != 0 || r.y != 0 || r.width != info_.width || r.height != info_.height;
    // Two spare pixels on each side: libwebp's chroma upsampling replicates
    // the edge of a crop instead of reading the next pixel.
    const int left = std::max(r.x - 2, 0) & ~1, top = std::max(r.y - 2, 0) & ~1;
    const int width = std::min(r.x + r.width + 2, info_.width) - left;
    const int height = std::min(r.y + r.height + 2, info_.height) - top;
    if (crop) {
      config.options.use_cropping = 1;
      config.options.crop_left = left;
      config.options.crop_top = top;
      config.options.crop_width = width;
      config.options.crop_height = height;
    }
    const int stride = width * 3;
    scratch.decoded.resize(static_cast<size_t>(stride) * height);
    config.output.colorspace = MODE_RGB;
    config.output.is_external_memory = 1;
    config.output.u.RGBA.rgba = scratch.decoded.data();
    config.output.u.RGBA.stride = stride;
    config.output.u.RGBA.size = scratch.decoded.size();
    const VP8StatusCode status = WebPDecode(data_.data(), data_.size(), &config);
    WebPFreeDecBuffer(&config.output);
    if (status != VP8_STATUS_OK) throw Error(ErrorKind::kDecode, "WebP: corrupt or truncated data");
    ImageView full{scratch.decoded.data(), height, width, 3, stride};
    if (request.channels == 1) full = rgb_to_gray(full, scratch.converted);
    return {crop_view(full, {r.x - left, r.y - top, r.width, r.height}), static_cast<double>(r.x),
            static_cast<double>(r.y), 1.0};
  }

 private:
  std::span<const uint8_t> data_;
};

}  // namespace

std::unique_ptr<ImageDecoder> open_webp(std::span<const uint8_t> data, int64_t max_pixels) {
  auto decoder = std::make_unique<WebpDecoder>();
  decoder->open(data, max_pixels);
  return decoder;
}

}  // namespace conveyor::detail

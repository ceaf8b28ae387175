#include "conveyor/ops/webp_decoder.h"

#include <webp/decode.h>

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

  // Alpha, if any, is dropped (as PIL's convert("RGB")).
  Decoded decode(const DecodeRequest& request, Scratch& scratch) override {
    const ptrdiff_t stride = static_cast<ptrdiff_t>(info_.width) * 3;
    scratch.decoded.resize(static_cast<size_t>(stride) * info_.height);
    if (WebPDecodeRGBInto(data_.data(), data_.size(), scratch.decoded.data(), scratch.decoded.size(),
                          static_cast<int>(stride)) == nullptr) {
      throw Error(ErrorKind::kDecode, "WebP: corrupt or truncated data");
    }
    ImageView full{scratch.decoded.data(), info_.height, info_.width, 3, stride};
    if (request.channels == 1) full = rgb_to_gray(full, scratch.converted);
    return {crop_view(full, request.region), static_cast<double>(request.region.x),
            static_cast<double>(request.region.y), 1.0};
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

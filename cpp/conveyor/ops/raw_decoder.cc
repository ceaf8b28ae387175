#include "conveyor/ops/raw_decoder.h"

#include <limits>
#include <string>

#include "conveyor/core/checked_size.h"
#include "conveyor/core/error.h"

namespace conveyor::detail {

namespace {

class RawDecoder final : public ImageDecoder {
 public:
  RawDecoder(std::span<const uint8_t> data, const RawImageShape& shape) : data_(data), channels_(shape.channels) {
    // Raw pixels have no container format (and no EXIF orientation).
    info_.format = ImageFormat::kUnknown;
    info_.height = shape.height;
    info_.width = shape.width;
  }

  Decoded decode(const DecodeRequest& request, Scratch& scratch) override {
    const ImageView full{data_.data(), info_.height, info_.width, channels_,
                         static_cast<ptrdiff_t>(info_.width) * channels_};
    // The region is a view: the crop/resize planning reads only what it needs.
    ImageView region = crop_view(full, request.region);
    if (request.channels == 1 && channels_ == 3) {
      region = rgb_to_gray(region, scratch.converted);
    } else if (request.channels == 3 && channels_ == 1) {
      std::vector<uint8_t>& rgb = scratch.converted;
      rgb.resize(static_cast<size_t>(region.width) * region.height * 3);
      uint8_t* o = rgb.data();
      for (int y = 0; y < region.height; ++y) {
        const uint8_t* s = region.row(y);
        for (int x = 0; x < region.width; ++x, o += 3) o[0] = o[1] = o[2] = s[x];
      }
      region = {rgb.data(), region.height, region.width, 3, static_cast<ptrdiff_t>(region.width) * 3};
    }
    return {region, static_cast<double>(request.region.x), static_cast<double>(request.region.y), 1.0};
  }

 private:
  std::span<const uint8_t> data_;
  int channels_;
};

}  // namespace

void check_raw_shape(const RawImageShape& shape) {
  check_config(shape.height > 0 && shape.width > 0 && (shape.channels == 1 || shape.channels == 3),
               "raw images need positive height and width and 1 or 3 channels, got " + std::to_string(shape.height) +
                   "x" + std::to_string(shape.width) + "x" + std::to_string(shape.channels));
}

std::unique_ptr<ImageDecoder> open_raw(std::span<const uint8_t> data, const RawImageShape& shape, int64_t max_pixels) {
  check_raw_shape(shape);
  check_pixel_limit(shape.height, shape.width, max_pixels, "raw image");
  const int64_t expected = checked_mul(checked_mul(int64_t{shape.height}, int64_t{shape.width}, "raw image size"),
                                       int64_t{shape.channels}, "raw image size");
  if (static_cast<int64_t>(data.size()) != expected) {
    throw Error(ErrorKind::kDecode, "raw image: expected " + std::to_string(shape.height) + "x" +
                                        std::to_string(shape.width) + "x" + std::to_string(shape.channels) + " = " +
                                        std::to_string(expected) + " bytes, got " + std::to_string(data.size()));
  }
  return std::make_unique<RawDecoder>(data, shape);
}

}  // namespace conveyor::detail

namespace conveyor {

RawImageShape raw_image_shape(int64_t height, int64_t width, int64_t channels) {
  const auto size = std::to_string(height) + "x" + std::to_string(width) + "x" + std::to_string(channels);
  check_config(channels == 1 || channels == 3, "raw images need 1 or 3 channels, got " + size);
  check_config(height > 0 && width > 0, "raw images need positive height and width, got " + size);
  constexpr int64_t kMaxSide = std::numeric_limits<int>::max();
  check_config(height <= kMaxSide && width <= kMaxSide, "raw image sides must be at most " + std::to_string(kMaxSide) +
                                                            " (the engine's int), got " + std::to_string(height) + "x" +
                                                            std::to_string(width));
  return {static_cast<int>(height), static_cast<int>(width), static_cast<int>(channels)};
}

}  // namespace conveyor

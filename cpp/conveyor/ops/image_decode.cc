#include "conveyor/ops/image_decode.h"

#include <cctype>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "conveyor/core/checked_size.h"
#include "conveyor/core/error.h"
#include "conveyor/ops/bmp_decoder.h"
#include "conveyor/ops/gif_decoder.h"
#include "conveyor/ops/image_decoder.h"
#include "conveyor/ops/jpeg_decoder.h"
#include "conveyor/ops/orientation.h"
#include "conveyor/ops/png_decoder.h"
#include "conveyor/ops/pnm_decoder.h"
#include "conveyor/ops/tiff_decoder.h"
#include "conveyor/ops/webp_decoder.h"

namespace conveyor {

namespace {

bool starts_with(std::span<const uint8_t> data, std::string_view magic, size_t offset = 0) {
  return data.size() >= offset + magic.size() && std::memcmp(data.data() + offset, magic.data(), magic.size()) == 0;
}

// A name for formats we recognise but do not decode, for the error message.
std::string unsupported_name(std::span<const uint8_t> data) {
  if (starts_with(data, "RIFF")) return "RIFF (not WebP)";
  if (data.size() >= 2 && data[0] == 'P' && (data[1] == '7' || data[1] == 'f' || data[1] == 'F')) return "PAM/PFM";
  return {};
}

}  // namespace

ImageFormat detect_image_format(std::span<const uint8_t> data) noexcept {
  if (starts_with(data, "\xFF\xD8\xFF")) return ImageFormat::kJpeg;
  if (starts_with(data, "\x89PNG\r\n\x1A\n")) return ImageFormat::kPng;
  if (starts_with(data, "RIFF") && starts_with(data, "WEBP", 8)) return ImageFormat::kWebp;
  // Classic TIFF (42) and BigTIFF (43), either byte order.
  using namespace std::string_view_literals;
  if (starts_with(data, "II*\0"sv) || starts_with(data, "MM\0*"sv) || starts_with(data, "II+\0"sv) ||
      starts_with(data, "MM\0+"sv)) {
    return ImageFormat::kTiff;
  }
  if (starts_with(data, "BM")) return ImageFormat::kBmp;
  if (starts_with(data, "GIF87a") || starts_with(data, "GIF89a")) return ImageFormat::kGif;
  // P1..P6 and the whitespace that ends the magic number.
  if (data.size() >= 3 && data[0] == 'P' && data[1] >= '1' && data[1] <= '6' && std::isspace(data[2]) != 0) {
    return ImageFormat::kPnm;
  }
  return ImageFormat::kUnknown;
}

std::string_view image_format_name(ImageFormat format) noexcept {
  switch (format) {
    case ImageFormat::kJpeg:
      return "jpeg";
    case ImageFormat::kPng:
      return "png";
    case ImageFormat::kWebp:
      return "webp";
    case ImageFormat::kTiff:
      return "tiff";
    case ImageFormat::kBmp:
      return "bmp";
    case ImageFormat::kPnm:
      return "pnm";
    case ImageFormat::kGif:
      return "gif";
    case ImageFormat::kUnknown:
      break;
  }
  return "unknown";
}

ImageInfo read_image_info(std::span<const uint8_t> data, int64_t max_pixels) {
  return detail::open_image_decoder(data, max_pixels)->info();
}

Image decode_image(std::span<const uint8_t> data, int channels, int64_t max_pixels) {
  check_config(channels == 1 || channels == 3, "decode_image: channels must be 1 or 3");
  auto decoder = detail::open_image_decoder(data, max_pixels);
  const ImageInfo& info = decoder->info();
  detail::Scratch scratch;
  detail::DecodeRequest request;
  request.region = {0, 0, info.width, info.height};
  request.channels = channels;
  const ImageView view = decoder->decode(request, scratch).view;
  Image image;
  image.height = view.height;
  image.width = view.width;
  image.channels = view.channels;
  const size_t row_bytes = static_cast<size_t>(view.width) * view.channels;
  image.pixels.resize(row_bytes * view.height);
  for (int y = 0; y < view.height; ++y) std::memcpy(image.pixels.data() + y * row_bytes, view.row(y), row_bytes);
  return image;
}

namespace detail {

void ImageDecoder::ignore_exif_orientation() noexcept {
  if (!orientation_is_exif_) return;
  if (transposes(orientation_)) std::swap(info_.width, info_.height);
  orientation_ = 1;
  info_.orientation = 1;
}

std::unique_ptr<ImageDecoder> open_image_decoder(std::span<const uint8_t> data, int64_t max_pixels) {
  switch (detect_image_format(data)) {
    case ImageFormat::kJpeg:
      return open_jpeg(data, max_pixels);
    case ImageFormat::kPng:
      return open_png(data, max_pixels);
    case ImageFormat::kWebp:
      return open_webp(data, max_pixels);
    case ImageFormat::kTiff:
      return open_tiff(data, max_pixels);
    case ImageFormat::kBmp:
      return open_bmp(data, max_pixels);
    case ImageFormat::kPnm:
      return open_pnm(data, max_pixels);
    case ImageFormat::kGif:
      return open_gif(data, max_pixels);
    case ImageFormat::kUnknown:
      break;
  }
  if (data.empty()) throw Error(ErrorKind::kDecode, "empty input (0 bytes)");
  const std::string name = unsupported_name(data);
  if (!name.empty())
    throw Error(ErrorKind::kDecode,
                "unsupported image format " + name + " (JPEG, PNG, WebP, TIFF, BMP, PNM and GIF are)");
  throw Error(ErrorKind::kDecode, "not a JPEG, PNG, WebP, TIFF, BMP, PNM or GIF image (unrecognised first bytes)");
}

void check_pixel_limit(int64_t height, int64_t width, int64_t max_pixels, const char* format) {
  if (height <= 0 || width <= 0) {
    throw Error(ErrorKind::kDecode,
                std::string(format) + ": invalid size " + std::to_string(width) + "x" + std::to_string(height));
  }
  const int64_t pixels = checked_mul(height, width, std::string(format) + " image size", ErrorKind::kTooLarge);
  if (pixels > max_pixels) {
    throw Error(ErrorKind::kTooLarge, std::string(format) + " image of " + std::to_string(width) + "x" +
                                          std::to_string(height) + " = " + std::to_string(pixels) +
                                          " pixels exceeds max_pixels=" + std::to_string(max_pixels));
  }
}

ImageView crop_view(const ImageView& src, const Region& region) noexcept {
  ImageView view = src;
  view.data = src.data + region.y * src.stride + static_cast<ptrdiff_t>(region.x) * src.channels;
  view.width = region.width;
  view.height = region.height;
  return view;
}

ImageView rgb_to_gray(const ImageView& rgb, std::vector<uint8_t>& out) {
  // Not OpenCV's RGB2GRAY: it rounds differently from PIL (off by one on about
  // one pixel in 3).
  out.resize(static_cast<size_t>(rgb.width) * rgb.height);
  for (int y = 0; y < rgb.height; ++y) {
    const uint8_t* in = rgb.row(y);
    uint8_t* o = out.data() + static_cast<size_t>(y) * rgb.width;
    for (int x = 0; x < rgb.width; ++x, in += 3) {
      o[x] = pil_luma(in[0], in[1], in[2]);
    }
  }
  return {out.data(), rgb.height, rgb.width, 1, rgb.width};
}

}  // namespace detail

}  // namespace conveyor

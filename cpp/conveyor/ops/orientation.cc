#include "conveyor/ops/orientation.h"

#include <cstring>
#include <opencv2/core.hpp>

namespace conveyor::detail {

int exif_orientation(std::span<const uint8_t> exif) noexcept {
  if (exif.size() >= 6 && std::memcmp(exif.data(), "Exif\0\0", 6) == 0) exif = exif.subspan(6);
  if (exif.size() < 8) return 1;
  const uint8_t* tiff = exif.data();
  const size_t size = exif.size();
  bool little;
  if (tiff[0] == 'I' && tiff[1] == 'I') {
    little = true;
  } else if (tiff[0] == 'M' && tiff[1] == 'M') {
    little = false;
  } else {
    return 1;
  }
  auto u16 = [&](size_t at) -> uint32_t {
    return little ? tiff[at] | (tiff[at + 1] << 8) : (tiff[at] << 8) | tiff[at + 1];
  };
  auto u32 = [&](size_t at) -> uint32_t {
    return little ? u16(at) | (u16(at + 2) << 16) : (u16(at) << 16) | u16(at + 2);
  };
  if (u16(2) != 42) return 1;
  const size_t ifd = u32(4);
  if (ifd > size || size - ifd < 2) return 1;
  const uint32_t entries = u16(ifd);
  for (uint32_t i = 0; i < entries; ++i) {
    const size_t entry = ifd + 2 + size_t{12} * i;
    if (entry + 12 > size) break;
    if (u16(entry) != 0x0112) continue;
    const uint32_t type = u16(entry + 2);
    const uint32_t value = type == 3 ? u16(entry + 8) : (type == 4 ? u32(entry + 8) : 0);
    return value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

Region to_stored(const Region& r, int orientation, int w, int h) noexcept {
  const int x0 = r.x, x1 = r.x + r.width, y0 = r.y, y1 = r.y + r.height;
  switch (orientation) {
    case 2:
      return {w - x1, y0, r.width, r.height};
    case 3:
      return {w - x1, h - y1, r.width, r.height};
    case 4:
      return {x0, h - y1, r.width, r.height};
    case 5:
      return {y0, x0, r.height, r.width};
    case 6:
      return {y0, h - x1, r.height, r.width};
    case 7:
      return {w - y1, h - x1, r.height, r.width};
    case 8:
      return {w - y1, x0, r.height, r.width};
    default:
      return r;
  }
}

std::array<double, 4> to_displayed(const std::array<double, 4>& r, int orientation, int w, int h) noexcept {
  const double x0 = r[0], y0 = r[1], x1 = r[0] + r[2], y1 = r[1] + r[3];
  switch (orientation) {
    case 2:
      return {w - x1, y0, r[2], r[3]};
    case 3:
      return {w - x1, h - y1, r[2], r[3]};
    case 4:
      return {x0, h - y1, r[2], r[3]};
    case 5:
      return {y0, x0, r[3], r[2]};
    case 6:
      return {h - y1, x0, r[3], r[2]};
    case 7:
      return {h - y1, w - x1, r[3], r[2]};
    case 8:
      return {y0, w - x1, r[3], r[2]};
    default:
      return r;
  }
}

ImageView orient(const ImageView& view, int orientation, std::vector<uint8_t>& out) {
  if (orientation < 2 || orientation > 8) return view;
  const int t = CV_8UC(view.channels);
  const cv::Mat src(view.height, view.width, t, const_cast<uint8_t*>(view.data), static_cast<size_t>(view.stride));
  const int h = transposes(orientation) ? view.width : view.height;
  const int w = transposes(orientation) ? view.height : view.width;
  out.resize(static_cast<size_t>(h) * w * view.channels);
  cv::Mat dst(h, w, t, out.data());
  switch (orientation) {
    case 2:
      cv::flip(src, dst, 1);
      break;
    case 3:
      cv::flip(src, dst, -1);
      break;
    case 4:
      cv::flip(src, dst, 0);
      break;
    case 5:
      cv::transpose(src, dst);
      break;
    case 6:
      cv::transpose(src, dst);
      cv::flip(dst, dst, 1);
      break;
    case 7:
      cv::transpose(src, dst);
      cv::flip(dst, dst, -1);
      break;
    case 8:
      cv::transpose(src, dst);
      cv::flip(dst, dst, 0);
      break;
    default:
      break;
  }
  return {out.data(), h, w, view.channels, static_cast<ptrdiff_t>(w) * view.channels};
}

Decoded oriented_region(const ImageView& stored, int orientation, const DecodeRequest& request, Scratch& scratch) {
  const Region& r = request.region;
  const ImageView part = crop_view(stored, to_stored(r, orientation, stored.width, stored.height));
  return {orient(part, orientation, scratch.oriented), static_cast<double>(r.x), static_cast<double>(r.y), 1.0};
}

}  // namespace conveyor::detail

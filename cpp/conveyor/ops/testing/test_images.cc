// Test helpers of test_images.h (test support: the testing/ folder is
// compiled into conveyor_ops_testing for the tests, never into the library).
#include "conveyor/ops/testing/test_images.h"

#include <spng.h>
#include <turbojpeg.h>
#include <webp/encode.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <stdexcept>

namespace conveyor::testing {

Image make_pattern(int height, int width, int channels) {
  Image image{height, width, channels, std::vector<uint8_t>(static_cast<size_t>(height) * width * channels)};
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        const int v = (x * (c + 1) * 255 / width + y * (3 - c) * 255 / height) / 2 + ((x / 7 + y / 5 + c) % 3) * 20 +
                      (((x * x + y * 3 * c) >> 4) & 15);
        image.pixels[(static_cast<size_t>(y) * width + x) * channels + c] = static_cast<uint8_t>(v & 255);
      }
    }
  }
  return image;
}

Image make_noise(int height, int width, int channels, uint32_t seed) {
  std::mt19937 gen(seed);
  Image image{height, width, channels, std::vector<uint8_t>(static_cast<size_t>(height) * width * channels)};
  for (auto& v : image.pixels) v = static_cast<uint8_t>(gen());
  return image;
}

std::vector<uint8_t> encode_jpeg(const Image& image, int quality, int subsampling, bool progressive) {
  tjhandle handle = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int samp = image.channels == 1  ? TJSAMP_GRAY
                   : subsampling == 444 ? TJSAMP_444
                   : subsampling == 422 ? TJSAMP_422
                                        : TJSAMP_420;
  const int flags = progressive ? TJFLAG_PROGRESSIVE : 0;
  if (tjCompress2(handle, image.pixels.data(), image.width, 0, image.height, image.channels == 1 ? TJPF_GRAY : TJPF_RGB,
                  &out, &size, samp, quality, flags) != 0) {
    throw std::runtime_error(tjGetErrorStr2(handle));
  }
  std::vector<uint8_t> bytes(out, out + size);
  tjFree(out);
  tjDestroy(handle);
  return bytes;
}

std::vector<uint8_t> encode_png(const Image& image) {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(image.width);
  ihdr.height = static_cast<uint32_t>(image.height);
  ihdr.bit_depth = 8;
  ihdr.color_type = image.channels == 1 ? SPNG_COLOR_TYPE_GRAYSCALE : SPNG_COLOR_TYPE_TRUECOLOR;
  spng_set_ihdr(ctx, &ihdr);
  if (spng_encode_image(ctx, image.pixels.data(), image.pixels.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE) != 0) {
    throw std::runtime_error("spng encode failed");
  }
  size_t size = 0;
  int error = 0;
  auto* out = static_cast<uint8_t*>(spng_get_png_buffer(ctx, &size, &error));
  std::vector<uint8_t> bytes(out, out + size);
  std::free(out);
  spng_ctx_free(ctx);
  return bytes;
}

std::vector<uint8_t> encode_webp_lossless(const Image& image) {
  uint8_t* out = nullptr;
  const size_t size = WebPEncodeLosslessRGB(image.pixels.data(), image.width, image.height, image.width * 3, &out);
  std::vector<uint8_t> bytes(out, out + size);
  WebPFree(out);
  return bytes;
}

std::vector<uint8_t> with_exif_orientation(const std::vector<uint8_t>& jpeg, int orientation) {
  // APP1: "Exif\0\0", little-endian TIFF header, IFD0 with one SHORT entry 0x0112.
  static constexpr uint8_t kPayload[] = {'E',  'x',  'i', 'f', 0, 0, 'I', 'I', 42,   0, 8, 0, 0, 0,  // headers
                                         1,    0,                                                    // 1 entry
                                         0x12, 0x01, 3,   0,   1, 0, 0,   0,   0xEE, 0, 0, 0,        // tag, value
                                         0,    0,    0,   0};                                        // no next IFD
  const size_t length = sizeof(kPayload) + 2;
  std::vector<uint8_t> out;
  out.reserve(jpeg.size() + length + 2);
  out.push_back(jpeg[0]);
  out.push_back(jpeg[1]);
  out.push_back(0xFF);
  out.push_back(0xE1);
  out.push_back(static_cast<uint8_t>(length >> 8));
  out.push_back(static_cast<uint8_t>(length & 255));
  for (uint8_t b : kPayload) out.push_back(b == 0xEE ? static_cast<uint8_t>(orientation) : b);
  for (size_t i = 2; i < jpeg.size(); ++i) out.push_back(jpeg[i]);
  return out;
}

std::vector<uint8_t> encode_tiff(const Image& image, int orientation) {
  struct Entry {
    uint16_t tag, type;
    std::vector<uint32_t> values;  // SHORT (3) or LONG (4)
  };
  const int rows_per_strip = 4;
  const size_t row_bytes = static_cast<size_t>(image.width) * image.channels;
  const int strips = (image.height + rows_per_strip - 1) / rows_per_strip;
  std::vector<uint32_t> offsets, counts;
  std::vector<Entry> entries = {
      {256, 4, {static_cast<uint32_t>(image.width)}},
      {257, 4, {static_cast<uint32_t>(image.height)}},
      {258, 3, std::vector<uint32_t>(static_cast<size_t>(image.channels), 8)},
      {259, 3, {1}},
      {262, 3, {image.channels == 1 ? 1u : 2u}},
      {273, 4, {}},  // StripOffsets, filled below
      {274, 3, {static_cast<uint32_t>(orientation)}},
      {277, 3, {static_cast<uint32_t>(image.channels)}},
      {278, 4, {static_cast<uint32_t>(rows_per_strip)}},
      {279, 4, {}},  // StripByteCounts
  };
  if (orientation <= 0) entries.erase(entries.begin() + 6);
  const size_t ifd_size = 2 + 12 * entries.size() + 4;
  // Values longer than 4 bytes follow the IFD; the pixel data follows them.
  size_t values_size = 0;
  for (const Entry& e : entries) {
    const size_t n = e.tag == 273 || e.tag == 279 ? static_cast<size_t>(strips) : e.values.size();
    if (n * (e.type == 3 ? 2 : 4) > 4) values_size += n * (e.type == 3 ? 2 : 4);
  }
  size_t data_offset = 8 + ifd_size + values_size;
  for (int s = 0; s < strips; ++s) {
    const size_t rows = static_cast<size_t>(std::min(rows_per_strip, image.height - s * rows_per_strip));
    offsets.push_back(static_cast<uint32_t>(data_offset));
    counts.push_back(static_cast<uint32_t>(rows * row_bytes));
    data_offset += rows * row_bytes;
  }
  std::vector<uint8_t> out = {'I', 'I', 42, 0, 8, 0, 0, 0};
  std::vector<uint8_t> values;
  auto put = [](std::vector<uint8_t>& v, uint32_t x, int bytes) {
    for (int i = 0; i < bytes; ++i) v.push_back(static_cast<uint8_t>(x >> (8 * i)));
  };
  put(out, static_cast<uint32_t>(entries.size()), 2);
  for (Entry& e : entries) {
    if (e.tag == 273) e.values = offsets;
    if (e.tag == 279) e.values = counts;
    const int size = e.type == 3 ? 2 : 4;
    put(out, e.tag, 2);
    put(out, e.type, 2);
    put(out, static_cast<uint32_t>(e.values.size()), 4);
    if (e.values.size() * size <= 4) {
      std::vector<uint8_t> inline_value;
      for (uint32_t x : e.values) put(inline_value, x, size);
      inline_value.resize(4, 0);
      out.insert(out.end(), inline_value.begin(), inline_value.end());
    } else {
      put(out, static_cast<uint32_t>(8 + ifd_size + values.size()), 4);
      for (uint32_t x : e.values) put(values, x, size);
    }
  }
  put(out, 0, 4);  // No next IFD.
  out.insert(out.end(), values.begin(), values.end());
  out.insert(out.end(), image.pixels.begin(), image.pixels.end());
  return out;
}

}  // namespace conveyor::testing

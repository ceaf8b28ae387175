#include "conveyor/ops/image_decode.h"

#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/ops/testing/test_images.h"

namespace conveyor {
namespace {

using testing::encode_jpeg;
using testing::encode_png;
using testing::encode_tiff;
using testing::encode_webp_lossless;
using testing::make_pattern;
using testing::with_exif_orientation;

std::span<const uint8_t> as_span(const std::vector<uint8_t>& v) { return {v.data(), v.size()}; }

// TurboJPEG's own full decode: the reference for our libjpeg-API decoder.
Image tj_decode(const std::vector<uint8_t>& jpeg, int channels) {
  tjhandle handle = tjInitDecompress();
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  tjDecompressHeader3(handle, jpeg.data(), jpeg.size(), &w, &h, &subsamp, &colorspace);
  Image image{h, w, channels, std::vector<uint8_t>(static_cast<size_t>(w) * h * channels)};
  EXPECT_EQ(tjDecompress2(handle, jpeg.data(), jpeg.size(), image.pixels.data(), w, 0, h,
                          channels == 1 ? TJPF_GRAY : TJPF_RGB, TJFLAG_ACCURATEDCT),
            0);
  tjDestroy(handle);
  return image;
}

// Expects `data` to fail with `kind` (and never crash).
void expect_error(const std::vector<uint8_t>& data, ErrorKind kind, const std::string& needle = {}) {
  try {
    decode_image(as_span(data));
    FAIL() << "no error for input of " << data.size() << " bytes";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    if (!needle.empty()) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

TEST(ImageDecodeTest, DetectsFormatFromMagicBytes) {
  const Image img = make_pattern(16, 24);
  EXPECT_EQ(detect_image_format(as_span(encode_jpeg(img))), ImageFormat::kJpeg);
  EXPECT_EQ(detect_image_format(as_span(encode_png(img))), ImageFormat::kPng);
  EXPECT_EQ(detect_image_format(as_span(encode_webp_lossless(img))), ImageFormat::kWebp);
  EXPECT_EQ(detect_image_format(as_span(encode_tiff(img))), ImageFormat::kTiff);
  // Big-endian TIFF and BigTIFF (either byte order) are TIFF too; "MM" alone is not.
  for (const std::vector<uint8_t>& tiff : std::vector<std::vector<uint8_t>>{
           {'M', 'M', 0, 42, 0, 0, 0, 8}, {'I', 'I', 43, 0, 8, 0, 0, 0}, {'M', 'M', 0, 43, 0, 8, 0, 0}}) {
    EXPECT_EQ(detect_image_format(as_span(tiff)), ImageFormat::kTiff);
  }
  const std::vector<uint8_t> mm_text = {'M', 'M', 'M', ' ', 't', 'e', 'x', 't'};
  EXPECT_EQ(detect_image_format(as_span(mm_text)), ImageFormat::kUnknown);
  EXPECT_EQ(image_format_name(ImageFormat::kTiff), "tiff");
  const std::vector<uint8_t> gif = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0};
  EXPECT_EQ(detect_image_format(as_span(gif)), ImageFormat::kGif);
  EXPECT_EQ(detect_image_format({}), ImageFormat::kUnknown);
}

// BMP, PNM and GIF pixels are checked against PIL in tests/test_decode_bmp_pnm_gif.py;
// here the C++ entry points on files small enough to write out.
TEST(ImageDecodeTest, BmpPnmAndGifDecode) {
  // 2x1 PPM, maxval 15: samples scale as PIL's round(v / 15 * 255).
  const std::vector<uint8_t> ppm = {'P', '6', ' ', '2', ' ', '1', ' ', '1', '5', '\n', 0, 1, 15, 7, 8, 14};
  EXPECT_EQ(detect_image_format(as_span(ppm)), ImageFormat::kPnm);
  Image image = decode_image(as_span(ppm), 3);
  EXPECT_EQ(image.width, 2);
  EXPECT_EQ(image.pixels, (std::vector<uint8_t>{0, 17, 255, 119, 136, 238}));
  // 2x2 24-bit BMP, bottom-up, rows padded to 4 bytes; stored BGR.
  std::vector<uint8_t> bmp = {'B', 'M', 70, 0, 0, 0, 0, 0, 0, 0, 54, 0, 0, 0,  40,
                              0,   0,   0,  2, 0, 0, 0, 2, 0, 0, 0,  1, 0, 24, 0};
  bmp.resize(54, 0);
  const std::vector<uint8_t> rows = {1, 2, 3, 4, 5, 6, 0, 0, 7, 8, 9, 10, 11, 12, 0, 0};
  bmp.insert(bmp.end(), rows.begin(), rows.end());
  EXPECT_EQ(detect_image_format(as_span(bmp)), ImageFormat::kBmp);
  image = decode_image(as_span(bmp), 3);
  EXPECT_EQ(image.pixels, (std::vector<uint8_t>{9, 8, 7, 12, 11, 10, 3, 2, 1, 6, 5, 4}));
  bmp.pop_back();
  expect_error(bmp, ErrorKind::kDecode, "BMP: truncated data (15 of 16 bytes)");
  // A 1x1 GIF89a: global table of two colours, LZW code size 2, index 1.
  const std::vector<uint8_t> gif = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0x80, 0, 0, 10,   20,   30, 40, 50,
                                    60,  ',', 0,   0,   0,   0,   1, 0, 1, 0, 0,    2, 2, 0x4C, 0x01, 0,  ';'};
  image = decode_image(as_span(gif), 3);
  EXPECT_EQ(image.pixels, (std::vector<uint8_t>{40, 50, 60}));
  EXPECT_EQ(image_format_name(read_image_info(as_span(gif)).format), "gif");
}

class JpegParityTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(JpegParityTest, FullDecodeEqualsTurboJpeg) {
  const auto [subsampling, progressive] = GetParam();
  const Image img = make_pattern(67, 93);  // Not a multiple of the MCU size.
  const auto jpeg = encode_jpeg(img, 90, subsampling, progressive);
  const Image ours = decode_image(as_span(jpeg));
  const Image ref = tj_decode(jpeg, 3);
  ASSERT_EQ(ours.height, 67);
  ASSERT_EQ(ours.width, 93);
  EXPECT_EQ(ours.pixels, ref.pixels);
}

INSTANTIATE_TEST_SUITE_P(Subsampling, JpegParityTest,
                         ::testing::Combine(::testing::Values(444, 422, 420), ::testing::Bool()));

TEST(ImageDecodeTest, GrayJpegAsRgbAndGray) {
  const Image img = make_pattern(40, 50, 1);
  const auto jpeg = encode_jpeg(img);
  const Image gray = decode_image(as_span(jpeg), 1);
  EXPECT_EQ(gray.pixels, tj_decode(jpeg, 1).pixels);
  const Image rgb = decode_image(as_span(jpeg), 3);
  ASSERT_EQ(rgb.channels, 3);
  for (size_t i = 0; i < gray.pixels.size(); ++i) {
    ASSERT_EQ(rgb.pixels[3 * i], gray.pixels[i]);
    ASSERT_EQ(rgb.pixels[3 * i + 2], gray.pixels[i]);
  }
}

TEST(ImageDecodeTest, ExifOrientationMatchesPilTranspose) {
  const Image img = make_pattern(20, 30);
  const auto jpeg = encode_jpeg(img, 95, 444);
  const Image plain = decode_image(as_span(jpeg));
  auto at = [](const Image& im, int y, int x) { return &im.pixels[(static_cast<size_t>(y) * im.width + x) * 3]; };
  for (int orientation = 1; orientation <= 8; ++orientation) {
    const Image o = decode_image(as_span(with_exif_orientation(jpeg, orientation)));
    const bool swap = orientation >= 5;
    ASSERT_EQ(o.width, swap ? 20 : 30) << orientation;
    ASSERT_EQ(o.height, swap ? 30 : 20) << orientation;
    EXPECT_EQ(read_image_info(as_span(with_exif_orientation(jpeg, orientation))).orientation, orientation);
    const int W = plain.width, H = plain.height;
    for (int y = 0; y < o.height; ++y) {
      for (int x = 0; x < o.width; ++x) {
        // Where displayed (x, y) comes from in the stored image (PIL's exif_transpose).
        int sx = x, sy = y;
        switch (orientation) {
          case 2:
            sx = W - 1 - x;
            break;
          case 3:
            sx = W - 1 - x;
            sy = H - 1 - y;
            break;
          case 4:
            sy = H - 1 - y;
            break;
          case 5:
            sx = y;
            sy = x;
            break;
          case 6:
            sx = y;
            sy = H - 1 - x;
            break;
          case 7:
            sx = W - 1 - y;
            sy = H - 1 - x;
            break;
          case 8:
            sx = W - 1 - y;
            sy = x;
            break;
          default:
            break;
        }
        ASSERT_EQ(std::memcmp(at(o, y, x), at(plain, sy, sx), 3), 0) << "orientation " << orientation;
      }
    }
  }
}

TEST(ImageDecodeTest, TiffHeaderAndOrientation) {
  const Image img = make_pattern(21, 34);
  const auto tiff = encode_tiff(img);
  const ImageInfo info = read_image_info(as_span(tiff));
  EXPECT_EQ(info.format, ImageFormat::kTiff);
  EXPECT_EQ(info.height, 21);
  EXPECT_EQ(info.width, 34);
  EXPECT_EQ(info.orientation, 1);
  EXPECT_EQ(decode_image(as_span(tiff)).pixels, img.pixels);
  const Image gray = make_pattern(21, 34, 1);
  EXPECT_EQ(decode_image(as_span(encode_tiff(gray)), 1).pixels, gray.pixels);
  // Orientation 6 (rotate 90 clockwise): the header's size is the displayed one.
  const auto rotated = encode_tiff(img, 6);
  const ImageInfo turned = read_image_info(as_span(rotated));
  EXPECT_EQ(turned.orientation, 6);
  EXPECT_EQ(turned.height, 34);
  EXPECT_EQ(turned.width, 21);
  const Image out = decode_image(as_span(rotated));
  ASSERT_EQ(out.height, 34);
  ASSERT_EQ(out.width, 21);
  // Displayed (x, y) comes from stored (y, H - 1 - x).
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      const size_t stored = (static_cast<size_t>(img.height - 1 - x) * img.width + y) * 3;
      ASSERT_EQ(std::memcmp(&out.pixels[(static_cast<size_t>(y) * out.width + x) * 3], &img.pixels[stored], 3), 0);
    }
  }
  // The pixel limit is checked from the header.
  try {
    read_image_info(as_span(tiff), 713);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTooLarge);
    EXPECT_EQ(std::string(e.what()), "TIFF image of 34x21 = 714 pixels exceeds max_pixels=713");
  }
}

TEST(ImageDecodeTest, PngAndLosslessWebpRoundTripExactly) {
  const Image img = make_pattern(33, 47);
  EXPECT_EQ(decode_image(as_span(encode_png(img))).pixels, img.pixels);
  EXPECT_EQ(decode_image(as_span(encode_webp_lossless(img))).pixels, img.pixels);
  const Image gray = make_pattern(33, 47, 1);
  EXPECT_EQ(decode_image(as_span(encode_png(gray)), 1).pixels, gray.pixels);
}

TEST(ImageDecodeTest, BadInputsAreDecodeErrors) {
  const Image img = make_pattern(64, 64);
  const auto jpeg = encode_jpeg(img);
  const auto png = encode_png(img);
  const auto webp = encode_webp_lossless(img);
  expect_error({}, ErrorKind::kDecode, "empty");
  const std::string text = "this is not an image, just some text\n";
  expect_error(std::vector<uint8_t>(text.begin(), text.end()), ErrorKind::kDecode,
               "not a JPEG, PNG, WebP, TIFF, BMP, PNM or GIF image");
  expect_error({'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0}, ErrorKind::kDecode, "GIF: truncated data");
  expect_error({'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0, ';'}, ErrorKind::kDecode, "GIF: no image");
  expect_error({'B', 'M', 60, 0, 0, 0, 0, 0, 0, 0, 54, 0, 0, 0}, ErrorKind::kDecode, "BMP: truncated file header");
  expect_error({'P', '6', '\n', '1', ' ', '1', '\n', '2', '5', '5', '\n', 0, 0}, ErrorKind::kDecode,
               "PNM: truncated data (2 of 3 bytes)");
  expect_error({'P', '7', '\n'}, ErrorKind::kDecode, "unsupported image format PAM/PFM");
  std::mt19937 gen(42);
  std::vector<uint8_t> noise(4096);
  for (auto& b : noise) b = static_cast<uint8_t>(gen());
  expect_error(noise, ErrorKind::kDecode);
  const auto tiff = encode_tiff(img);
  for (const auto* data : {&jpeg, &png, &webp, &tiff}) {
    expect_error(std::vector<uint8_t>(data->begin(), data->begin() + 4), ErrorKind::kDecode);   // magic only
    expect_error(std::vector<uint8_t>(data->begin(), data->begin() + 20), ErrorKind::kDecode);  // truncated header
    expect_error(std::vector<uint8_t>(data->begin(), data->begin() + static_cast<long>(data->size() / 2)),
                 ErrorKind::kDecode);  // truncated body
    // Magic bytes followed by garbage.
    std::vector<uint8_t> garbage(data->begin(), data->begin() + 12);
    for (uint8_t b : noise) garbage.push_back(b);  // (insert() trips GCC 12's -Warray-bounds under TSan)
    expect_error(garbage, ErrorKind::kDecode);
  }
  expect_error(std::vector<uint8_t>(jpeg.begin(), jpeg.end() - 10), ErrorKind::kDecode, "Premature end");
  // The TIFF header is intact, its last strip cut: libtiff's message is the cause.
  expect_error(std::vector<uint8_t>(tiff.begin(), tiff.end() - 10), ErrorKind::kDecode,
               "TIFF: corrupt or truncated strip 15 (");
}

TEST(ImageDecodeTest, BitFlippedInputsNeverCrash) {
  const Image img = make_pattern(48, 48);
  std::mt19937 gen(7);
  int errors = 0, decoded = 0;
  for (const auto& data : {encode_jpeg(img), encode_jpeg(img, 80, 444, true), encode_png(img),
                           encode_webp_lossless(img), encode_tiff(img)}) {
    for (int trial = 0; trial < 60; ++trial) {
      std::vector<uint8_t> bad = data;
      for (int k = 0; k < 1 + trial % 4; ++k) bad[gen() % bad.size()] ^= static_cast<uint8_t>(1u << (gen() % 8));
      try {
        const Image out = decode_image(as_span(bad));
        // Corruption inside entropy-coded data may still decode (as with PIL).
        EXPECT_EQ(out.pixels.size(), static_cast<size_t>(out.height) * out.width * 3);
        ++decoded;
      } catch (const Error& e) {
        EXPECT_TRUE(e.kind() == ErrorKind::kDecode || e.kind() == ErrorKind::kTooLarge) << e.what();
        ++errors;
      }
    }
  }
  EXPECT_GT(errors, 0);
}

// Patches the SOF0 frame size of a JPEG.
std::vector<uint8_t> jpeg_with_size(std::vector<uint8_t> jpeg, int width, int height) {
  for (size_t i = 2; i + 9 < jpeg.size(); ++i) {
    if (jpeg[i] == 0xFF && (jpeg[i + 1] == 0xC0 || jpeg[i + 1] == 0xC2)) {
      jpeg[i + 5] = static_cast<uint8_t>(height >> 8);
      jpeg[i + 6] = static_cast<uint8_t>(height & 255);
      jpeg[i + 7] = static_cast<uint8_t>(width >> 8);
      jpeg[i + 8] = static_cast<uint8_t>(width & 255);
      return jpeg;
    }
  }
  ADD_FAILURE() << "no SOF marker";
  return jpeg;
}

uint32_t crc32(const uint8_t* data, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= data[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

TEST(ImageDecodeTest, HugeHeadersAreTooLargeBeforeAllocation) {
  const Image img = make_pattern(16, 16);
  const auto huge_jpeg = jpeg_with_size(encode_jpeg(img), 65000, 65000);
  expect_error(huge_jpeg, ErrorKind::kTooLarge, "65000x65000");
  // Within the limit when asked: header reads fine, then the data is truncated.
  EXPECT_EQ(read_image_info(as_span(huge_jpeg), int64_t{65000} * 65000).width, 65000);

  // A PNG signature + IHDR of 100000 x 100000 (valid CRC) and nothing else.
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
  const uint32_t side = 100000;
  for (int k = 0; k < 2; ++k) {
    for (int s = 24; s >= 0; s -= 8) png.push_back(static_cast<uint8_t>(side >> s));
  }
  for (uint8_t b : {8, 2, 0, 0, 0}) png.push_back(b);  // 8-bit RGB, no interlace
  const uint32_t crc = crc32(png.data() + 12, 17);
  for (int s = 24; s >= 0; s -= 8) png.push_back(static_cast<uint8_t>(crc >> s));
  expect_error(png, ErrorKind::kTooLarge, "100000x100000");
  // The limit is configurable.
  EXPECT_THROW(decode_image(as_span(encode_png(img)), 3, 255), Error);
  EXPECT_NO_THROW(decode_image(as_span(encode_png(img)), 3, 256));
}

}  // namespace
}  // namespace conveyor

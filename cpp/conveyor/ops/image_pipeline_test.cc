#include "conveyor/ops/image_pipeline.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/core/float16.h"
#include "conveyor/ops/testing/test_images.h"
#include "conveyor/ops/transforms/function.h"

namespace conveyor {
namespace {

using testing::encode_jpeg;
using testing::encode_png;
using testing::make_pattern;
using testing::with_exif_orientation;

std::span<const uint8_t> as_span(const std::vector<uint8_t>& v) { return {v.data(), v.size()}; }

const NormalizeSpec kImageNet{{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};

template <typename T>
std::vector<T> run(const ImagePipeline& p, const std::vector<uint8_t>& data, uint64_t index = 0) {
  std::vector<T> out(p.output_spec().num_bytes() / sizeof(T));
  SampleRng rng(1, 0, index);
  p.apply(as_span(data), rng, out.data());
  return out;
}

void expect_config_error(std::vector<TransformSpec> t, ImageOutputSpec o, const std::string& needle) {
  try {
    ImagePipeline p(std::move(t), o);
    FAIL() << "accepted; expected an error about " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ImagePipelineTest, RejectsInvalidChains) {
  const ImageOutputSpec f32{};
  expect_config_error({}, f32, "fixed output size");
  expect_config_error({ResizeSpec{256}}, f32, "fixed output size");
  expect_config_error({CenterCropSpec{{224, 224}}, ResizeSpec{256}}, f32, "fixed output size");
  expect_config_error({CenterCropSpec{{224, 224}}, NormalizeSpec{{0.5f}, {0.5f}}}, f32, "one value per channel");
  expect_config_error({CenterCropSpec{{4, 4}}, kImageNet}, {DType::kUInt8}, "uint8");
  expect_config_error({kImageNet, CenterCropSpec{{4, 4}}}, f32, "after Normalize");
  expect_config_error({CenterCropSpec{{4, 4}}, NormalizeSpec{{0, 0, 0}, {1, 0, 1}}}, f32, "non-zero");
  expect_config_error({CenterCropSpec{{0, 4}}}, f32, "positive");
  expect_config_error({RandomResizedCropSpec{{8, 8}, {0.5, 0.1}}}, f32, "scale");
  expect_config_error({RandomResizedCropSpec{{8, 8}, {0.1, 1.0}, {0, 1}}}, f32, "ratio");
  expect_config_error({CenterCropSpec{{4, 4}}, HorizontalFlipSpec{1.5}}, f32, "p must");
  expect_config_error({CenterCropSpec{{4, 4}}}, {DType::kFloat32, Layout::kCHW, 2}, "channels");
  expect_config_error({CenterCropSpec{{4, 4}}}, {DType::kInt64}, "dtype");
}

TEST(ImagePipelineTest, OutputSpecFollowsLayoutAndDtype) {
  ImagePipeline chw({ResizeSpec{256}, CenterCropSpec{{224, 200}}}, {});
  EXPECT_EQ(chw.output_spec().shape, (std::vector<int64_t>{3, 224, 200}));
  EXPECT_EQ(chw.output_spec().dtype, DType::kFloat32);
  ImagePipeline hwc({RandomResizedCropSpec{{32, 48}}}, {DType::kFloat16, Layout::kHWC, 1});
  EXPECT_EQ(hwc.output_spec().shape, (std::vector<int64_t>{32, 48, 1}));
  EXPECT_EQ(hwc.output_spec().num_bytes(), size_t{32} * 48 * 2);
}

TEST(ImagePipelineTest, HalfAndBFloat16OutputsAreTheFloat32OutputRounded) {
  const auto jpeg = encode_jpeg(make_pattern(50, 70), 90, 420);
  const std::vector<TransformSpec> t = {RandomResizedCropSpec{{24, 24}}, HorizontalFlipSpec{}, kImageNet};
  const auto f32 = run<float>(ImagePipeline(t, {DType::kFloat32}), jpeg, 3);
  const auto f16 = run<uint16_t>(ImagePipeline(t, {DType::kFloat16}), jpeg, 3);
  const auto bf16 = run<uint16_t>(ImagePipeline(t, {DType::kBFloat16}), jpeg, 3);
  ASSERT_EQ(f16.size(), f32.size());
  ASSERT_EQ(bf16.size(), f32.size());
  for (size_t i = 0; i < f32.size(); ++i) {
    ASSERT_EQ(f16[i], float_to_half(f32[i])) << i;
    ASSERT_EQ(bf16[i], float_to_bfloat16(f32[i])) << i;
  }
}

TEST(ImagePipelineTest, CropWindowDecodeEqualsFullDecodeThenCrop) {
  const auto jpeg = encode_jpeg(make_pattern(97, 131), 90, 420);
  for (int orientation : {1, 3, 6, 8}) {
    const auto data = with_exif_orientation(jpeg, orientation);
    const std::vector<TransformSpec> t = {CenterCropSpec{{37, 41}}};
    const ImagePipeline window(t, {DType::kUInt8, Layout::kHWC}, kDefaultMaxPixels, {true, false});
    const ImagePipeline full(t, {DType::kUInt8, Layout::kHWC}, kDefaultMaxPixels, {false, false});
    EXPECT_EQ(run<uint8_t>(window, data), run<uint8_t>(full, data)) << "orientation " << orientation;
  }
}

TEST(ImagePipelineTest, WithoutExifOrientationTheStoredPixelsComeOut) {
  // As torchvision's ImageFolder (PIL's convert) gives them: the tag is left out.
  const auto jpeg = encode_jpeg(make_pattern(40, 60), 95, 444);
  const std::vector<TransformSpec> crop = {CenterCropSpec{{40, 40}}};
  ImagePipelineOptions stored;
  stored.exif_orientation = false;
  const ImagePipeline plain(crop, {DType::kUInt8, Layout::kHWC});
  const ImagePipeline as_stored(crop, {DType::kUInt8, Layout::kHWC}, kDefaultMaxPixels, stored);
  const auto expected = run<uint8_t>(plain, jpeg);
  for (int orientation = 1; orientation <= 8; ++orientation) {
    const auto data = with_exif_orientation(jpeg, orientation);
    EXPECT_EQ(run<uint8_t>(as_stored, data), expected) << "orientation " << orientation;
    // Applied by default: a 40x60 image turned by 6 (90 degrees) is 60x40, whose centre differs.
    if (orientation != 1) {
      EXPECT_NE(run<uint8_t>(plain, data), expected) << "orientation " << orientation;
    }
  }
}

TEST(ImagePipelineTest, DctScaledDecodeIsCloseToFullDecode) {
  const auto jpeg = encode_jpeg(make_pattern(480, 640), 95, 444);
  const std::vector<TransformSpec> t = {ResizeSpec{0, {60, 80}}};
  const ImageOutputSpec u8{DType::kUInt8, Layout::kHWC};
  const auto scaled = run<uint8_t>(ImagePipeline(t, u8, kDefaultMaxPixels, {true, true, 1.0}), jpeg);
  const auto full = run<uint8_t>(ImagePipeline(t, u8, kDefaultMaxPixels, {true, false}), jpeg);
  double total = 0;
  for (size_t i = 0; i < full.size(); ++i) total += std::abs(scaled[i] - full[i]);
  EXPECT_LT(total / full.size(), 6.0);
  EXPECT_NE(scaled, full);  // The DCT path really ran.
}

TEST(ImagePipelineTest, HugeDctMarginMeansNoScalingWithoutOverflow) {
  // margin x output once went through an int cast (undefined beyond 2**31;
  // UBSan's float-cast-overflow aborts the old code here).
  const auto jpeg = encode_jpeg(make_pattern(480, 640), 95, 444);
  const std::vector<TransformSpec> t = {ResizeSpec{0, {60, 80}}};
  const ImageOutputSpec u8{DType::kUInt8, Layout::kHWC};
  const auto huge = run<uint8_t>(ImagePipeline(t, u8, kDefaultMaxPixels, {true, true, 1e300}), jpeg);
  const auto full = run<uint8_t>(ImagePipeline(t, u8, kDefaultMaxPixels, {true, false}), jpeg);
  EXPECT_EQ(huge, full);
}

TEST(ImagePipelineTest, FlipMirrorsAndIsDeterministic) {
  const auto png = encode_png(make_pattern(40, 50));
  const ImageOutputSpec u8{DType::kUInt8, Layout::kHWC};
  const auto plain = run<uint8_t>(ImagePipeline({CenterCropSpec{{20, 30}}}, u8), png);
  const auto flipped = run<uint8_t>(ImagePipeline({CenterCropSpec{{20, 30}}, HorizontalFlipSpec{1.0}}, u8), png);
  for (int y = 0; y < 20; ++y)
    for (int x = 0; x < 30; ++x)
      for (int c = 0; c < 3; ++c) ASSERT_EQ(flipped[(y * 30 + x) * 3 + c], plain[(y * 30 + 29 - x) * 3 + c]);
  // A flip before a non-central crop mirrors the crop box (torchvision order).
  const auto before = run<uint8_t>(ImagePipeline({HorizontalFlipSpec{1.0}, CenterCropSpec{{20, 29}}}, u8), png);
  const auto after = run<uint8_t>(ImagePipeline({CenterCropSpec{{20, 29}}, HorizontalFlipSpec{1.0}}, u8), png);
  EXPECT_NE(before, after);  // 50 - 29 is odd: the central box is not symmetric.
  // p = 0.5: same stream, same choice; across samples both choices occur.
  const ImagePipeline random({CenterCropSpec{{20, 30}}, HorizontalFlipSpec{0.5}}, u8);
  int flips = 0;
  for (uint64_t i = 0; i < 64; ++i) {
    const auto a = run<uint8_t>(random, png, i);
    EXPECT_EQ(a, run<uint8_t>(random, png, i));
    flips += a == flipped;
  }
  EXPECT_GT(flips, 10);
  EXPECT_LT(flips, 54);
}

TEST(ImagePipelineTest, NormalizeMatchesTorchvisionInFloat32) {
  // Widths below, at and past the float output's 8-pixel vector steps, with
  // and without a flip; the uint8 output of the same chain is the reference.
  // With and without streaming stores (rows whose starts are not 16-byte
  // aligned too: widths 21, 3).
  const auto png = encode_png(make_pattern(16, 21));
  for (const auto& [h, w] : {std::pair{16, 16}, {13, 21}, {9, 8}, {5, 3}}) {
    for (const double flip : {0.0, 1.0}) {
      for (const bool stream : {false, true}) {
        const std::vector<TransformSpec> crop = {CenterCropSpec{{h, w}}, HorizontalFlipSpec{flip}};
        std::vector<TransformSpec> normalized = crop;
        normalized.emplace_back(kImageNet);
        ImagePipelineOptions options;
        options.stream_output = stream;
        const auto u8 = run<uint8_t>(ImagePipeline(crop, {DType::kUInt8, Layout::kCHW}), png);
        const auto f = run<float>(ImagePipeline(normalized, {}, kDefaultMaxPixels, options), png);
        ASSERT_EQ(u8.size(), f.size());
        for (size_t i = 0; i < f.size(); ++i) {
          const size_t c = i / static_cast<size_t>(h * w);
          const float expected = (static_cast<float>(u8[i]) / 255.0f - kImageNet.mean[c]) / kImageNet.std[c];
          ASSERT_EQ(f[i], expected) << h << "x" << w << " flip " << flip << " stream " << stream << " at " << i;
        }
      }
    }
  }
}

TEST(ImagePipelineTest, CenterCropLargerThanImagePadsWithZeros) {
  const Image img = make_pattern(10, 12);
  const auto out =
      run<uint8_t>(ImagePipeline({CenterCropSpec{{14, 15}}}, {DType::kUInt8, Layout::kHWC}), encode_png(img));
  // torchvision pads (14 - 10) // 2 = 2 rows on top, (15 - 12) // 2 = 1 column on the left.
  for (int y = 0; y < 14; ++y) {
    for (int x = 0; x < 15; ++x) {
      const bool inside = y >= 2 && y < 12 && x >= 1 && x < 13;
      for (int c = 0; c < 3; ++c) {
        const uint8_t expected = inside ? img.pixels[((y - 2) * 12 + (x - 1)) * 3 + c] : 0;
        ASSERT_EQ(out[(y * 15 + x) * 3 + c], expected) << y << "," << x;
      }
    }
  }
}

TEST(ImagePipelineTest, ConcurrentApplyMatchesSerial) {
  const auto jpeg = encode_jpeg(make_pattern(200, 300));
  const ImagePipeline p({RandomResizedCropSpec{{64, 64}}, HorizontalFlipSpec{}, kImageNet}, {});
  std::vector<std::vector<float>> serial;
  for (uint64_t i = 0; i < 16; ++i) serial.push_back(run<float>(p, jpeg, i));
  std::vector<std::vector<float>> parallel(16);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = static_cast<uint64_t>(t); i < 16; i += 2) parallel[i] = run<float>(p, jpeg, i);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(serial, parallel);
  EXPECT_NE(serial[0], serial[1]);
}

TEST(ImagePipelineTest, DecodeErrorsPropagate) {
  const ImagePipeline p({CenterCropSpec{{8, 8}}}, {});
  std::vector<float> out(3 * 8 * 8);
  SampleRng rng(0, 0, 0);
  const std::vector<uint8_t> text = {'n', 'o', 'p', 'e'};
  EXPECT_THROW(p.apply(as_span(text), rng, out.data()), Error);
  const ImagePipeline small({CenterCropSpec{{8, 8}}}, {}, 100);
  try {
    small.apply(as_span(encode_png(make_pattern(20, 20))), rng, out.data());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTooLarge);
  }
}

TEST(RandomResizedCropTest, BoxesStayInsideAndFollowTheRules) {
  for (uint64_t i = 0; i < 2000; ++i) {
    SampleRng rng(3, 1, i);
    const CropBox b = sample_random_resized_crop(300, 500, {0.08, 1.0}, {3.0 / 4.0, 4.0 / 3.0}, rng);
    ASSERT_GE(b.top, 0);
    ASSERT_GE(b.left, 0);
    ASSERT_LE(b.top + b.height, 300);
    ASSERT_LE(b.left + b.width, 500);
    const double area = static_cast<double>(b.height) * b.width / (300.0 * 500.0);
    ASSERT_GE(area, 0.07);
    ASSERT_LE(area, 1.0);
  }
  // Impossible aspect ratio: the fallback is torchvision's central crop.
  SampleRng rng(0, 0, 0);
  const CropBox b = sample_random_resized_crop(100, 100, {1.0, 1.0}, {2.0, 2.0}, rng);
  EXPECT_EQ(b.width, 100);
  EXPECT_EQ(b.height, 50);
  EXPECT_EQ(b.top, 25);
  EXPECT_EQ(b.left, 0);
}

TEST(ImagePipelineTest, OutputPassIsTorchvisionArithmeticAtEveryWidthAndFlip) {
  // The float32 CHW pass (vectorized in blocks of 8 pixels where the CPU
  // allows, the rest pixel by pixel) gives torchvision's (x / 255 - mean) / std
  // exactly, flipped or not, at widths around the block size.
  for (int w : {1, 7, 8, 9, 16, 29}) {
    for (double p_flip : {0.0, 1.0}) {
      const int h = 3;
      std::vector<uint8_t> pixels(static_cast<size_t>(h) * w * 3);
      for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
      ImagePipelineOptions options;
      options.raw_input = RawImageShape{h, w, 3};
      const ImagePipeline p({HorizontalFlipSpec{p_flip}, kImageNet}, {}, kDefaultMaxPixels, options);
      const std::vector<float> out = run<float>(p, pixels);
      ASSERT_EQ(out.size(), pixels.size());
      for (int c = 0; c < 3; ++c) {
        for (int y = 0; y < h; ++y) {
          for (int x = 0; x < w; ++x) {
            const int sx = p_flip > 0 ? w - 1 - x : x;
            const float v = pixels[(static_cast<size_t>(y) * w + sx) * 3 + c];
            const float expected = (v / 255.0f - kImageNet.mean[c]) / kImageNet.std[c];
            ASSERT_EQ(out[(static_cast<size_t>(c) * h + y) * w + x], expected)
                << "width " << w << " flip " << p_flip << " at (" << x << ", " << y << ", " << c << ")";
          }
        }
      }
    }
  }
}

TEST(ImagePipelineTest, EveryImageStepsNewSizeIsCheckedAgainstMaxPixels) {
  // Pad (reflect), RandomRotation (expand) and a user function once made
  // images past max_pixels unchecked (or tried to allocate them): each is
  // TooLarge, naming the step and the size; a rotation about a far center
  // that leaves no pixel is a ConfigError.
  const auto png = encode_png(make_pattern(32, 48));
  const ImageOutputSpec u8{DType::kUInt8, Layout::kHWC};
  const auto error_of = [&](TransformSpec step, int64_t max_pixels) -> std::pair<ErrorKind, std::string> {
    const ImagePipeline p({std::move(step), ResizeSpec{0, {8, 8}}}, u8, max_pixels);
    try {
      run<uint8_t>(p, png);
    } catch (const Error& e) {
      return {e.kind(), e.what()};
    }
    return {ErrorKind::kInternal, "accepted"};
  };
  EXPECT_EQ(error_of({"pad", {{"padding", {50, 50, 50, 50}}, {"padding_mode", {2}}}}, 3000),
            std::pair(ErrorKind::kTooLarge, std::string("Pad: an image of 148x132 pixels, more than "
                                                        "max_pixels (3000)")));
  EXPECT_EQ(error_of({"random_rotation", {{"degrees", {45, 45}}, {"expand", {1}}}}, 3000),
            std::pair(ErrorKind::kTooLarge, std::string("RandomRotation: an image of 58x58 pixels, more "
                                                        "than max_pixels (3000)")));
  EXPECT_EQ(error_of({"random_rotation", {{"degrees", {30, 30}}, {"expand", {1}}, {"center", {3e9, 3e9}}}},
                     kDefaultMaxPixels),
            std::pair(ErrorKind::kConfig,
                      std::string("RandomRotation: an image of 0x0 pixels (each side must be at least 1)")));
  TransformSpec grows{"Lambda(grow)", {}, [](SampleImage& sample) {
                        sample.image = {100, 100, 3, std::vector<uint8_t>(100 * 100 * 3)};
                      }};
  EXPECT_EQ(error_of(grows, 3000),
            std::pair(ErrorKind::kTooLarge, std::string("Lambda(grow): an image of 100x100 pixels, more "
                                                        "than max_pixels (3000)")));
  // A function's result is checked before it is copied in, too.
  TransformSpec wide{"Lambda(wide)", {}, [](SampleImage& sample) {
                       const uint8_t pixel[3] = {0, 0, 0};
                       take_function_result(sample, pixel, 1, int64_t{1} << 33, 3, "Lambda(wide)");
                     }};
  EXPECT_EQ(error_of(wide, kDefaultMaxPixels).first, ErrorKind::kTooLarge);
  EXPECT_EQ(error_of(grows, 10000).second, "accepted");
}

}  // namespace
}  // namespace conveyor

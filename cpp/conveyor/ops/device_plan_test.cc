#include "conveyor/ops/device_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/ops/image_decode.h"
#include "conveyor/ops/testing/test_images.h"

namespace conveyor {
namespace {

using testing::encode_jpeg;
using testing::encode_png;
using testing::make_pattern;
using testing::with_exif_orientation;

std::span<const uint8_t> as_span(const std::vector<uint8_t>& v) { return {v.data(), v.size()}; }

// One sample through DevicePlanTransform: its record's bytes.
std::vector<uint8_t> plan(const DevicePlanTransform& t, const std::vector<uint8_t>& data, SampleRng& rng) {
  std::vector<uint8_t> record;
  t.apply_variable(
      as_span(data), rng,
      [&](const SampleSpec& spec) {
        record.resize(spec.num_bytes());
        return static_cast<void*>(record.data());
      },
      nullptr);
  return record;
}

struct Difference {
  double mean = 0;
  int most = 0;
};

// The device's output for `jpeg` (decoded whole on the host, resampled by
// the device's code) against the CPU path's, both uint8.
Difference device_vs_cpu(std::shared_ptr<const ImagePipeline> pipeline, const std::vector<uint8_t>& jpeg,
                         uint64_t index) {
  DevicePlanTransform transform(pipeline);
  SampleRng rng(7, 0, index);
  const std::vector<uint8_t> record = plan(transform, jpeg, rng);
  const DeviceSampleView view = read_device_sample(as_span(record));
  EXPECT_EQ(view.record.kind, DeviceSampleKind::kJpeg);
  const Image decoded = decode_image(as_span(jpeg), 3);
  std::vector<uint8_t> device(pipeline->output_spec().num_bytes());
  device_resample_on_host(*pipeline, view.record, decoded.pixels.data(), static_cast<int64_t>(decoded.width) * 3,
                          device.data());
  std::vector<uint8_t> cpu(device.size());
  SampleRng cpu_rng(7, 0, index);
  pipeline->apply(as_span(jpeg), cpu_rng, cpu.data());
  Difference d;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const int diff = std::abs(static_cast<int>(cpu[i]) - static_cast<int>(device[i]));
    d.mean += diff;
    d.most = std::max(d.most, diff);
  }
  d.mean /= static_cast<double>(cpu.size());
  return d;
}

std::shared_ptr<const ImagePipeline> train_chain(bool dct_scale, DType dtype = DType::kUInt8) {
  ImagePipelineOptions options;
  options.dct_scale = dct_scale;
  return std::make_shared<ImagePipeline>(
      std::vector<TransformSpec>{RandomResizedCropSpec{{224, 224}}, HorizontalFlipSpec{}},
      ImageOutputSpec{dtype, Layout::kCHW, 3}, kDefaultMaxPixels, options);
}

TEST(DevicePlanTest, AnEnlargementIsThePipelinesToWithinOneLevel) {
  // Growing is plain bilinear on both sides: they differ by rounding only
  // (the device rounds the horizontal pass to 8 bits, as PIL does; the CPU
  // path keeps more bits).
  ImagePipelineOptions options;
  options.dct_scale = false;
  auto grow =
      std::make_shared<ImagePipeline>(std::vector<TransformSpec>{ResizeSpec{300}, CenterCropSpec{{224, 224}}},
                                      ImageOutputSpec{DType::kUInt8, Layout::kHWC, 3}, kDefaultMaxPixels, options);
  const Difference d = device_vs_cpu(grow, encode_jpeg(make_pattern(150, 200)), 0);
  EXPECT_LE(d.most, 1);
  EXPECT_LT(d.mean, 0.5);
}

TEST(DevicePlanTest, AShrinkIsWithinTheTargetOfTheCpuPath) {
  // The device computes PIL's antialiased bilinear directly; the CPU path
  // approximates it (a tent prefilter, then bilinear sampling:
  // docs/design/resize.md) and decodes DCT-scaled when the crop is much
  // larger than the output. The bound is a mean difference of 2
  // levels; this pattern's sharp edges are harder than photos.
  const std::vector<uint8_t> jpeg = encode_jpeg(make_pattern(750, 1000));
  for (const bool dct_scale : {false, true}) {
    for (uint64_t i = 0; i < 12; ++i) {
      EXPECT_LT(device_vs_cpu(train_chain(dct_scale), jpeg, i).mean, 2.0) << "sample " << i << " dct " << dct_scale;
    }
  }
}

TEST(DevicePlanTest, TheOutputTablesAreTheCpuPathsPointwiseSteps) {
  // float32 with Normalize: the device writes each channel's table entry.
  ImagePipelineOptions options;
  options.dct_scale = false;
  const NormalizeSpec normalize{{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
  auto pipeline =
      std::make_shared<ImagePipeline>(std::vector<TransformSpec>{CenterCropSpec{{64, 64}}, normalize},
                                      ImageOutputSpec{DType::kFloat32, Layout::kCHW, 3}, kDefaultMaxPixels, options);
  const std::vector<uint8_t> jpeg = encode_jpeg(make_pattern(80, 90));
  DevicePlanTransform transform(pipeline);
  SampleRng rng(1, 0, 0);
  const DeviceSampleView view = read_device_sample(as_span(plan(transform, jpeg, rng)));
  const Image decoded = decode_image(as_span(jpeg), 3);
  std::vector<float> device(64 * 64 * 3), cpu(device.size());
  device_resample_on_host(*pipeline, view.record, decoded.pixels.data(), decoded.width * 3, device.data());
  SampleRng cpu_rng(1, 0, 0);
  pipeline->apply(as_span(jpeg), cpu_rng, cpu.data());
  // A plain crop: the same pixels, so the same floats.
  for (size_t i = 0; i < cpu.size(); ++i) ASSERT_FLOAT_EQ(device[i], cpu[i]) << i;
}

TEST(DevicePlanTest, ThePlanDrawsTheRandomNumbersTheCpuPathDraws) {
  auto pipeline = train_chain(true);
  DevicePlanTransform transform(pipeline);
  const std::vector<uint8_t> jpeg = encode_jpeg(make_pattern(100, 120));
  SampleRng planned(3, 1, 5), cpu(3, 1, 5);
  const std::vector<uint8_t> record = plan(transform, jpeg, planned);
  std::vector<uint8_t> out(pipeline->output_spec().num_bytes());
  pipeline->apply(as_span(jpeg), cpu, out.data());
  EXPECT_EQ(planned.next_u64(), cpu.next_u64());
  // The record keeps the stream as it was before, for a redo on the host.
  SampleRng start(3, 1, 5);
  EXPECT_EQ(read_device_sample(as_span(record)).record.rng.next_u64(), start.next_u64());
}

TEST(DevicePlanTest, WhatTheDeviceCannotTakeIsFinishedByTheCpuPathExactly) {
  auto pipeline = train_chain(true);
  DevicePlanTransform transform(pipeline);
  const auto pattern = make_pattern(90, 110);
  for (const std::vector<uint8_t>& data :
       {encode_png(pattern), encode_jpeg(pattern, 90, 420, true), with_exif_orientation(encode_jpeg(pattern), 6)}) {
    SampleRng rng(2, 0, 9), cpu_rng(2, 0, 9);
    const std::vector<uint8_t> record = plan(transform, data, rng);
    const DeviceSampleView view = read_device_sample(as_span(record));
    EXPECT_EQ(view.record.kind, DeviceSampleKind::kDone);
    std::vector<uint8_t> cpu(pipeline->output_spec().num_bytes());
    pipeline->apply(as_span(data), cpu_rng, cpu.data());
    EXPECT_TRUE(std::equal(cpu.begin(), cpu.end(), view.payload.begin(), view.payload.end()));
  }
  EXPECT_EQ(transform.host_samples(), 3);
  EXPECT_EQ(transform.device_samples(), 0);

  // Without EXIF orientation the stored pixels come out; a transposing tag
  // still goes to the CPU path (its header's size is the displayed one).
  ImagePipelineOptions stored;
  stored.exif_orientation = false;
  auto ignoring =
      std::make_shared<ImagePipeline>(std::vector<TransformSpec>{RandomResizedCropSpec{{32, 32}}},
                                      ImageOutputSpec{DType::kUInt8, Layout::kCHW, 3}, kDefaultMaxPixels, stored);
  const std::vector<uint8_t> tagged = with_exif_orientation(encode_jpeg(make_pattern(60, 110)), 6);
  SampleRng rng(4, 0, 1), cpu_rng(4, 0, 1);
  const std::vector<uint8_t> record = plan(DevicePlanTransform(ignoring), tagged, rng);
  const DeviceSampleView view = read_device_sample(as_span(record));
  EXPECT_EQ(view.record.kind, DeviceSampleKind::kDone);
  std::vector<uint8_t> cpu(ignoring->output_spec().num_bytes());
  ignoring->apply(as_span(tagged), cpu_rng, cpu.data());
  EXPECT_TRUE(std::equal(cpu.begin(), cpu.end(), view.payload.begin(), view.payload.end()));
}

// Where `jpeg`'s first segment of `marker` starts (its 0xFF byte).
size_t segment(const std::vector<uint8_t>& jpeg, uint8_t marker) {
  size_t i = 2;
  while (i + 4 <= jpeg.size() && jpeg[i + 1] != marker) i += 2 + (jpeg[i + 2] << 8 | jpeg[i + 3]);
  EXPECT_LT(i + 4, jpeg.size()) << "no marker " << int{marker};
  return i;
}

TEST(DevicePlanTest, TheJpegsNvJpegCannotDecodeAreNamed) {
  const auto pattern = make_pattern(40, 48);
  EXPECT_EQ(device_jpeg_unsupported(as_span(encode_jpeg(pattern, 90, 420))), "");
  EXPECT_EQ(device_jpeg_unsupported(as_span(encode_jpeg(pattern, 90, 444))), "");
  EXPECT_EQ(device_jpeg_unsupported(as_span(encode_jpeg(make_pattern(40, 48, 1)))), "");
  EXPECT_EQ(device_jpeg_unsupported(as_span(encode_jpeg(pattern, 90, 420, true))), "a progressive JPEG");
  std::vector<uint8_t> truncated = encode_jpeg(pattern);
  truncated.resize(truncated.size() - 100);
  EXPECT_EQ(device_jpeg_unsupported(as_span(truncated)), "a truncated JPEG (no end marker)");
  EXPECT_EQ(device_jpeg_unsupported(as_span(encode_png(pattern))), "not a JPEG");
  const std::vector<uint8_t> whole = encode_jpeg(pattern);
  const std::vector<uint8_t> header_only(whole.begin(), whole.begin() + 30);
  EXPECT_EQ(device_jpeg_unsupported(as_span(header_only)), "a corrupt header");

  // Extended sequential (SOF1): libjpeg decodes it, nvJPEG's hardware decoder not.
  std::vector<uint8_t> extended = encode_jpeg(pattern, 90, 444);
  extended[segment(extended, 0xC0) + 1] = 0xC1;
  EXPECT_EQ(device_jpeg_unsupported(as_span(extended)), "an extended-sequential JPEG");
  // Components named R, G, B: RGB for libjpeg without a JFIF marker, YCbCr with one.
  std::vector<uint8_t> named = encode_jpeg(pattern, 90, 444);
  const size_t frame = segment(named, 0xC0);
  for (int c = 0; c < 3; ++c) named[frame + 10 + 3 * c] = static_cast<uint8_t>("RGB"[c]);
  EXPECT_EQ(device_jpeg_unsupported(as_span(named)), "");
  const size_t app0 = segment(named, 0xE0);
  named.erase(named.begin() + static_cast<ptrdiff_t>(app0),
              named.begin() + static_cast<ptrdiff_t>(app0 + 2 + (named[app0 + 2] << 8 | named[app0 + 3])));
  EXPECT_EQ(device_jpeg_unsupported(as_span(named)), "an RGB JPEG (no YCbCr)");
}

TEST(DevicePlanTest, AChainADeviceCannotRunIsRefusedNamingTheStep) {
  const auto refused = [](std::vector<TransformSpec> chain, const std::string& why) {
    auto pipeline = std::make_shared<ImagePipeline>(std::move(chain), ImageOutputSpec{});
    try {
      DevicePlanTransform transform(pipeline);
      ADD_FAILURE() << "accepted; expected: " << why;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_EQ(e.cause(), "decoding on the GPU: " + why + " (only on the CPU)");
    }
  };
  refused({TransformSpec{"color_jitter", {{"brightness", {0.6, 1.4}}}}, CenterCropSpec{{32, 32}}},
          "transform 0 (color_jitter) works on the whole decoded image");
  refused({CenterCropSpec{{32, 32}}, TransformSpec{"random_erasing", {}}},
          "transform 1 (random_erasing) works on the written output");
  RandomResizedCropSpec bicubic{{32, 32}};
  bicubic.interpolation = Interpolation::kBicubic;
  refused({bicubic}, "transform 0 (random_resized_crop) resizes with another interpolation than bilinear");
  auto gray = std::make_shared<ImagePipeline>(std::vector<TransformSpec>{CenterCropSpec{{8, 8}}},
                                              ImageOutputSpec{DType::kUInt8, Layout::kCHW, 1});
  EXPECT_THROW(DevicePlanTransform{gray}, Error);
}

}  // namespace
}  // namespace conveyor

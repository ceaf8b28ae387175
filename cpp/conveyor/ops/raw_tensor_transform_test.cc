#include "conveyor/ops/raw_tensor_transform.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/core/rng.h"

namespace conveyor {
namespace {

RawTensorSpec spec(int64_t h, int64_t w, int64_t c, DType dtype, bool channels_first = true) {
  RawTensorSpec s;
  s.height = h;
  s.width = w;
  s.channels = c;
  s.dtype = dtype;
  s.channels_first = channels_first;
  return s;
}

std::vector<uint8_t> ramp(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 11);
  return v;
}

TEST(RawTensorTransform, SizesThatOverflowAreConfigErrors) {
  // 2**32 x 2**32 wrapped to 0 pixels before: every input of 0 bytes passed.
  try {
    RawTensorTransform t(spec(int64_t{1} << 32, int64_t{1} << 32, 1, DType::kUInt8));
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "raw tensor size overflows: 4294967296 x 4294967296");
  }
  EXPECT_THROW(RawTensorTransform(spec(1, int64_t{1} << 40, int64_t{1} << 30, DType::kFloat32)), Error);
}

TEST(RawTensorTransform, CopiesUint8) {
  RawTensorTransform t(spec(2, 3, 1, DType::kUInt8));
  EXPECT_EQ(t.output_spec().shape, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(t.output_spec().dtype, DType::kUInt8);
  const auto in = ramp(6);
  std::vector<uint8_t> out(6);
  SampleRng rng(0, 0, 0);
  t.apply(in, rng, out.data());
  EXPECT_EQ(out, in);
}

TEST(RawTensorTransform, InterleavedToPlanar) {
  RawTensorTransform chw(spec(1, 2, 3, DType::kUInt8));
  const std::vector<uint8_t> in{1, 2, 3, 4, 5, 6};  // Pixels (1,2,3), (4,5,6).
  std::vector<uint8_t> out(6);
  SampleRng rng(0, 0, 0);
  chw.apply(in, rng, out.data());
  EXPECT_EQ(out, (std::vector<uint8_t>{1, 4, 2, 5, 3, 6}));
  RawTensorTransform hwc(spec(1, 2, 3, DType::kUInt8, false));
  EXPECT_EQ(hwc.output_spec().shape, (std::vector<int64_t>{1, 2, 3}));
  hwc.apply(in, rng, out.data());
  EXPECT_EQ(out, in);
}

TEST(RawTensorTransform, FloatScaledAndNormalized) {
  RawTensorTransform scaled(spec(2, 2, 1, DType::kFloat32));
  const auto in = ramp(4);
  std::vector<float> out(4);
  SampleRng rng(0, 0, 0);
  scaled.apply(in, rng, out.data());
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(out[i], static_cast<float>(in[i]) / 255.0f);

  auto s = spec(1, 2, 2, DType::kFloat32);
  s.mean = {0.1307f, 0.5f};
  s.std = {0.3081f, 0.2f};
  RawTensorTransform normalized(s);
  normalized.apply(in, rng, out.data());  // Pixels (0, 11), (22, 33) -> planes.
  const float expected[] = {(0 / 255.0f - 0.1307f) / 0.3081f, (22 / 255.0f - 0.1307f) / 0.3081f,
                            (11 / 255.0f - 0.5f) / 0.2f, (33 / 255.0f - 0.5f) / 0.2f};
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(out[i], expected[i]);  // torchvision's float32 arithmetic, exactly.
}

TEST(RawTensorTransform, RejectsBadInputAndOptions) {
  RawTensorTransform t(spec(2, 2, 1, DType::kUInt8));
  std::vector<uint8_t> out(4);
  SampleRng rng(0, 0, 0);
  const std::vector<uint8_t> short_input(3);
  try {
    t.apply(short_input, rng, out.data());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDecode);
    EXPECT_EQ(std::string(e.what()), "raw sample has 3 bytes, expected 2x2x1 = 4");
  }
  auto expect_config = [](RawTensorSpec s, const std::string& message) {
    try {
      RawTensorTransform bad(s);
      FAIL() << message;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_EQ(std::string(e.what()), message);
    }
  };
  expect_config(spec(0, 2, 1, DType::kUInt8), "raw tensor dimensions must be positive, got 0x2x1");
  expect_config(spec(2, 2, 1, DType::kInt64), "raw tensors are output as uint8 or float32, not int64");
  auto s = spec(2, 2, 1, DType::kUInt8);
  s.mean = {0.5f};
  s.std = {0.5f};
  expect_config(s, "Normalize needs a float32 output, not uint8");
  s = spec(2, 2, 3, DType::kFloat32);
  s.mean = {0.5f, 0.5f};
  s.std = {0.5f};
  expect_config(s, "Normalize mean needs 1 or 3 values, got 2");
  s.mean = {0.5f};
  s.std = {0.0f};
  expect_config(s, "Normalize std must not be zero");
}

}  // namespace
}  // namespace conveyor

namespace conveyor {
namespace {

TEST(TensorCopyTransform, CopiesTheBytesAsTheyAre) {
  const TensorCopyTransform t(SampleSpec{{2, 3}, DType::kFloat32});
  EXPECT_EQ(t.output_spec().shape, (std::vector<int64_t>{2, 3}));
  const std::vector<float> values{1.5f, -2.0f, 3.25f, 0.0f, 1e9f, -7.0f};
  std::vector<float> out(6);
  SampleRng rng(0, 0, 0);
  t.apply({reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(float)}, rng, out.data());
  EXPECT_EQ(out, values);
  try {
    t.apply({reinterpret_cast<const uint8_t*>(values.data()), 5}, rng, out.data());
    FAIL() << "accepted 5 bytes";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDecode);
    EXPECT_STREQ(e.what(), "tensor sample has 5 bytes, expected 24");
  }
}

}  // namespace
}  // namespace conveyor

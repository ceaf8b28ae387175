#include "conveyor/ops/raw_tensor_transform.h"

#include <cstring>
#include <string>
#include <utility>

#include "conveyor/core/checked_size.h"
#include "conveyor/core/error.h"

namespace conveyor {

RawTensorTransform::RawTensorTransform(RawTensorSpec spec) : spec_(std::move(spec)) {
  check_config(spec_.height > 0 && spec_.width > 0 && spec_.channels > 0,
               "raw tensor dimensions must be positive, got " + std::to_string(spec_.height) + "x" +
                   std::to_string(spec_.width) + "x" + std::to_string(spec_.channels));
  // The sample's byte count (input and output); every later product is bounded by it.
  checked_mul(checked_mul(checked_mul(spec_.height, spec_.width, "raw tensor size"), spec_.channels, "raw tensor size"),
              static_cast<int64_t>(sizeof(float)), "raw tensor size in bytes");
  check_config(spec_.dtype == DType::kUInt8 || spec_.dtype == DType::kFloat32,
               "raw tensors are output as uint8 or float32, not " + std::string(dtype_name(spec_.dtype)));
  const bool normalize = !spec_.mean.empty() || !spec_.std.empty();
  check_config(!normalize || spec_.dtype == DType::kFloat32, "Normalize needs a float32 output, not uint8");
  const auto c = static_cast<size_t>(spec_.channels);
  auto per_channel = [&](std::vector<float> values, const char* name) {
    check_config(values.size() == 1 || values.size() == c, std::string("Normalize ") + name + " needs 1 or " +
                                                               std::to_string(c) + " values, got " +
                                                               std::to_string(values.size()));
    if (values.size() == 1) values.assign(c, values[0]);
    return values;
  };
  std::vector<float> mean(c, 0.0f);
  std::vector<float> std(c, 1.0f);
  if (normalize) {
    mean = per_channel(spec_.mean, "mean");
    std = per_channel(spec_.std, "std");
  }
  for (size_t i = 0; i < c; ++i) check_config(std[i] != 0.0f, "Normalize std must not be zero");
  // One table lookup per byte: exact torchvision arithmetic at copy speed.
  lut_.resize(c * 256);
  for (size_t i = 0; i < c; ++i) {
    for (int v = 0; v < 256; ++v) {
      float x = static_cast<float>(v) / 255.0f;
      if (normalize) x = (x - mean[i]) / std[i];
      lut_[i * 256 + static_cast<size_t>(v)] = x;
    }
  }
}

SampleSpec RawTensorTransform::output_spec() const {
  if (spec_.channels_first) return {{spec_.channels, spec_.height, spec_.width}, spec_.dtype};
  return {{spec_.height, spec_.width, spec_.channels}, spec_.dtype};
}

void RawTensorTransform::apply(std::span<const uint8_t> input, SampleRng&, void* out) const {
  const auto c = static_cast<size_t>(spec_.channels);
  const auto pixels = static_cast<size_t>(spec_.height * spec_.width);
  if (input.size() != pixels * c) {
    throw Error(ErrorKind::kDecode, "raw sample has " + std::to_string(input.size()) + " bytes, expected " +
                                        std::to_string(spec_.height) + "x" + std::to_string(spec_.width) + "x" +
                                        std::to_string(spec_.channels) + " = " + std::to_string(pixels * c));
  }
  const uint8_t* in = input.data();
  const bool interleaved_out = !spec_.channels_first || c == 1;
  if (spec_.dtype == DType::kUInt8) {
    auto* dst = static_cast<uint8_t*>(out);
    if (interleaved_out) {
      std::memcpy(dst, in, input.size());
    } else {
      for (size_t ch = 0; ch < c; ++ch) {
        for (size_t p = 0; p < pixels; ++p) dst[ch * pixels + p] = in[p * c + ch];
      }
    }
    return;
  }
  auto* dst = static_cast<float*>(out);
  const float* lut = lut_.data();
  if (interleaved_out) {
    for (size_t p = 0; p < pixels; ++p) {
      for (size_t ch = 0; ch < c; ++ch) dst[p * c + ch] = lut[ch * 256 + in[p * c + ch]];
    }
  } else {
    for (size_t ch = 0; ch < c; ++ch) {
      const float* table = lut + ch * 256;
      for (size_t p = 0; p < pixels; ++p) dst[ch * pixels + p] = table[in[p * c + ch]];
    }
  }
}

TensorCopyTransform::TensorCopyTransform(SampleSpec spec) : spec_(std::move(spec)), bytes_(spec_.num_bytes()) {}

void TensorCopyTransform::apply(std::span<const uint8_t> input, SampleRng&, void* out) const {
  if (input.size() != bytes_) {
    throw Error(ErrorKind::kDecode,
                "tensor sample has " + std::to_string(input.size()) + " bytes, expected " + std::to_string(bytes_));
  }
  std::memcpy(out, input.data(), bytes_);
}

}  // namespace conveyor

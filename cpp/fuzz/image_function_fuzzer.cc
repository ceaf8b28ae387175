// libFuzzer target: the functional API's entry, apply_image_function — every
// registered image function on images of any shape (empty, one pixel, wide,
// huge sides, 0 to 4 channels) with arguments drawn from the input: the
// numbers any argument can take (negative, zero, huge, fractional, NaN).
//
// Input: byte 0 picks the function, bytes 1-3 the shape, byte 4 the
// arguments left out (bit k: argument k), the rest are the arguments'
// numbers (2 bytes each, see number_at) then the pixels.
//
// Contract checked: the call returns an image whose pixels match its size
// (sides >= 1, at most kMaxPixels, 1 or 3 channels) or throws
// conveyor::Error of kind kConfig, kDecode or kTooLarge -- never kInternal,
// another exception, a crash, a read past the pixels it was given (they are
// exactly height x width x channels bytes, heap-allocated: ASan sees the
// rest) or a hang (libFuzzer's -timeout).
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/ops/transforms/registry.h"

namespace {

// Small enough that every image allowed is quick to make.
constexpr int64_t kMaxPixels = int64_t{1} << 18;

// Each function's arguments and how many numbers each takes (0: 1 to 4).
struct Arg {
  const char* name;
  size_t count;
};
struct Function {
  const char* name;
  std::vector<Arg> args;
};

const std::vector<Function>& functions() {
  static const std::vector<Function> all = {
      {"adjust_brightness", {{"brightness_factor", 1}}},
      {"adjust_contrast", {{"contrast_factor", 1}}},
      {"adjust_hue", {{"hue_factor", 1}}},
      {"adjust_saturation", {{"saturation_factor", 1}}},
      {"adjust_sharpness", {{"sharpness_factor", 1}}},
      {"affine",
       {{"angle", 1}, {"translate", 2}, {"scale", 1}, {"shear", 2}, {"interpolation", 1}, {"fill", 0}, {"center", 2}}},
      {"augment_op", {{"op", 1}, {"magnitude", 1}, {"interpolation", 1}, {"fill", 0}}},
      {"autocontrast", {}},
      {"center_crop", {{"output_size", 2}}},
      {"crop", {{"top", 1}, {"left", 1}, {"size", 2}}},
      {"equalize", {}},
      {"erase", {{"i", 1}, {"j", 1}, {"h", 1}, {"w", 1}, {"v", 0}}},
      {"gaussian_blur", {{"kernel_size", 2}, {"sigma", 2}}},
      {"horizontal_flip", {}},
      {"invert", {}},
      {"pad", {{"padding", 4}, {"fill", 0}, {"padding_mode", 1}}},
      {"perspective", {{"startpoints", 8}, {"endpoints", 8}, {"interpolation", 1}, {"fill", 0}}},
      {"posterize", {{"bits", 1}}},
      {"resize", {{"size", 2}, {"antialias", 1}}},
      {"resized_crop", {{"top", 1}, {"left", 1}, {"height", 1}, {"width", 1}, {"size", 2}, {"antialias", 1}}},
      {"rgb_to_grayscale", {{"num_output_channels", 1}}},
      {"rotate", {{"angle", 1}, {"interpolation", 1}, {"expand", 1}, {"center", 2}, {"fill", 0}}},
      {"solarize", {{"threshold", 1}}},
      {"vertical_flip", {}},
  };
  return all;
}

// A number from two bytes: mostly small integers (sizes, offsets, flags,
// modes), sometimes fractions, huge values, negatives or NaN.
double number_at(const uint8_t* p) {
  const int v = p[1];
  switch (p[0] % 8) {
    case 0:
      return v % 4;
    case 1:
      return v - 128;
    case 2:
      return v / 64.0;
    case 3:
      return -v / 64.0;
    case 4:
      return std::ldexp(1.0, v % 70);  // Up to 2**69.
    case 5:
      return -std::ldexp(1.0, v % 70);
    case 6:
      return v % 2 == 0 ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    default:
      return v;
  }
}

// A side: small ones mostly, 0, or one far beyond any limit.
int64_t side_at(uint8_t b) {
  if (b >= 250) return int64_t{1} << (28 + (b - 250));  // 2**28 .. 2**33.
  return b % 40;
}

}  // namespace

// The table above must name every registered function, so that a new one is
// fuzzed too: checked once, before the first input.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  std::vector<std::string> names;
  for (const Function& f : functions()) names.emplace_back(f.name);
  if (names != conveyor::registered_image_function_names()) {
    std::fprintf(stderr, "image_function_fuzzer: its table does not list every registered image function\n");
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using conveyor::ErrorKind;
  if (size < 5) return 0;
  const Function& function = functions()[data[0] % functions().size()];
  const int64_t height = side_at(data[1]), width = side_at(data[2]);
  const int64_t channels = data[3] % 5;
  const uint8_t omitted = data[4];  // Bit k leaves argument k out: a missing one must be named too.
  size_t at = 5;
  conveyor::TransformParams params;
  for (size_t k = 0; k < function.args.size(); ++k) {
    const Arg& arg = function.args[k];
    if (k < 8 && (omitted >> k) & 1) continue;
    const size_t count = arg.count > 0 ? arg.count : 1 + (at % 4);
    std::vector<double> values;
    for (size_t i = 0; i < count && at + 2 <= size; ++i, at += 2) values.push_back(number_at(data + at));
    if (!values.empty()) params[arg.name] = values;
  }
  // Exactly the image's bytes when it fits the limit; a huge or empty one
  // gets the bytes left (the call must refuse it before reading them).
  const bool fits = height >= 1 && width >= 1 && width <= kMaxPixels / height;
  const size_t pixel_bytes =
      fits ? static_cast<size_t>(height * width * channels) : (size > at ? static_cast<size_t>(size - at) : 0);
  // Exactly pixel_bytes (new of 0 bytes is a valid, unreadable pointer).
  std::unique_ptr<uint8_t[]> pixels(new uint8_t[pixel_bytes]);
  for (size_t i = 0; i < pixel_bytes; ++i) pixels[i] = at + i < size ? data[at + i] : static_cast<uint8_t>(i * 31);
  try {
    const conveyor::Image out =
        conveyor::apply_image_function({function.name, params}, pixels.get(), height, width, channels, kMaxPixels);
    const bool consistent =
        out.height >= 1 && out.width >= 1 && (out.channels == 1 || out.channels == 3) &&
        static_cast<int64_t>(out.height) * out.width <= kMaxPixels &&
        out.pixels.size() == static_cast<size_t>(out.height) * static_cast<size_t>(out.width) * out.channels;
    if (!consistent) std::abort();
  } catch (const conveyor::Error& e) {
    if (e.kind() != ErrorKind::kConfig && e.kind() != ErrorKind::kDecode && e.kind() != ErrorKind::kTooLarge) {
      std::abort();
    }
  }
  return 0;
}

#include "conveyor/ops/batch_mix.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "conveyor/core/checked_size.h"
#include "conveyor/core/error.h"
#include "conveyor/core/float16.h"
#include "conveyor/core/number_format.h"

namespace conveyor {

namespace {

// Batch streams get a key of their own (the seed mixed with this tag), so no
// sample stream (seed, epoch, sample index) coincides with a batch's.
constexpr uint64_t kBatchMixTag = 0x6261746368'6d6978ULL;  // "batchmix"

// A number in (0, 1]: logarithms of it are finite.
double open_uniform(SampleRng& rng) { return 1.0 - rng.uniform(); }

// A standard normal variate (Box-Muller, the cosine half).
double sample_normal(SampleRng& rng) {
  const double radius = std::sqrt(-2.0 * std::log(open_uniform(rng)));
  return radius * std::cos(2.0 * std::numbers::pi * rng.uniform());
}

struct Layout3 {
  int64_t channels, height, width;
};

Layout3 layout_of(const SampleSpec& sample, bool channels_last) {
  const auto& s = sample.shape;
  return channels_last ? Layout3{s[2], s[0], s[1]} : Layout3{s[0], s[1], s[2]};
}

// torchvision's MixUp on one sample: rolled.mul_(1 - lambda).add_(own.mul(lambda)),
// each operation rounded to the tensor's dtype with the scalar as a float
// (PyTorch's opmath for float and half on the CPU). Kept as separate
// statements: FMA contraction would round differently from PyTorch (x86-64
// builds have no FMA unless asked for).
void mix_floats(const float* own, const float* rolled, float* out, int64_t count, float own_weight,
                float rolled_weight) {
  for (int64_t i = 0; i < count; ++i) {
    const float a = rolled[i] * rolled_weight;
    const float b = own[i] * own_weight;
    out[i] = a + b;
  }
}

// 16-bit floats (half or bfloat16, by `to`/`from`), rounded after each op as torch computes them.
template <uint16_t (*to)(float) noexcept, float (*from)(uint16_t) noexcept>
void mix_16bit(const uint16_t* own, const uint16_t* rolled, uint16_t* out, int64_t count, float own_weight,
               float rolled_weight) {
  for (int64_t i = 0; i < count; ++i) {
    const uint16_t a = to(from(rolled[i]) * rolled_weight);
    const uint16_t b = to(from(own[i]) * own_weight);
    out[i] = to(from(a) + from(b));
  }
}

// Sample `own`'s CutMix box replaced by `rolled`'s (both one sample's bytes).
void paste_box(const BatchMixParams& p, const Layout3& l, bool channels_last, size_t element, const uint8_t* rolled,
               uint8_t* own) {
  if (p.x2 <= p.x1 || p.y2 <= p.y1) return;
  if (channels_last) {
    const size_t row = static_cast<size_t>(l.width * l.channels) * element;
    const size_t offset = static_cast<size_t>(p.x1 * l.channels) * element;
    const size_t bytes = static_cast<size_t>((p.x2 - p.x1) * l.channels) * element;
    for (int64_t y = p.y1; y < p.y2; ++y) {
      std::memcpy(own + static_cast<size_t>(y) * row + offset, rolled + static_cast<size_t>(y) * row + offset, bytes);
    }
    return;
  }
  const size_t row = static_cast<size_t>(l.width) * element;
  const size_t plane = static_cast<size_t>(l.height) * row;
  const size_t offset = static_cast<size_t>(p.x1) * element;
  const size_t bytes = static_cast<size_t>(p.x2 - p.x1) * element;
  for (int64_t c = 0; c < l.channels; ++c) {
    for (int64_t y = p.y1; y < p.y2; ++y) {
      const size_t at = static_cast<size_t>(c) * plane + static_cast<size_t>(y) * row + offset;
      std::memcpy(own + at, rolled + at, bytes);
    }
  }
}

}  // namespace

const char* mix_kind_name(MixKind kind) noexcept { return kind == MixKind::kMixUp ? "MixUp" : "CutMix"; }

void check_batch_mix_arguments(const BatchMixSpec& spec, bool num_classes_known) {
  check_config(!spec.options.empty(), "batch mix: no MixUp or CutMix given");
  bool mixup = false;
  for (const MixOption& option : spec.options) {
    check_config(std::isfinite(option.alpha) && option.alpha > 0, std::string(mix_kind_name(option.kind)) +
                                                                      ": alpha must be a finite number > 0, got " +
                                                                      format_shortest(option.alpha));
    mixup = mixup || option.kind == MixKind::kMixUp;
  }
  if (!spec.p.empty()) {
    std::string given;
    for (double p : spec.p) given += (given.empty() ? "" : ", ") + format_shortest(p);
    given = "[" + given + "]";
    check_config(spec.p.size() == spec.options.size(), "RandomChoice: p must have one probability per transform (" +
                                                           std::to_string(spec.options.size()) + "), got " + given);
    for (double p : spec.p) {
      check_config(std::isfinite(p) && p >= 0, "RandomChoice: p must be finite numbers >= 0, got " + given);
    }
    check_config(*std::max_element(spec.p.begin(), spec.p.end()) > 0,
                 "RandomChoice: p must not be all 0, got " + given);
  }
  const std::string what = mixup ? "MixUp" : "CutMix";
  check_config(!num_classes_known || spec.num_classes >= 1,
               what + ": num_classes must be >= 1, got " + std::to_string(spec.num_classes));
}

void check_batch_mix(const BatchMixSpec& spec, const SampleSpec& sample) {
  check_batch_mix_arguments(spec);
  const bool mixup = std::any_of(spec.options.begin(), spec.options.end(),
                                 [](const MixOption& option) { return option.kind == MixKind::kMixUp; });
  const std::string what = mixup ? "MixUp" : "CutMix";
  check_config(sample.shape.size() == 3, what + ": samples must be images (C x H x W or H x W x C), got " +
                                             std::to_string(sample.shape.size()) + " dimension(s)");
  for (int64_t d : sample.shape) check_config(d >= 1, what + ": samples must have a fixed size");
  check_config(is_image_dtype(sample.dtype),
               what + ": the output dtype must be uint8, float16, float32 or bfloat16, got " +
                   std::string(dtype_name(sample.dtype)));
  check_config(
      !(mixup && sample.dtype == DType::kUInt8),
      "MixUp needs a float dtype (float32, float16 or bfloat16): it blends pixel values, which uint8 cannot hold "
      "(torchvision raises too); CutMix works on uint8");
  checked_mul(sample.num_elements(), 1, "batch mix: the sample size");
}

SampleRng batch_mix_rng(uint64_t seed, uint64_t epoch, uint64_t batch_index) noexcept {
  return SampleRng(mix64(seed) ^ kBatchMixTag, epoch, batch_index);
}

double sample_log_gamma(double shape, SampleRng& rng) {
  if (shape < 1.0) {
    // Gamma(a) = Gamma(a + 1) * U^(1/a) (Marsaglia & Tsang, section 6).
    return sample_log_gamma(shape + 1.0, rng) + std::log(open_uniform(rng)) / shape;
  }
  // Marsaglia & Tsang (2000), "A simple method for generating gamma variables".
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = sample_normal(rng);
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = open_uniform(rng);
    const double x2 = x * x;
    if (u < 1.0 - 0.0331 * x2 * x2) return std::log(d * v);
    if (std::log(u) < 0.5 * x2 + d * (1.0 - v + std::log(v))) return std::log(d * v);
  }
}

double sample_beta(double a, double b, SampleRng& rng) {
  const double log_x = sample_log_gamma(a, rng);
  const double log_y = sample_log_gamma(b, rng);
  // X / (X + Y) = 1 / (1 + Y / X), from the logarithms: no 0 / 0 when both
  // gammas underflow (small alpha).
  return 1.0 / (1.0 + std::exp(log_y - log_x));
}

BatchMixParams sample_batch_mix(const BatchMixSpec& spec, int64_t height, int64_t width, SampleRng& rng) {
  size_t choice = 0;
  if (spec.options.size() > 1) {
    std::vector<double> p = spec.p.empty() ? std::vector<double>(spec.options.size(), 1.0) : spec.p;
    // Scaled by a power of two (exact) so that the largest is in [0.5, 1):
    // the sum cannot overflow (p = [1e308, 1e308] is [0.5, 0.5]).
    int exponent = 0;
    std::frexp(*std::max_element(p.begin(), p.end()), &exponent);
    double total = 0;
    for (double& v : p) total += (v = std::ldexp(v, -exponent));
    double u = rng.uniform() * total;
    choice = p.size() - 1;
    for (size_t i = 0; i < p.size(); ++i) {
      if (u < p[i]) {
        choice = i;
        break;
      }
      u -= p[i];
    }
    while (p[choice] == 0 && choice > 0) --choice;  // Rounding at the top never picks an impossible option.
  }
  const MixOption& option = spec.options[choice];
  BatchMixParams params;
  params.kind = option.kind;
  params.lambda = sample_beta(option.alpha, option.alpha, rng);
  params.label_lambda = params.lambda;
  if (option.kind == MixKind::kCutMix) {
    // torchvision's CutMix.make_params, in the same arithmetic (doubles,
    // int() truncation, Python's true division).
    params.center_x = static_cast<int64_t>(rng.below(static_cast<uint64_t>(width)));
    params.center_y = static_cast<int64_t>(rng.below(static_cast<uint64_t>(height)));
    const double r = 0.5 * std::sqrt(1.0 - params.lambda);
    const auto r_w_half = static_cast<int64_t>(r * static_cast<double>(width));
    const auto r_h_half = static_cast<int64_t>(r * static_cast<double>(height));
    params.x1 = std::max<int64_t>(params.center_x - r_w_half, 0);
    params.y1 = std::max<int64_t>(params.center_y - r_h_half, 0);
    params.x2 = std::min<int64_t>(params.center_x + r_w_half, width);
    params.y2 = std::min<int64_t>(params.center_y + r_h_half, height);
    params.label_lambda = 1.0 - static_cast<double>((params.x2 - params.x1) * (params.y2 - params.y1)) /
                                    static_cast<double>(width * height);
  }
  return params;
}

int64_t first_label_outside(const std::vector<int64_t>& labels, int64_t num_classes) noexcept {
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= num_classes) return static_cast<int64_t>(i);
  }
  return -1;
}

void apply_batch_mix(const BatchMixParams& params, const BatchMixSpec& spec, const SampleSpec& sample, int64_t n,
                     void* images, const std::vector<int64_t>& labels, float* soft_labels) {
  if (n <= 0) return;
  const float own_weight = static_cast<float>(params.label_lambda);
  const float rolled_weight = static_cast<float>(1.0 - params.label_lambda);
  // Labels: one_hot(labels).float(), then rolled.mul_(1 - lambda).add_(own.mul(lambda)).
  const auto classes = static_cast<size_t>(spec.num_classes);
  for (int64_t i = 0; i < n; ++i) {
    const auto own = static_cast<size_t>(labels[static_cast<size_t>(i)]);
    const auto rolled = static_cast<size_t>(labels[static_cast<size_t>((i + n - 1) % n)]);
    float* row = soft_labels + static_cast<size_t>(i) * classes;
    for (size_t c = 0; c < classes; ++c) {
      const float a = (c == rolled ? 1.0f : 0.0f) * rolled_weight;
      const float b = (c == own ? 1.0f : 0.0f) * own_weight;
      row[c] = a + b;
    }
  }

  // Images, in place: sample i takes from sample i - 1, so go from the last
  // down; sample 0 takes from the last one's original, kept aside first.
  const size_t bytes = sample.num_bytes();
  const int64_t count = sample.num_elements();
  auto* data = static_cast<uint8_t*>(images);
  const std::vector<uint8_t> last(data + static_cast<size_t>(n - 1) * bytes, data + static_cast<size_t>(n) * bytes);
  const Layout3 layout = layout_of(sample, spec.channels_last);
  for (int64_t i = n - 1; i >= 0; --i) {
    uint8_t* own = data + static_cast<size_t>(i) * bytes;
    const uint8_t* rolled = i > 0 ? own - bytes : last.data();
    if (params.kind == MixKind::kCutMix) {
      paste_box(params, layout, spec.channels_last, dtype_size(sample.dtype), rolled, own);
    } else if (sample.dtype == DType::kFloat32) {
      mix_floats(reinterpret_cast<const float*>(own), reinterpret_cast<const float*>(rolled),
                 reinterpret_cast<float*>(own), count, own_weight, rolled_weight);
    } else if (sample.dtype == DType::kFloat16) {
      mix_16bit<float_to_half, half_to_float>(reinterpret_cast<const uint16_t*>(own),
                                              reinterpret_cast<const uint16_t*>(rolled),
                                              reinterpret_cast<uint16_t*>(own), count, own_weight, rolled_weight);
    } else if (sample.dtype == DType::kBFloat16) {
      mix_16bit<float_to_bfloat16, bfloat16_to_float>(
          reinterpret_cast<const uint16_t*>(own), reinterpret_cast<const uint16_t*>(rolled),
          reinterpret_cast<uint16_t*>(own), count, own_weight, rolled_weight);
    } else {
      throw Error(ErrorKind::kInternal, "MixUp on " + std::string(dtype_name(sample.dtype)) + " samples");
    }
  }
}

}  // namespace conveyor

#include "conveyor/ops/transforms/policies.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <utility>

#include "conveyor/core/error.h"
#include "conveyor/core/number_format.h"
#include "conveyor/ops/transforms/blur.h"
#include "conveyor/ops/transforms/color.h"
#include "conveyor/ops/transforms/histogram.h"
#include "conveyor/ops/transforms/image_step.h"
#include "conveyor/ops/transforms/pixel_tables.h"

namespace conveyor {

namespace {

constexpr std::array<std::string_view, 15> kOpNames = {
    "Identity", "ShearX",    "ShearY",    "TranslateX", "TranslateY",   "Rotate",   "Brightness", "Color",
    "Contrast", "Sharpness", "Posterize", "Solarize",   "AutoContrast", "Equalize", "Invert"};

// torchvision: (top - (torch.arange(num_bins) / ((num_bins - 1) / divisor))).round().int(),
// in float32 (the Python scalar is converted to the tensor's float32), round
// half to even.
int posterize_bits(int num_bins, int bin, double divisor, float top = 8.0f) {
  const float q = static_cast<float>((num_bins - 1) / divisor);
  return static_cast<int>(std::nearbyint(top - static_cast<float>(bin) / q));
}

using P = AugmentOp;

// torchvision's AutoAugment._get_policies, magnitude bins of 10 (-1: none).
constexpr std::array<std::array<AutoAugmentEntry, 2>, 25> kImageNetPolicy = {{
    {{{P::kPosterize, 0.4, 8}, {P::kRotate, 0.6, 9}}},    {{{P::kSolarize, 0.6, 5}, {P::kAutoContrast, 0.6, -1}}},
    {{{P::kEqualize, 0.8, -1}, {P::kEqualize, 0.6, -1}}}, {{{P::kPosterize, 0.6, 7}, {P::kPosterize, 0.6, 6}}},
    {{{P::kEqualize, 0.4, -1}, {P::kSolarize, 0.2, 4}}},  {{{P::kEqualize, 0.4, -1}, {P::kRotate, 0.8, 8}}},
    {{{P::kSolarize, 0.6, 3}, {P::kEqualize, 0.6, -1}}},  {{{P::kPosterize, 0.8, 5}, {P::kEqualize, 1.0, -1}}},
    {{{P::kRotate, 0.2, 3}, {P::kSolarize, 0.6, 8}}},     {{{P::kEqualize, 0.6, -1}, {P::kPosterize, 0.4, 6}}},
    {{{P::kRotate, 0.8, 8}, {P::kColor, 0.4, 0}}},        {{{P::kRotate, 0.4, 9}, {P::kEqualize, 0.6, -1}}},
    {{{P::kEqualize, 0.0, -1}, {P::kEqualize, 0.8, -1}}}, {{{P::kInvert, 0.6, -1}, {P::kEqualize, 1.0, -1}}},
    {{{P::kColor, 0.6, 4}, {P::kContrast, 1.0, 8}}},      {{{P::kRotate, 0.8, 8}, {P::kColor, 1.0, 2}}},
    {{{P::kColor, 0.8, 8}, {P::kSolarize, 0.8, 7}}},      {{{P::kSharpness, 0.4, 7}, {P::kInvert, 0.6, -1}}},
    {{{P::kShearX, 0.6, 5}, {P::kEqualize, 1.0, -1}}},    {{{P::kColor, 0.4, 0}, {P::kEqualize, 0.6, -1}}},
    {{{P::kEqualize, 0.4, -1}, {P::kSolarize, 0.2, 4}}},  {{{P::kSolarize, 0.6, 5}, {P::kAutoContrast, 0.6, -1}}},
    {{{P::kInvert, 0.6, -1}, {P::kEqualize, 1.0, -1}}},   {{{P::kColor, 0.6, 4}, {P::kContrast, 1.0, 8}}},
    {{{P::kEqualize, 0.8, -1}, {P::kEqualize, 0.6, -1}}},
}};

constexpr std::array<std::array<AutoAugmentEntry, 2>, 25> kCifar10Policy = {{
    {{{P::kInvert, 0.1, -1}, {P::kContrast, 0.2, 6}}},         {{{P::kRotate, 0.7, 2}, {P::kTranslateX, 0.3, 9}}},
    {{{P::kSharpness, 0.8, 1}, {P::kSharpness, 0.9, 3}}},      {{{P::kShearY, 0.5, 8}, {P::kTranslateY, 0.7, 9}}},
    {{{P::kAutoContrast, 0.5, -1}, {P::kEqualize, 0.9, -1}}},  {{{P::kShearY, 0.2, 7}, {P::kPosterize, 0.3, 7}}},
    {{{P::kColor, 0.4, 3}, {P::kBrightness, 0.6, 7}}},         {{{P::kSharpness, 0.3, 9}, {P::kBrightness, 0.7, 9}}},
    {{{P::kEqualize, 0.6, -1}, {P::kEqualize, 0.5, -1}}},      {{{P::kContrast, 0.6, 7}, {P::kSharpness, 0.6, 5}}},
    {{{P::kColor, 0.7, 7}, {P::kTranslateX, 0.5, 8}}},         {{{P::kEqualize, 0.3, -1}, {P::kAutoContrast, 0.4, -1}}},
    {{{P::kTranslateY, 0.4, 3}, {P::kSharpness, 0.2, 6}}},     {{{P::kBrightness, 0.9, 6}, {P::kColor, 0.2, 8}}},
    {{{P::kSolarize, 0.5, 2}, {P::kInvert, 0.0, -1}}},         {{{P::kEqualize, 0.2, -1}, {P::kAutoContrast, 0.6, -1}}},
    {{{P::kEqualize, 0.2, -1}, {P::kEqualize, 0.6, -1}}},      {{{P::kColor, 0.9, 9}, {P::kEqualize, 0.6, -1}}},
    {{{P::kAutoContrast, 0.8, -1}, {P::kSolarize, 0.2, 8}}},   {{{P::kBrightness, 0.1, 3}, {P::kColor, 0.7, 0}}},
    {{{P::kSolarize, 0.4, 5}, {P::kAutoContrast, 0.9, -1}}},   {{{P::kTranslateY, 0.9, 9}, {P::kTranslateY, 0.7, 9}}},
    {{{P::kAutoContrast, 0.9, -1}, {P::kSolarize, 0.8, 3}}},   {{{P::kEqualize, 0.8, -1}, {P::kInvert, 0.1, -1}}},
    {{{P::kTranslateY, 0.7, 9}, {P::kAutoContrast, 0.9, -1}}},
}};

constexpr std::array<std::array<AutoAugmentEntry, 2>, 25> kSvhnPolicy = {{
    {{{P::kShearX, 0.9, 4}, {P::kInvert, 0.2, -1}}},        {{{P::kShearY, 0.9, 8}, {P::kInvert, 0.7, -1}}},
    {{{P::kEqualize, 0.6, -1}, {P::kSolarize, 0.6, 6}}},    {{{P::kInvert, 0.9, -1}, {P::kEqualize, 0.6, -1}}},
    {{{P::kEqualize, 0.6, -1}, {P::kRotate, 0.9, 3}}},      {{{P::kShearX, 0.9, 4}, {P::kAutoContrast, 0.8, -1}}},
    {{{P::kShearY, 0.9, 8}, {P::kInvert, 0.4, -1}}},        {{{P::kShearY, 0.9, 5}, {P::kSolarize, 0.2, 6}}},
    {{{P::kInvert, 0.9, -1}, {P::kAutoContrast, 0.8, -1}}}, {{{P::kEqualize, 0.6, -1}, {P::kRotate, 0.9, 3}}},
    {{{P::kShearX, 0.9, 4}, {P::kSolarize, 0.3, 3}}},       {{{P::kShearY, 0.8, 8}, {P::kInvert, 0.7, -1}}},
    {{{P::kEqualize, 0.9, -1}, {P::kTranslateY, 0.6, 6}}},  {{{P::kInvert, 0.9, -1}, {P::kEqualize, 0.6, -1}}},
    {{{P::kContrast, 0.3, 3}, {P::kRotate, 0.8, 4}}},       {{{P::kInvert, 0.8, -1}, {P::kTranslateY, 0.0, 2}}},
    {{{P::kShearY, 0.7, 6}, {P::kSolarize, 0.4, 8}}},       {{{P::kInvert, 0.6, -1}, {P::kRotate, 0.8, 4}}},
    {{{P::kShearY, 0.3, 7}, {P::kTranslateX, 0.9, 3}}},     {{{P::kShearX, 0.1, 6}, {P::kInvert, 0.6, -1}}},
    {{{P::kSolarize, 0.7, 2}, {P::kTranslateY, 0.6, 7}}},   {{{P::kShearY, 0.8, 4}, {P::kInvert, 0.8, -1}}},
    {{{P::kShearX, 0.7, 9}, {P::kTranslateY, 0.8, 3}}},     {{{P::kShearY, 0.8, 5}, {P::kAutoContrast, 0.7, -1}}},
    {{{P::kShearX, 0.7, 2}, {P::kInvert, 0.1, -1}}},
}};

// The signed magnitude: torchvision's `if signed and torch.rand(()) <= 0.5: magnitude *= -1`.
double signed_draw(AugmentOp op, double magnitude, SampleRng& rng) {
  if (augment_op_signed(op) && rng.uniform() <= 0.5) return -magnitude;
  return magnitude;
}

// The interpolation of the geometric ops (0 nearest, 1 bilinear), as the warps read it.
Interpolation read_interpolation(TransformArgs& args) {
  const double v = args.number("interpolation", 0);
  args.check(v == 0 || v == 1, "interpolation must be 0 (nearest) or 1 (bilinear)");
  return static_cast<Interpolation>(static_cast<int>(v));
}

int read_num_bins(TransformArgs& args) {
  const double bins = args.number("num_magnitude_bins", 31);
  args.check(bins == std::floor(bins) && bins >= 2 && bins <= 1e6,
             "num_magnitude_bins must be an integer in [2, 1000000], got " + format_shortest(bins));
  return static_cast<int>(bins);
}

// What every policy step shares: the ops' arguments and the chain checks.
struct OpArgs {
  Interpolation interpolation = Interpolation::kNearest;
  FillArg fill;
};

OpArgs read_op_args(TransformArgs& args) {
  OpArgs op;
  op.interpolation = read_interpolation(args);
  op.fill = FillArg::read(args);
  return op;
}

ImageStepCheck op_check(std::string name, FillArg fill) {
  return [name = std::move(name), fill = std::move(fill)](const ChainPlan& chain) {
    check_config(chain.channels == 1 || chain.channels == 3,
                 name + ": image must have 1 or 3 channels, got " + std::to_string(chain.channels));
    fill.check_channels(name, chain.channels);
  };
}

}  // namespace

float linspace_float32(float start, float end, int steps, int index) {
  const float step = (end - start) / static_cast<float>(steps - 1);
  // PyTorch's kernel is compiled with contraction: start + step * i is one
  // fused multiply-add (one rounding). Checked against torch 2.14.1 for
  // every index of 2..129 steps over the tables' ranges.
  if (index < steps / 2) return std::fma(step, static_cast<float>(index), start);
  return std::fma(-step, static_cast<float>(steps - index - 1), end);
}

std::optional<double> augment_magnitude(AugmentSpace space, AugmentOp op, int num_bins, int bin, int height,
                                        int width) {
  const bool wide = space == AugmentSpace::kTrivialAugmentWide;
  const auto lin = [&](double start, double end) -> double {
    return linspace_float32(static_cast<float>(start), static_cast<float>(end), num_bins, bin);
  };
  switch (op) {
    case AugmentOp::kShearX:
    case AugmentOp::kShearY:
      return lin(0.0, wide ? 0.99 : 0.3);
    case AugmentOp::kTranslateX:
      if (space == AugmentSpace::kAugMix) return lin(0.0, width / 3.0);
      return lin(0.0, wide ? 32.0 : 150.0 / 331.0 * width);
    case AugmentOp::kTranslateY:
      if (space == AugmentSpace::kAugMix) return lin(0.0, height / 3.0);
      return lin(0.0, wide ? 32.0 : 150.0 / 331.0 * height);
    case AugmentOp::kRotate:
      return lin(0.0, wide ? 135.0 : 30.0);
    case AugmentOp::kBrightness:
    case AugmentOp::kColor:
    case AugmentOp::kContrast:
    case AugmentOp::kSharpness:
      return lin(0.0, wide ? 0.99 : 0.9);
    case AugmentOp::kPosterize:
      if (space == AugmentSpace::kAugMix) return posterize_bits(num_bins, bin, 4.0, 4.0f);
      return posterize_bits(num_bins, bin, wide ? 6.0 : 4.0);
    case AugmentOp::kSolarize:
      return lin(1.0, 0.0);
    case AugmentOp::kIdentity:
    case AugmentOp::kAutoContrast:
    case AugmentOp::kEqualize:
    case AugmentOp::kInvert:
      return std::nullopt;
  }
  return std::nullopt;
}

bool augment_op_signed(AugmentOp op) { return op >= AugmentOp::kShearX && op <= AugmentOp::kSharpness; }

std::string_view augment_op_name(AugmentOp op) { return kOpNames[static_cast<size_t>(op)]; }

void apply_augment_op(SampleImage& sample, AugmentOp op, double magnitude, Interpolation interpolation,
                      const FillArg& fill) {
  // Pointwise ops give tables (map_values: written now, or left for the
  // output pass when it comes next); every other op reads the pixels as the
  // tables left so far make them.
  const bool pointwise = op == AugmentOp::kBrightness || op == AugmentOp::kContrast || op == AugmentOp::kPosterize ||
                         op == AugmentOp::kSolarize || op == AugmentOp::kAutoContrast || op == AugmentOp::kEqualize ||
                         op == AugmentOp::kInvert;
  if (!pointwise) apply_pending_tables(sample);
  const int h = sample.image.height, w = sample.image.width;
  // Python's int(): truncation toward zero.
  const auto truncated = [](double m) { return std::trunc(m); };
  switch (op) {
    case AugmentOp::kIdentity:
      return;
    case AugmentOp::kShearX:
    case AugmentOp::kShearY: {
      const double degrees = std::atan(magnitude) * (180.0 / std::numbers::pi);
      const std::array<double, 2> shear =
          op == AugmentOp::kShearX ? std::array<double, 2>{degrees, 0.0} : std::array<double, 2>{0.0, degrees};
      apply_warp(affine_warp(h, w, 0.0, {0, 0}, 1.0, shear, std::array<double, 2>{0, 0}), interpolation, fill, sample,
                 augment_op_name(op));
      return;
    }
    case AugmentOp::kTranslateX:
    case AugmentOp::kTranslateY: {
      const double t = truncated(magnitude);
      const std::array<double, 2> translate =
          op == AugmentOp::kTranslateX ? std::array<double, 2>{t, 0.0} : std::array<double, 2>{0.0, t};
      apply_warp(affine_warp(h, w, 0.0, translate, 1.0, {0, 0}, std::nullopt), interpolation, fill, sample,
                 augment_op_name(op));
      return;
    }
    case AugmentOp::kRotate:
      apply_warp(rotation_warp(h, w, magnitude, false, std::nullopt), interpolation, fill, sample, augment_op_name(op));
      return;
    case AugmentOp::kBrightness:
      map_values(sample, value_tables([&](Image& values) { adjust_brightness(values, 1.0 + magnitude); }));
      return;
    case AugmentOp::kColor:
      adjust_saturation(sample.image, 1.0 + magnitude);
      return;
    case AugmentOp::kContrast:
      // Its table depends on the image's gray mean: of the pixels as they are.
      apply_pending_tables(sample);
      map_values(sample, contrast_tables(sample.image, 1.0 + magnitude));
      return;
    case AugmentOp::kSharpness:
      adjust_sharpness(sample, 1.0 + magnitude);
      return;
    case AugmentOp::kPosterize:
      map_values(sample,
                 value_tables([&](Image& values) { posterize(values, static_cast<int>(truncated(magnitude))); }));
      return;
    case AugmentOp::kSolarize:
      map_values(sample, value_tables([&](Image& values) { solarize(values, 255.0 * magnitude); }));
      return;
    case AugmentOp::kAutoContrast:
      apply_pending_tables(sample);
      map_values(sample, autocontrast_tables(sample.image));
      return;
    case AugmentOp::kEqualize:
      apply_pending_tables(sample);
      map_values(sample, equalize_tables(sample.image));
      return;
    case AugmentOp::kInvert:
      map_values(sample, value_tables([](Image& values) { invert(values); }));
      return;
  }
}

AugmentDraw draw_trivial_augment(int num_bins, int height, int width, SampleRng& rng) {
  // keys[int(torch.randint(len(keys), ()))]
  const auto op = static_cast<AugmentOp>(rng.below(kAugmentChoiceCount));
  AugmentDraw draw{op, 0.0};
  if (augment_magnitude(AugmentSpace::kTrivialAugmentWide, op, num_bins, 0, height, width)) {
    const int bin = static_cast<int>(rng.below(static_cast<uint64_t>(num_bins)));
    draw.magnitude =
        signed_draw(op, *augment_magnitude(AugmentSpace::kTrivialAugmentWide, op, num_bins, bin, height, width), rng);
  }
  return draw;
}

AugmentDraw draw_rand_augment_op(int num_bins, int magnitude, int height, int width, SampleRng& rng) {
  const auto op = static_cast<AugmentOp>(rng.below(kAugmentChoiceCount));
  AugmentDraw draw{op, 0.0};
  if (const auto m = augment_magnitude(AugmentSpace::kRandAugment, op, num_bins, magnitude, height, width)) {
    draw.magnitude = signed_draw(op, *m, rng);
  }
  return draw;
}

const std::array<std::array<AutoAugmentEntry, 2>, 25>& auto_augment_policy(AutoAugmentPolicy policy) {
  switch (policy) {
    case AutoAugmentPolicy::kCifar10:
      return kCifar10Policy;
    case AutoAugmentPolicy::kSvhn:
      return kSvhnPolicy;
    case AutoAugmentPolicy::kImageNet:
      break;
  }
  return kImageNetPolicy;
}

std::vector<AugmentDraw> draw_auto_augment(AutoAugmentPolicy policy, int height, int width, SampleRng& rng) {
  const auto& policies = auto_augment_policy(policy);
  const auto& chosen = policies[rng.below(policies.size())];
  std::vector<AugmentDraw> draws;
  for (const AutoAugmentEntry& entry : chosen) {
    // `if not torch.rand(()) <= probability: continue`
    if (!(rng.uniform() <= entry.probability)) continue;
    AugmentDraw draw{entry.op, 0.0};
    if (entry.bin >= 0) {
      const auto m = augment_magnitude(AugmentSpace::kRandAugment, entry.op, 10, entry.bin, height, width);
      if (m) draw.magnitude = signed_draw(entry.op, *m, rng);
    }
    draws.push_back(draw);
  }
  return draws;
}

std::vector<float> sample_dirichlet(double alpha, int n, SampleRng& rng) {
  // Gamma(a) by Marsaglia and Tsang (a < 1: Gamma(a + 1) * U^(1 / a)), the
  // normals by Box-Muller; then normalised.
  const auto normal = [&rng] {
    const double u = 1.0 - rng.uniform();  // (0, 1]
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * std::numbers::pi * rng.uniform());
  };
  const auto gamma = [&](double a) {
    const double boost = a < 1 ? std::pow(1.0 - rng.uniform(), 1.0 / a) : 1.0;
    const double d = (a < 1 ? a + 1 : a) - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      const double x = normal(), v0 = 1.0 + c * x;
      if (v0 <= 0) continue;
      const double v = v0 * v0 * v0, u = 1.0 - rng.uniform();
      if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v * boost;
    }
  };
  std::vector<double> g(static_cast<size_t>(n));
  double sum = 0;
  for (double& x : g) sum += (x = gamma(alpha));
  std::vector<float> w(g.size());
  // All draws 0 (alpha tiny, underflow): one-hot on a uniform index, the limit.
  if (!(sum > 0)) {
    w[rng.below(static_cast<uint64_t>(n))] = 1.0f;
    return w;
  }
  for (size_t i = 0; i < g.size(); ++i) w[i] = static_cast<float>(g[i] / sum);
  return w;
}

AugmentDraw draw_aug_mix_op(const AugMixParams& params, int height, int width, SampleRng& rng) {
  // torchvision's table order (the choice is uniform either way).
  static constexpr std::array<AugmentOp, 13> kOps = {
      AugmentOp::kShearX,   AugmentOp::kShearY,     AugmentOp::kTranslateX, AugmentOp::kTranslateY,
      AugmentOp::kRotate,   AugmentOp::kPosterize,  AugmentOp::kSolarize,   AugmentOp::kAutoContrast,
      AugmentOp::kEqualize, AugmentOp::kBrightness, AugmentOp::kColor,      AugmentOp::kContrast,
      AugmentOp::kSharpness};
  const auto op = kOps[rng.below(params.all_ops ? 13 : 9)];
  AugmentDraw draw{op, 0.0};
  if (augment_magnitude(AugmentSpace::kAugMix, op, 10, 0, height, width)) {
    const int bin = static_cast<int>(rng.below(static_cast<uint64_t>(params.severity)));
    draw.magnitude = signed_draw(op, *augment_magnitude(AugmentSpace::kAugMix, op, 10, bin, height, width), rng);
  }
  return draw;
}

void apply_aug_mix(SampleImage& sample, const AugMixParams& params, Interpolation interpolation, const FillArg& fill,
                   SampleRng& rng) {
  const int h = sample.image.height, w = sample.image.width;
  const std::vector<float> m = sample_dirichlet(params.alpha, 2, rng);
  std::vector<float> weights = sample_dirichlet(params.alpha, params.mixture_width, rng);
  for (float& x : weights) x *= m[1];
  const size_t n = sample.image.pixels.size();
  // mix = m[0] * batch (float32), then mix.add_(weight * aug) per chain.
  std::vector<float> mix(n);
  for (size_t i = 0; i < n; ++i) mix[i] = m[0] * static_cast<float>(sample.image.pixels[i]);
  SampleImage chain{Image{}, {}, nullptr};
  for (int k = 0; k < params.mixture_width; ++k) {
    chain.image = sample.image;
    const int depth = params.chain_depth > 0 ? params.chain_depth : 1 + static_cast<int>(rng.below(3));
    for (int d = 0; d < depth; ++d) {
      const AugmentDraw draw = draw_aug_mix_op(params, h, w, rng);
      apply_augment_op(chain, draw.op, draw.magnitude, interpolation, fill);
    }
    const float wk = weights[static_cast<size_t>(k)];
    const uint8_t* a = chain.image.pixels.data();
    for (size_t i = 0; i < n; ++i) mix[i] += wk * static_cast<float>(a[i]);
  }
  // .to(uint8): truncation (the weights sum to about 1: values stay in [0, 255] but for rounding).
  for (size_t i = 0; i < n; ++i) sample.image.pixels[i] = static_cast<uint8_t>(std::clamp(mix[i], 0.0f, 255.0f));
}

std::unique_ptr<const TransformStep> make_aug_mix_step(const TransformParams& params) {
  TransformArgs args("AugMix", params);
  AugMixParams p;
  const auto int_arg = [&args](std::string_view arg, double fallback, double lo, double hi) {
    const double v = args.number(arg, fallback);
    args.check(v == std::floor(v) && v >= lo && v <= hi,
               std::string(arg) + " must be an integer in [" + std::to_string(static_cast<int64_t>(lo)) + ", " +
                   std::to_string(static_cast<int64_t>(hi)) + "], got " + args.given(arg));
    return static_cast<int>(v);
  };
  p.severity = int_arg("severity", 3, 1, 10);
  p.mixture_width = int_arg("mixture_width", 3, 1, 100);
  p.chain_depth = int_arg("chain_depth", -1, -1e6, 100);
  p.alpha = args.number("alpha", 1.0);
  args.check(p.alpha > 0 && p.alpha <= 1e6, "alpha must be in (0, 1000000], got " + format_shortest(p.alpha));
  p.all_ops = args.flag("all_ops", true);
  const double mode = args.number("interpolation", 1);
  args.check(mode == 0 || mode == 1, "interpolation must be 0 (nearest) or 1 (bilinear)");
  FillArg fill = FillArg::read(args);
  args.finish();
  ImageStepCheck check = op_check("AugMix", fill);
  const auto interpolation = static_cast<Interpolation>(static_cast<int>(mode));
  return make_image_step(
      std::nullopt,
      [p, interpolation, fill = std::move(fill)](SampleImage& sample, SampleRng& rng) {
        apply_aug_mix(sample, p, interpolation, fill, rng);
      },
      std::move(check));
}

std::unique_ptr<const TransformStep> make_trivial_augment_wide_step(const TransformParams& params) {
  TransformArgs args("TrivialAugmentWide", params);
  const int bins = read_num_bins(args);
  OpArgs op = read_op_args(args);
  args.finish();
  ImageStepCheck check = op_check("TrivialAugmentWide", op.fill);
  return make_image_step(
      std::nullopt,
      [bins, op = std::move(op)](SampleImage& sample, SampleRng& rng) {
        const AugmentDraw d = draw_trivial_augment(bins, sample.image.height, sample.image.width, rng);
        apply_augment_op(sample, d.op, d.magnitude, op.interpolation, op.fill);
      },
      std::move(check));
}

std::unique_ptr<const TransformStep> make_rand_augment_step(const TransformParams& params) {
  TransformArgs args("RandAugment", params);
  const double num_ops = args.number("num_ops", 2);
  args.check(num_ops == std::floor(num_ops) && num_ops >= 0 && num_ops <= 1000,
             "num_ops must be an integer in [0, 1000], got " + format_shortest(num_ops));
  const double magnitude = args.number("magnitude", 9);
  const int bins = read_num_bins(args);
  args.check(magnitude == std::floor(magnitude) && magnitude >= 0 && magnitude <= bins - 1,
             "magnitude must be an integer in [0, num_magnitude_bins - 1 = " + std::to_string(bins - 1) + "], got " +
                 format_shortest(magnitude));
  OpArgs op = read_op_args(args);
  args.finish();
  ImageStepCheck check = op_check("RandAugment", op.fill);
  const int n = static_cast<int>(num_ops), m = static_cast<int>(magnitude);
  return make_image_step(
      std::nullopt,
      [n, m, bins, op = std::move(op)](SampleImage& sample, SampleRng& rng) {
        // torchvision takes the size once, before the ops (none changes it).
        const int h = sample.image.height, w = sample.image.width;
        for (int i = 0; i < n; ++i) {
          const AugmentDraw d = draw_rand_augment_op(bins, m, h, w, rng);
          apply_augment_op(sample, d.op, d.magnitude, op.interpolation, op.fill);
        }
      },
      std::move(check));
}

std::unique_ptr<const TransformStep> make_auto_augment_step(const TransformParams& params) {
  TransformArgs args("AutoAugment", params);
  const double policy = args.number("policy", 0);
  args.check(policy == 0 || policy == 1 || policy == 2,
             "policy must be 0 (imagenet), 1 (cifar10) or 2 (svhn), got " + format_shortest(policy));
  OpArgs op = read_op_args(args);
  args.finish();
  ImageStepCheck check = op_check("AutoAugment", op.fill);
  const auto p = static_cast<AutoAugmentPolicy>(static_cast<int>(policy));
  return make_image_step(
      std::nullopt,
      [p, op = std::move(op)](SampleImage& sample, SampleRng& rng) {
        for (const AugmentDraw& d : draw_auto_augment(p, sample.image.height, sample.image.width, rng)) {
          apply_augment_op(sample, d.op, d.magnitude, op.interpolation, op.fill);
        }
      },
      std::move(check));
}

void augment_op_function(const TransformParams& params, SampleImage& sample) {
  TransformArgs args("augment_op", params);
  const double op = args.number("op");
  args.check(op == std::floor(op) && op >= 0 && op < static_cast<double>(kOpNames.size()),
             "op must be an integer in [0, 14], got " + format_shortest(op));
  const double magnitude = args.number("magnitude", 0);
  // The tables' magnitudes are small; bounding them keeps the warps' arithmetic finite.
  args.check(std::abs(magnitude) <= 1e6, "magnitude must be in [-1000000, 1000000], got " + format_shortest(magnitude));
  const OpArgs op_args = read_op_args(args);
  const auto kind = static_cast<AugmentOp>(static_cast<int>(op));
  if (kind == AugmentOp::kPosterize) {
    args.check(magnitude >= 0 && magnitude < 9, "magnitude must be in [0, 9) for Posterize (bits)");
  } else if (kind == AugmentOp::kSolarize) {
    args.check(magnitude <= 1, "magnitude must be at most 1 for Solarize");
  } else if (kind >= AugmentOp::kBrightness && kind <= AugmentOp::kSharpness) {
    args.check(magnitude >= -1, "magnitude must be at least -1 for a factor 1 + magnitude");
  }
  args.finish();
  check_color_channels("augment_op", sample.image);
  op_args.fill.check_channels("augment_op", sample.image.channels);
  apply_augment_op(sample, kind, magnitude, op_args.interpolation, op_args.fill);
}

}  // namespace conveyor

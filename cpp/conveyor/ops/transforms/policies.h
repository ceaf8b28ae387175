#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "conveyor/core/rng.h"
#include "conveyor/ops/transforms/pad_crop.h"
#include "conveyor/ops/transforms/registry.h"
#include "conveyor/ops/transforms/warp.h"

namespace conveyor {

// The automatic augmentation policies of torchvision 0.29 transforms.v2
// (_auto_augment.py): TrivialAugmentWide, RandAugment, AutoAugment. Each op
// of their tables runs an existing kernel (warp.h, color.h, blur.h,
// histogram.h) with the arguments `_apply_image_or_video_transform` gives it.

/// The ops of the tables, numbered in torchvision's table order (Identity
/// first; Invert is AutoAugment's only).
enum class AugmentOp {
  kIdentity = 0,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kRotate,
  kBrightness,
  kColor,
  kContrast,
  kSharpness,
  kPosterize,
  kSolarize,
  kAutoContrast,
  kEqualize,
  kInvert,
};

/// The number of ops RandAugment and TrivialAugmentWide choose from
/// (Identity .. Equalize).
inline constexpr int kAugmentChoiceCount = 14;

/// Which `_AUGMENTATION_SPACE` the magnitudes come from: RandAugment's (also
/// AutoAugment's), TrivialAugmentWide's (wider ranges) or AugMix's
/// (translations by a third of the size, posterize 4..0 bits).
enum class AugmentSpace { kRandAugment, kTrivialAugmentWide, kAugMix };

/// torch.linspace(start, end, steps)[index] in float32, as PyTorch's CPU
/// kernel computes it (step = (end - start) / (steps - 1) in float32; the
/// first half start + step * i, the second end - step * (steps - 1 - i),
/// each one fused multiply-add). steps >= 2.
float linspace_float32(float start, float end, int steps, int index);

/// The magnitude of `op` at `bin` of `num_bins` (>= 2) for a height x width
/// image, as float(magnitudes[bin]) in torchvision (float32 values widened;
/// Posterize's bits as a number); none for the ops without magnitudes
/// (Identity, AutoContrast, Equalize, Invert). Unsigned: the sign is drawn
/// apart (augment_op_signed).
std::optional<double> augment_magnitude(AugmentSpace space, AugmentOp op, int num_bins, int bin, int height, int width);

/// Whether torchvision negates `op`'s magnitude with probability 1/2 (the
/// geometric ops, Brightness, Color, Contrast, Sharpness).
bool augment_op_signed(AugmentOp op);

/// torchvision's name of `op` ("ShearX", ...).
std::string_view augment_op_name(AugmentOp op);

/// Applies `op` with (signed) `magnitude` to `sample`, as torchvision's
/// `_apply_image_or_video_transform`: shears through F.affine (shear
/// degrees(atan(m)), center (0, 0)), translations by int(m) pixels, Rotate by
/// m degrees, Brightness/Color/Contrast/Sharpness with factor 1 + m,
/// Posterize with int(m) bits, Solarize at 255 * m. Moves the sample's boxes
/// with the geometric ops. The image has 1 or 3 channels. With
/// sample.defer_tables, the pointwise ops (Brightness, Contrast, Posterize,
/// Solarize, AutoContrast, Equalize, Invert) leave their result in
/// sample.pending_tables (pixel_tables.h) instead of the pixels.
void apply_augment_op(SampleImage& sample, AugmentOp op, double magnitude, Interpolation interpolation,
                      const FillArg& fill);

/// One op and its (signed) magnitude, as a policy draws them.
struct AugmentDraw {
  AugmentOp op = AugmentOp::kIdentity;
  double magnitude = 0;
};

/// TrivialAugmentWide's draw for a height x width image: op = randint(14),
/// then (ops with magnitudes) bin = randint(num_bins), then (signed ops)
/// negated when rand <= 0.5.
AugmentDraw draw_trivial_augment(int num_bins, int height, int width, SampleRng& rng);

/// One of RandAugment's num_ops draws: op = randint(14), the magnitude at
/// bin `magnitude` (no draw), negated when rand <= 0.5 (signed ops).
AugmentDraw draw_rand_augment_op(int num_bins, int magnitude, int height, int width, SampleRng& rng);

/// AutoAugment's policies (torchvision's AutoAugmentPolicy), numbered as in
/// the parameter records.
enum class AutoAugmentPolicy { kImageNet = 0, kCifar10 = 1, kSvhn = 2 };

/// One sub-policy entry: an op applied with `probability` at magnitude bin
/// `bin` of 10 (-1 for the ops without magnitudes).
struct AutoAugmentEntry {
  AugmentOp op;
  double probability;
  int bin;
};

/// The 25 sub-policies (two entries each) of `policy`, as torchvision lists them.
const std::array<std::array<AutoAugmentEntry, 2>, 25>& auto_augment_policy(AutoAugmentPolicy policy);

/// AutoAugment's draws for a height x width image: sub-policy =
/// randint(25), then per entry: applied when rand <= probability, and then
/// (signed ops) negated when rand <= 0.5. Returns the ops to apply, in order.
std::vector<AugmentDraw> draw_auto_augment(AutoAugmentPolicy policy, int height, int width, SampleRng& rng);

/// AugMix's parameters (torchvision's AugMix arguments).
struct AugMixParams {
  int severity = 3;
  int mixture_width = 3;
  int chain_depth = -1;  ///< <= 0: each chain's depth uniform in [1, 3].
  double alpha = 1.0;
  bool all_ops = true;
};

/// One Dirichlet(alpha, ..., alpha) draw of `n` weights (Gamma(alpha) draws
/// normalised), as float32 (torch._sample_dirichlet's distribution, not its
/// bits). alpha > 0.
std::vector<float> sample_dirichlet(double alpha, int n, SampleRng& rng);

/// One op of an AugMix chain: uniform among its 13 ops (all_ops) or the 9
/// without Brightness, Color, Contrast, Sharpness; bin = randint(severity) of
/// 10; negated when rand <= 0.5 (signed ops).
AugmentDraw draw_aug_mix_op(const AugMixParams& params, int height, int width, SampleRng& rng);

/// AugMix on `sample`: m = Dirichlet(alpha, alpha), weights =
/// Dirichlet(alpha x mixture_width) * m[1]; mix = m[0] * image + sum of
/// weight_i * chain_i(image) in float32 (torch's roundings), truncated to
/// uint8. Each chain applies `chain_depth` (or 1..3) drawn ops to the image.
void apply_aug_mix(SampleImage& sample, const AugMixParams& params, Interpolation interpolation, const FillArg& fill,
                   SampleRng& rng);

/// The "aug_mix" factory: AugMix(severity, mixture_width, chain_depth, alpha,
/// all_ops, interpolation (default bilinear), fill).
std::unique_ptr<const TransformStep> make_aug_mix_step(const TransformParams& params);

/// The "trivial_augment_wide" factory: TrivialAugmentWide(num_magnitude_bins,
/// interpolation, fill) (listed in registry.cc).
std::unique_ptr<const TransformStep> make_trivial_augment_wide_step(const TransformParams& params);

/// The "rand_augment" factory: RandAugment(num_ops, magnitude,
/// num_magnitude_bins, interpolation, fill).
std::unique_ptr<const TransformStep> make_rand_augment_step(const TransformParams& params);

/// The "auto_augment" factory: AutoAugment(policy, interpolation, fill).
std::unique_ptr<const TransformStep> make_auto_augment_step(const TransformParams& params);

/// The "augment_op" image function: one op of the tables with a fixed
/// magnitude (op: AugmentOp's number, magnitude, interpolation, fill), as
/// torchvision's `_apply_image_or_video_transform` (for tests and parity).
void augment_op_function(const TransformParams& params, SampleImage& sample);

}  // namespace conveyor

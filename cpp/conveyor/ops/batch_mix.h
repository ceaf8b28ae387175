#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "conveyor/core/dtype.h"
#include "conveyor/core/rng.h"

namespace conveyor {

/// Which batch mix (torchvision.transforms.v2's MixUp or CutMix).
enum class MixKind { kMixUp, kCutMix };

/// "MixUp" or "CutMix".
const char* mix_kind_name(MixKind kind) noexcept;

/// One batch mix and its Beta(alpha, alpha) parameter.
struct MixOption {
  MixKind kind = MixKind::kMixUp;
  double alpha = 1.0;  ///< > 0 and finite.
};

/// The batch transform a loader applies to each batch before hand-off: one
/// mix, or a random choice between several per batch (torchvision's
/// RandomChoice([MixUp(), CutMix()]), the reference training recipe).
struct BatchMixSpec {
  std::vector<MixOption> options;  ///< At least one.
  std::vector<double> p;           ///< Probabilities of `options` (normalised); empty: uniform.
  int64_t num_classes = 0;         ///< Labels become N x num_classes float32, one-hot then mixed.
  bool channels_last = false;      ///< Samples are H x W x C (true) or C x H x W.
};

/// The rules on a batch mix's own arguments, checked where it is written
/// (Python's MixUp, CutMix and RandomChoice check at construction) and again
/// by check_batch_mix: at least one option, each alpha finite and > 0,
/// RandomChoice's p one finite number >= 0 per option and not all 0, and
/// num_classes >= 1 unless `num_classes_known` is false (it is taken from the
/// source later). Throws Error{kConfig} naming the transform and argument.
void check_batch_mix_arguments(const BatchMixSpec& spec, bool num_classes_known = true);

/// Throws Error{kConfig} naming the argument when `spec` cannot mix batches of
/// `sample`s: no option, alpha <= 0 or not finite, bad probabilities,
/// num_classes < 1, a sample that is not 3-D, a dtype other than uint8,
/// float16, float32 or bfloat16, or MixUp on uint8 (torchvision refuses it too:
/// "result type Float can't be cast to the desired output type Byte").
void check_batch_mix(const BatchMixSpec& spec, const SampleSpec& sample);

/// The random choices of one batch.
struct BatchMixParams {
  MixKind kind = MixKind::kMixUp;
  double lambda = 1.0;  ///< The Beta(alpha, alpha) draw.
  /// CutMix: the box's centre (torch.randint(W), torch.randint(H)) and the
  /// box [x1, x2) x [y1, y2) pasted from the previous sample; empty for MixUp.
  int64_t center_x = 0, center_y = 0;
  int64_t x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  /// The weight of each sample's own label: lambda for MixUp; for CutMix
  /// 1 - box area / image area (torchvision's lam_adjusted).
  double label_lambda = 1.0;
};

/// The random stream of batch `batch_index` of `epoch`: its own key, apart
/// from every sample's stream, so that a batch's mix depends only on
/// (seed, epoch, batch index) -- any thread count, and after resume.
SampleRng batch_mix_rng(uint64_t seed, uint64_t epoch, uint64_t batch_index) noexcept;

/// A Gamma(shape, 1) variate's logarithm (logs keep small shapes from
/// underflowing to 0): Marsaglia & Tsang's squeeze method for shape >= 1
/// (normals by Box-Muller), and for shape < 1 the boost
/// Gamma(shape) = Gamma(shape + 1) * U^(1/shape). `shape` > 0.
double sample_log_gamma(double shape, SampleRng& rng);

/// A Beta(a, b) variate as X / (X + Y) with X ~ Gamma(a), Y ~ Gamma(b),
/// computed from their logarithms. `a`, `b` > 0.
double sample_beta(double a, double b, SampleRng& rng);

/// Draws one batch's mix from `rng`, in this order: the option (when there
/// are several), lambda, and for CutMix the box centre (x, then y); the box
/// and lam_adjusted are then computed exactly as torchvision's CutMix does
/// for images of `height` x `width`.
BatchMixParams sample_batch_mix(const BatchMixSpec& spec, int64_t height, int64_t width, SampleRng& rng);

/// The first sample whose label is outside [0, num_classes), or -1.
int64_t first_label_outside(const std::vector<int64_t>& labels, int64_t num_classes) noexcept;

/// Mixes `n` samples laid out contiguously at `images` (each of `sample`'s
/// spec) in place, each with the one before it (sample 0 with sample n - 1:
/// torchvision's roll by one), as torchvision.transforms.v2 computes it
/// (MixUp: rolled * (1 - lambda) + own * lambda in the dtype's arithmetic;
/// CutMix: the box copied from the rolled batch). Writes the mixed one-hot
/// labels (n x spec.num_classes float32, torchvision's _mixup_label) to
/// `soft_labels`. `labels` are in [0, num_classes) (first_label_outside).
/// Not thread-safe on the same buffers; pure otherwise.
void apply_batch_mix(const BatchMixParams& params, const BatchMixSpec& spec, const SampleSpec& sample, int64_t n,
                     void* images, const std::vector<int64_t>& labels, float* soft_labels);

}  // namespace conveyor

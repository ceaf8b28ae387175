#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "conveyor/core/dtype.h"
#include "conveyor/core/error.h"
#include "conveyor/core/geometry.h"
#include "conveyor/core/rng.h"
#include "conveyor/ops/image.h"
#include "conveyor/ops/image_decode.h"
#include "conveyor/ops/resize.h"

namespace conveyor {

/// Height and width in pixels.
struct Size2D {
  int height = 0;
  int width = 0;
};

/// A transform's parameters by argument name; each value is a list of numbers
/// (a scalar is a list of one, a bool is 0 or 1).
using TransformParams = std::map<std::string, std::vector<double>, std::less<>>;

struct SampleImage;

/// A user function on one sample's image (T.Lambda): rewrites or replaces
/// `sample.image` (any size, same channels). Called concurrently from the
/// pipeline's threads; throws Error (e.g. carrying the user's exception as an
/// ErrorAttachment) to fail the sample.
using ImageCallback = std::function<void(SampleImage& sample)>;

/// One transform of a chain as the user wrote it: a registered name (e.g.
/// "resize") and its parameters. The factory registered under `name` parses
/// and checks them (see TransformArgs). With `function` set, the step is that
/// user function instead (transforms/function.h) and `name` names it in
/// errors. `children` are the transforms a compound one holds
/// (register_compound_transform: RandomApply and its kin).
struct TransformSpec {
  std::string name;
  TransformParams params;
  ImageCallback function = nullptr;
  std::vector<TransformSpec> children;
};

/// Where one sample's output comes from, built by the geometric steps in
/// order: output pixel (y, x) samples source position (y0 + y * sy, x0 + x * sx)
/// (pixel edges), then the image is mirrored left-right if `flip`, top-bottom
/// if `vflip`. `height` x `width` is the size of the image as the chain has
/// transformed it so far.
struct Placement {
  double x0 = 0, y0 = 0, sx = 1, sy = 1;
  bool flip = false;
  double height = 0, width = 0;
  bool vflip = false;
  /// The source pixels the resample may read: the last crop made before any
  /// resize (a crop of the source's own pixels, which torchvision resizes
  /// alone), or none (the whole image: a crop after a resize is a crop of
  /// the resized image, whose pixels near its edges saw their neighbours).
  std::optional<BoxF> bound;

  /// Crops rows [top, top + h) and columns [left, left + w) of the current
  /// image (may reach outside it: padding). A crop after a flip is mirrored.
  void crop(double top, double left, double h, double w);
  /// Resizes the current image to h x w.
  void resize(double h, double w);
};

/// A padding value per channel (a 1-channel image uses the first).
using Fill = std::array<uint8_t, 3>;

/// What the planner knows about the chain at construction, updated by each
/// step in order (TransformStep::plan).
struct ChainPlan {
  int channels = 3;               ///< Output channels (1 or 3); read-only for steps.
  DType dtype = DType::kFloat32;  ///< Output dtype; read-only for steps.
  std::optional<Size2D> size;     ///< The fixed output size so far, or none (depends on the image).
};

/// What a step's plan() says about itself. The planner combines the choices
/// of the geometric and mirror steps resampled together (a group); no step
/// reads or edits another's.
struct StepPlan {
  /// False for a resizing step that asks for no antialiasing: its group's
  /// resample then has none.
  bool antialias = true;
  /// For a resizing step: its interpolation. Each group resamples with one,
  /// so a step asking for another than an earlier step of its group starts a
  /// new group (as `fill` does).
  std::optional<Interpolation> interpolation;
  /// For a step whose crops may reach outside the image: the value the
  /// padding shows (CenterCrop: zeros). Each group pads with one value, so a
  /// step that pads with another value than an earlier step of its group
  /// starts a new group (the image so far is resampled first).
  std::optional<Fill> fill;
};

/// How a step acts, which decides where it may stand in the chain.
enum class StepKind {
  kGeometric,  ///< Moves pixels through the source box and resample (crop, resize): before every pointwise step.
  kMirror,     ///< Moves pixels but commutes with pointwise steps (a flip): anywhere.
  kPointwise,  ///< Maps each value (fused into the output pass).
  /// Runs on the decoded image with per-sample parameters (a rotation, a
  /// colour jitter, a user function): the geometric and mirror steps before
  /// it are resampled (one fused decode + resample for the leading ones) into
  /// the image it receives, those after it resample its output. Before every
  /// pointwise step.
  kImage,
  /// Runs on the written output (the batch slot, after Normalize's tables:
  /// RandomErasing) with per-sample parameters. After every other kind.
  kOutput,
};

/// One 256-entry table per channel (the first 1 or 3 used): value v of
/// channel c becomes tables[c][v].
using ChannelTables = std::array<std::array<uint8_t, 256>, 3>;

/// What a step of kind kImage works on: one sample's image as the chain has
/// transformed it so far. Owned by the pipeline's per-thread scratch (reused
/// across samples, so no allocation once warm); only the calling thread sees it.
struct SampleImage {
  /// HWC uint8, packed rows, the chain's output channel count. A step
  /// rewrites the pixels in place or replaces the image (any size, same
  /// channels).
  Image image;
  /// A buffer a step may use freely, e.g. build its result there and swap it
  /// with image.pixels.
  std::vector<uint8_t> spare;
  /// The sample's boxes in the image's pixel coordinates, or null when the
  /// sample has none tracked. A step that moves pixels moves them (dropping
  /// boxes that leave the image, clipping the rest).
  std::vector<BoundingBox>* boxes = nullptr;
  /// Set by the pipeline when the output pass comes right after this step: a
  /// pointwise result may then stay in `pending_tables` (map_values in
  /// pixel_tables.h), and the output pass maps the pixels through it with
  /// its own tables, instead of a pass over the pixels here.
  bool defer_tables = false;
  /// Tables the pixels are still to be mapped through, or none. Only a step
  /// that left them sees them: it calls apply_pending_tables before reading
  /// its pixels again.
  std::optional<ChannelTables> pending_tables;
  /// The most pixels (height x width) an image of this sample may have: the
  /// pipeline's max_pixels; kDefaultMaxPixels in the functional API.
  int64_t max_pixels = kDefaultMaxPixels;

  /// check_image_size with this sample's max_pixels: a step that changes the
  /// image's size calls it with the new size before allocating it.
  void check_size(int64_t height, int64_t width, std::string_view what) const;
};

/// The one check of every image size the transforms meet (the pipeline's
/// intermediate images, each step's new image, a user function's result,
/// the functional API's input), before the image is allocated (or read):
/// throws Error{kConfig, "<what>: an image of WxH pixels (each side must be
/// at least 1)"} when a side is below 1, Error{kTooLarge} when a side does
/// not fit in an int ("..., a side longer than 2147483647") or height x
/// width exceeds `max_pixels` (>= 1; "..., more than max_pixels (N)").
/// Thread-safe.
void check_image_size(int64_t height, int64_t width, int64_t max_pixels, std::string_view what);

/// What a step of kind kOutput works on: one sample's output as written into
/// the batch slot (the values after Normalize, in the output dtype and
/// layout). Borrowed from the pipeline for the call; only the calling thread
/// sees it.
struct OutputSample {
  void* data = nullptr;  ///< The slot: channels x height x width values (CHW) or height x width x channels (HWC).
  DType dtype = DType::kFloat32;  ///< uint8, float16 (IEEE binary16 bits) or float32.
  bool chw = true;                ///< The layout: CHW when true, else HWC.
  int channels = 3;
  int height = 0;
  int width = 0;
};

/// The per-channel arithmetic of torchvision's Normalize on values in
/// [0, 1]: (x - mean[c]) / std[c] in float32, one entry per channel.
struct ChannelNormalization {
  std::vector<float> mean;
  std::vector<float> std;
};

class WarpingStep;

/// One planned transform. A step derives from the base of its kind
/// (GeometricStep, MirrorStep, PointwiseStep, ImageStep or OutputStep), which
/// fixes kind() and declares the one per-sample hook that kind has; the other
/// hooks are defaulted. Only those bases can derive from TransformStep, so a
/// step's kind() always names its base (step_as relies on it).
///
/// Thread-safety: immutable after construction; the per-sample hooks may run
/// concurrently.
class TransformStep {
 public:
  virtual ~TransformStep() = default;
  TransformStep(const TransformStep&) = delete;
  TransformStep& operator=(const TransformStep&) = delete;

  /// Where the step may stand in the chain (StepKind); final in each base.
  virtual StepKind kind() const = 0;

  /// Construction time: checks that the step can follow the chain so far
  /// (throws Error{kConfig}, e.g. Normalize with a uint8 output), updates the
  /// chain's output size when the step changes it, and returns the step's own
  /// choices. By default the step changes nothing and chooses nothing.
  virtual StepPlan plan(ChainPlan& /*chain*/) const { return {}; }

 private:
  TransformStep() = default;
  friend class PlacementStep;
  friend class PointwiseStep;
  friend class ImageStep;
  friend class OutputStep;
};

/// The common base of geometric and mirror steps: they move pixels through
/// the composed placement.
class PlacementStep : public TransformStep {
 public:
  static constexpr bool holds(StepKind kind) { return kind == StepKind::kGeometric || kind == StepKind::kMirror; }

  /// Per sample: draws this step's parameters from `rng` and moves the
  /// placement (crop, resize, flip). Bounding boxes follow the composed
  /// placement (SampleGeometry), so they move too. Throws Error{kTooLarge}
  /// when the image makes a size overflow.
  virtual void place(Placement& placement, SampleRng& rng) const = 0;

 private:
  PlacementStep() = default;
  friend class GeometricStep;
  friend class MirrorStep;
};

/// A step of kind kGeometric (a crop, a resize).
class GeometricStep : public PlacementStep {
 public:
  StepKind kind() const final { return StepKind::kGeometric; }
};

/// A step of kind kMirror (a flip).
class MirrorStep : public PlacementStep {
 public:
  StepKind kind() const final { return StepKind::kMirror; }
};

/// A step of kind kPointwise: folded into the output pass's per-channel tables
/// at construction.
class PointwiseStep : public TransformStep {
 public:
  static constexpr bool holds(StepKind kind) { return kind == StepKind::kPointwise; }
  StepKind kind() const final { return StepKind::kPointwise; }

  /// Maps a value of channel `channel` (in [0, 1] after ToTensor's scaling,
  /// float32 arithmetic).
  virtual float map_value(int channel, float value) const = 0;

  /// The step's map as a Normalize, when it is one: a lone Normalize is then
  /// computed arithmetically by the output pass instead of through tables
  /// (same values). None by default.
  virtual std::optional<ChannelNormalization> normalization() const { return std::nullopt; }
};

/// A step of kind kImage: runs on the decoded image with per-sample
/// parameters.
class ImageStep : public TransformStep {
 public:
  static constexpr bool holds(StepKind kind) { return kind == StepKind::kImage; }
  StepKind kind() const final { return StepKind::kImage; }

  /// Per sample: draws this step's parameters from `rng` and transforms
  /// `sample` (its pixels, and its boxes when tracked). Throws
  /// Error{kDecode} (bad image data, e.g. from a user function) or
  /// Error{kTooLarge}.
  virtual void apply_image(SampleImage& sample, SampleRng& rng) const = 0;

  /// The step as one warp (warp.h), when it is one: the crops and resizes
  /// after it then compute only their window of its output (the same pixels
  /// apply_image() gives, computed whole). Null by default.
  virtual const WarpingStep* warping() const { return nullptr; }
};

/// A step of kind kOutput: runs on the written output, after every other
/// kind.
class OutputStep : public TransformStep {
 public:
  static constexpr bool holds(StepKind kind) { return kind == StepKind::kOutput; }
  StepKind kind() const final { return StepKind::kOutput; }

  /// Per sample: draws this step's parameters from `rng` and rewrites values
  /// of the written `sample`.
  virtual void apply_output(OutputSample& sample, SampleRng& rng) const = 0;
};

/// `step` as the base of its kind (`KindBase` is PlacementStep,
/// PointwiseStep, ImageStep or OutputStep). Throws Error{kInternal} when the
/// step is of another kind.
template <class KindBase>
const KindBase& step_as(const TransformStep& step) {
  if (!KindBase::holds(step.kind())) throw Error(ErrorKind::kInternal, "a transform step taken for another kind");
  // Safe: only the kinds' bases derive from TransformStep, each with its kind() final.
  return static_cast<const KindBase&>(step);
}

/// Parses a transform's parameters with errors naming the transform and the
/// argument ("Resize: size must be ..."). Every argument read is marked;
/// finish() rejects arguments no read asked for.
class TransformArgs {
 public:
  /// `transform` is the user-facing name used in messages (e.g. "Resize").
  /// Borrows `params` (must outlive this object).
  TransformArgs(std::string transform, const TransformParams& params);

  /// Whether `arg` was given.
  bool has(std::string_view arg) const;
  /// The numbers of `arg`; `count` (if > 0) is the exact length required.
  /// Throws Error{kConfig} when missing (and no default) or of another length.
  std::vector<double> numbers(std::string_view arg, size_t count = 0,
                              std::optional<std::vector<double>> fallback = std::nullopt);
  /// One number, finite.
  double number(std::string_view arg, std::optional<double> fallback = std::nullopt);
  /// One integer, at most 2**30 in magnitude.
  int integer(std::string_view arg);
  /// One flag (0 or 1).
  bool flag(std::string_view arg, std::optional<bool> fallback = std::nullopt);
  /// A size: every value an integer in [1, 2**31 - 1].
  std::vector<int> sizes(std::string_view arg, std::vector<size_t> counts);
  /// A size given as one int (square) or (h, w).
  Size2D size2d(std::string_view arg);
  /// Throws Error{kConfig} naming any argument that was given but never read.
  void finish() const;
  /// What was given for `arg`, for a message: one number as "0.5", several
  /// as "[0.08, 1]", "nothing" when it was not given.
  std::string given(std::string_view arg) const;
  /// Throws Error{kConfig, "<transform>: <message>"} when `condition` is false.
  void check(bool condition, std::string_view message) const;

 private:
  std::string transform_;
  const TransformParams& params_;
  std::vector<std::string> read_;
};

/// Builds a step from its parameters (throws Error{kConfig} on bad ones).
using TransformFactory = std::function<std::unique_ptr<const TransformStep>(const TransformParams&)>;

/// Builds a step that holds other steps (RandomApply, RandomChoice,
/// RandomOrder) from its parameters and its children, already built
/// (throws Error{kConfig} on bad ones).
using CompoundTransformFactory = std::function<std::unique_ptr<const TransformStep>(
    const TransformParams&, std::vector<std::unique_ptr<const TransformStep>> children)>;

/// Registers a compound `factory` under `name`; as register_transform.
bool register_compound_transform(std::string name, CompoundTransformFactory factory);

/// Registers `factory` under `name` (e.g. "resize"); returns true so that a
/// file can register from a static initializer. The built-in transforms are
/// listed in registry.cc (a static library drops self-registering objects
/// that nothing references). Throws Error{kInternal} if `name` is taken.
/// Thread-safety: call before building pipelines (static initialization).
bool register_transform(std::string name, TransformFactory factory);

/// The step registered under `spec.name`, built from `spec.params` (and, for a
/// compound transform, from its children, each built first; an error in one
/// names it: "RandomApply: transforms[0]: ..."). Throws Error{kConfig} for an
/// unknown name (listing the registered ones), bad parameters, or children
/// given to a transform that takes none. Thread-safe.
std::unique_ptr<const TransformStep> make_transform_step(const TransformSpec& spec);

/// The defaults of the arguments `spec.params` leaves out: builds the step
/// (as make_transform_step, throwing what it throws) and returns each
/// argument its factory read with a fallback, and that fallback. The one
/// place defaults are written is the factory; Python's classes show these.
/// An argument the factory reads only when another is given appears only
/// then. Thread-safe.
TransformParams transform_defaults(const TransformSpec& spec);

/// The registered names, sorted. Thread-safe.
std::vector<std::string> registered_transform_names();

/// An op with fixed parameters applied to one image: what the functional API
/// (conveyor.transforms.functional, torchvision's v2.functional) runs. Parses
/// `params` through TransformArgs (Error{kConfig} naming the argument) and
/// transforms `sample` (its boxes too when given). Runs the same kernels as
/// the registered steps; must be thread-safe.
using ImageFunction = std::function<void(const TransformParams& params, SampleImage& sample)>;

/// Registers `function` under `name` (e.g. "rotate"); as register_transform
/// (the built-in ones are listed in registry.cc).
bool register_image_function(std::string name, ImageFunction function);

/// Applies the function registered under `spec.name` with `spec.params` to
/// `sample`. Throws Error{kConfig} for an unknown name (listing the
/// registered ones) or bad parameters. Thread-safe.
void apply_image_function(const TransformSpec& spec, SampleImage& sample);

/// The functional API's entry: apply_image_function on a copy of the HWC
/// image `pixels` (height x width x channels, packed rows, borrowed for the
/// call); returns the result. The image is checked first, naming the
/// function: Error{kConfig} for channels other than 1 or 3, then
/// check_image_size against `max_pixels` (>= 1; by default the decoders'
/// limit), which also bounds what the function makes. Thread-safe.
Image apply_image_function(const TransformSpec& spec, const uint8_t* pixels, int64_t height, int64_t width,
                           int64_t channels, int64_t max_pixels = kDefaultMaxPixels);

/// The registered function names, sorted. Thread-safe.
std::vector<std::string> registered_image_function_names();

}  // namespace conveyor

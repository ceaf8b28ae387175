#include "conveyor/ops/transforms/registry.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <utility>

#include "conveyor/core/error.h"
#include "conveyor/core/number_format.h"
#include "conveyor/ops/transforms/blur.h"
#include "conveyor/ops/transforms/center_crop.h"
#include "conveyor/ops/transforms/color.h"
#include "conveyor/ops/transforms/compose.h"
#include "conveyor/ops/transforms/erase.h"
#include "conveyor/ops/transforms/flip.h"
#include "conveyor/ops/transforms/function.h"
#include "conveyor/ops/transforms/histogram.h"
#include "conveyor/ops/transforms/normalize.h"
#include "conveyor/ops/transforms/pad_crop.h"
#include "conveyor/ops/transforms/policies.h"
#include "conveyor/ops/transforms/random_resized_crop.h"
#include "conveyor/ops/transforms/resize.h"
#include "conveyor/ops/transforms/warp.h"

namespace conveyor {

namespace {

// An argument's value in a message: integers without a fraction (sizes, not
// 3e+09), others as the shortest text that reads back (17 digits at most).
std::string number_text(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::abs(v) < 1e18) return std::to_string(static_cast<int64_t>(v));
  return format_shortest(v);
}

std::string join_numbers(const std::vector<double>& values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) text += ", ";
    text += number_text(values[i]);
  }
  return text + "]";
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, TransformFactory, std::less<>> factories;
  std::map<std::string, ImageFunction, std::less<>> functions;
  std::map<std::string, CompoundTransformFactory, std::less<>> compounds;
};

Registry& registry() {
  // The built-in transforms, one line each. Listed here rather than
  // registered by their own files: nothing else references those object
  // files, so the linker would drop them from the static library.
  static Registry r{{},
                    {{"resize", make_resize_step},
                     {"center_crop", make_center_crop_step},
                     {"random_resized_crop", make_random_resized_crop_step},
                     {"horizontal_flip", make_horizontal_flip_step},
                     {"normalize", make_normalize_step},
                     // Geometry (pad_crop.cc, flip.cc, warp.cc).
                     {"random_crop", make_random_crop_step},
                     {"pad", make_pad_step},
                     {"vertical_flip", make_vertical_flip_step},
                     {"random_rotation", make_random_rotation_step},
                     {"random_affine", make_random_affine_step},
                     {"random_perspective", make_random_perspective_step},
                     // Colour (color.cc, blur.cc, histogram.cc).
                     {"color_jitter", make_color_jitter_step},
                     {"grayscale", make_grayscale_step},
                     {"random_grayscale", make_random_grayscale_step},
                     {"gaussian_blur", make_gaussian_blur_step},
                     {"random_invert", make_random_invert_step},
                     {"random_posterize", make_random_posterize_step},
                     {"random_solarize", make_random_solarize_step},
                     {"random_adjust_sharpness", make_random_adjust_sharpness_step},
                     {"random_autocontrast", make_random_autocontrast_step},
                     {"random_equalize", make_random_equalize_step},
                     {"trivial_augment_wide", make_trivial_augment_wide_step},
                     {"rand_augment", make_rand_augment_step},
                     {"auto_augment", make_auto_augment_step},
                     {"aug_mix", make_aug_mix_step},
                     // After Normalize, on the written output (erase.cc).
                     {"random_erasing", make_random_erasing_step}},
                    // The functional API's ops, one line each.
                    {// Geometry (flip.cc, pad_crop.cc, resize.cc, warp.cc).
                     {"horizontal_flip", horizontal_flip_function},
                     {"vertical_flip", vertical_flip_function},
                     {"crop", crop_function},
                     {"center_crop", center_crop_function},
                     {"pad", pad_function},
                     {"resize", resize_function},
                     {"resized_crop", resized_crop_function},
                     {"rotate", rotate_function},
                     {"affine", affine_function},
                     {"perspective", perspective_function},
                     // Colour (color.cc, blur.cc, histogram.cc).
                     {"adjust_brightness", adjust_brightness_function},
                     {"adjust_contrast", adjust_contrast_function},
                     {"adjust_saturation", adjust_saturation_function},
                     {"adjust_hue", adjust_hue_function},
                     {"rgb_to_grayscale", rgb_to_grayscale_function},
                     {"gaussian_blur", gaussian_blur_function},
                     {"invert", invert_function},
                     {"posterize", posterize_function},
                     {"solarize", solarize_function},
                     {"adjust_sharpness", adjust_sharpness_function},
                     {"autocontrast", autocontrast_function},
                     {"equalize", equalize_function},
                     {"augment_op", augment_op_function},

                     {"erase", erase_function}},
                    // Steps holding other steps (compose.cc).
                    {{"random_apply", make_random_apply_step},
                     {"random_choice", make_random_choice_step},
                     {"random_order", make_random_order_step}}};
  return r;
}

template <typename Map>
std::vector<std::string> names_of(const Map& map) {
  std::vector<std::string> names;
  for (const auto& entry : map) names.push_back(entry.first);
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& n : names) text += (text.empty() ? "" : ", ") + n;
  return text;
}

}  // namespace

void Placement::crop(double top, double left, double h, double w) {
  if (flip) left = width - w - left;
  if (vflip) top = height - h - top;
  x0 += left * sx;
  y0 += top * sy;
  height = h;
  width = w;
  if (sx == 1 && sy == 1) {
    // A crop can only narrow what an earlier one left (a padding crop after
    // a crop shows the fill around it, not the pixels beyond the first).
    BoxF b{x0, y0, x0 + w, y0 + h};
    if (bound) {
      b = {std::max(b.x0, bound->x0), std::max(b.y0, bound->y0), std::min(b.x1, bound->x1), std::min(b.y1, bound->y1)};
    }
    bound = b;
  }
}

void Placement::resize(double h, double w) {
  sx *= width / w;
  sy *= height / h;
  height = h;
  width = w;
}

namespace {

// Set by transform_defaults() on its thread while the factory runs: where
// TransformArgs records each fallback it uses.
thread_local TransformParams* recorded_defaults = nullptr;

}  // namespace

TransformArgs::TransformArgs(std::string transform, const TransformParams& params)
    : transform_(std::move(transform)), params_(params) {}

bool TransformArgs::has(std::string_view arg) const { return params_.find(arg) != params_.end(); }

std::string TransformArgs::given(std::string_view arg) const {
  const auto it = params_.find(arg);
  if (it == params_.end()) return "nothing";
  return it->second.size() == 1 ? number_text(it->second[0]) : join_numbers(it->second);
}

void TransformArgs::check(bool condition, std::string_view message) const {
  if (!condition) throw Error(ErrorKind::kConfig, transform_ + ": " + std::string(message));
}

std::vector<double> TransformArgs::numbers(std::string_view arg, size_t count,
                                           std::optional<std::vector<double>> fallback) {
  read_.emplace_back(arg);
  const auto it = params_.find(arg);
  if (it == params_.end()) {
    check(fallback.has_value(), std::string(arg) + " is required");
    if (recorded_defaults != nullptr) recorded_defaults->emplace(std::string(arg), *fallback);
    return *fallback;
  }
  check(count == 0 || it->second.size() == count,
        std::string(arg) + " must have " + std::to_string(count) + " value(s), got " + join_numbers(it->second));
  return it->second;
}

double TransformArgs::number(std::string_view arg, std::optional<double> fallback) {
  std::optional<std::vector<double>> list;
  if (fallback) list = std::vector<double>{*fallback};
  const double v = numbers(arg, 1, list)[0];
  check(std::isfinite(v), std::string(arg) + " must be finite, got " + number_text(v));
  return v;
}

int TransformArgs::integer(std::string_view arg) {
  const double v = number(arg);
  check(v == std::floor(v) && std::abs(v) <= (1 << 30), std::string(arg) + " must be an integer");
  return static_cast<int>(v);
}

bool TransformArgs::flag(std::string_view arg, std::optional<bool> fallback) {
  std::optional<double> number_fallback;
  if (fallback) number_fallback = *fallback ? 1.0 : 0.0;
  const double v = number(arg, number_fallback);
  check(v == 0 || v == 1, std::string(arg) + " must be a bool, got " + number_text(v));
  return v == 1;
}

std::vector<int> TransformArgs::sizes(std::string_view arg, std::vector<size_t> counts) {
  const std::vector<double> values = numbers(arg);
  std::string allowed;
  for (size_t c : counts) allowed += (allowed.empty() ? "" : " or ") + std::to_string(c);
  check(std::find(counts.begin(), counts.end(), values.size()) != counts.end(),
        std::string(arg) + " must have " + allowed + " value(s), got " + join_numbers(values));
  std::vector<int> out;
  for (double v : values) {
    // Doubles hold every int exactly; anything else is rejected before the cast.
    check(v == std::floor(v) && v >= 1 && v <= std::numeric_limits<int>::max(),
          std::string(arg) + " must be positive integers of at most " +
              std::to_string(std::numeric_limits<int>::max()) + ", got " + given(arg));
    out.push_back(static_cast<int>(v));
  }
  return out;
}

void check_image_size(int64_t height, int64_t width, int64_t max_pixels, std::string_view what) {
  const std::string image =
      std::string(what) + ": an image of " + std::to_string(width) + "x" + std::to_string(height) + " pixels";
  if (height < 1 || width < 1) throw Error(ErrorKind::kConfig, image + " (each side must be at least 1)");
  constexpr int64_t kMaxSide = std::numeric_limits<int>::max();  // Image sides are ints.
  if (height > kMaxSide || width > kMaxSide) {
    throw Error(ErrorKind::kTooLarge, image + ", a side longer than " + std::to_string(kMaxSide));
  }
  if (width > max_pixels / height) {  // height * width > max_pixels, without the product's overflow.
    throw Error(ErrorKind::kTooLarge, image + ", more than max_pixels (" + std::to_string(max_pixels) + ")");
  }
}

void SampleImage::check_size(int64_t height, int64_t width, std::string_view what) const {
  check_image_size(height, width, max_pixels, what);
}

Size2D TransformArgs::size2d(std::string_view arg) {
  const std::vector<int> s = sizes(arg, {1, 2});
  return {s.front(), s.back()};
}

void TransformArgs::finish() const {
  for (const auto& [name, values] : params_) {
    check(std::find(read_.begin(), read_.end(), name) != read_.end(), "unknown argument '" + name + "'");
  }
}

bool register_transform(std::string name, TransformFactory factory) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (r.compounds.count(name) != 0 || !r.factories.emplace(name, std::move(factory)).second) {
    throw Error(ErrorKind::kInternal, "transform '" + name + "' is registered twice");
  }
  return true;
}

std::unique_ptr<const TransformStep> make_transform_step(const TransformSpec& spec) {
  if (spec.function) {
    check_config(spec.params.empty(), spec.name + ": a user function takes no parameters");
    return make_function_step(spec.name, spec.function);
  }
  TransformFactory factory;
  CompoundTransformFactory compound;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    const auto it = r.factories.find(spec.name);
    if (it != r.factories.end()) factory = it->second;
    const auto at = r.compounds.find(spec.name);
    if (at != r.compounds.end()) compound = at->second;
  }
  if (compound) {
    std::vector<std::unique_ptr<const TransformStep>> children;
    {
      // The children's own defaults are not the compound's.
      TransformParams* const recording = std::exchange(recorded_defaults, nullptr);
      struct Restore {
        TransformParams* recording;
        ~Restore() { recorded_defaults = recording; }
      } restore{recording};
      for (size_t i = 0; i < spec.children.size(); ++i) {
        try {
          children.push_back(make_transform_step(spec.children[i]));
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::kConfig) throw;
          throw Error(ErrorKind::kConfig, spec.name + ": transforms[" + std::to_string(i) + "]: " + e.cause());
        }
      }
    }
    return compound(spec.params, std::move(children));
  }
  if (!factory) {
    throw Error(ErrorKind::kConfig,
                "unknown transform '" + spec.name + "' (registered: " + joined(registered_transform_names()) + ")");
  }
  check_config(spec.children.empty(), spec.name + " takes no transforms");
  return factory(spec.params);
}

TransformParams transform_defaults(const TransformSpec& spec) {
  TransformParams defaults;
  // Restored on return or throw, so that a nested call (a factory that
  // builds another step) leaves the outer recording in place.
  struct Recording {
    TransformParams* outer = recorded_defaults;
    ~Recording() { recorded_defaults = outer; }
  } recording;
  recorded_defaults = &defaults;
  make_transform_step(spec);
  return defaults;
}

std::vector<std::string> registered_transform_names() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> names = names_of(r.factories);
  for (const auto& entry : r.compounds) names.push_back(entry.first);
  std::sort(names.begin(), names.end());
  return names;
}

bool register_compound_transform(std::string name, CompoundTransformFactory factory) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (r.factories.count(name) != 0 || !r.compounds.emplace(name, std::move(factory)).second) {
    throw Error(ErrorKind::kInternal, "transform '" + name + "' is registered twice");
  }
  return true;
}

bool register_image_function(std::string name, ImageFunction function) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (!r.functions.emplace(name, std::move(function)).second) {
    throw Error(ErrorKind::kInternal, "image function '" + name + "' is registered twice");
  }
  return true;
}

void apply_image_function(const TransformSpec& spec, SampleImage& sample) {
  ImageFunction function;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    const auto it = r.functions.find(spec.name);
    if (it != r.functions.end()) function = it->second;
  }
  if (!function) {
    throw Error(ErrorKind::kConfig, "unknown image function '" + spec.name +
                                        "' (registered: " + joined(registered_image_function_names()) + ")");
  }
  function(spec.params, sample);
}

Image apply_image_function(const TransformSpec& spec, const uint8_t* pixels, int64_t height, int64_t width,
                           int64_t channels, int64_t max_pixels) {
  check_config(channels == 1 || channels == 3,
               spec.name + ": image must have 1 or 3 channels, got " + std::to_string(channels));
  check_image_size(height, width, max_pixels, spec.name);
  SampleImage sample;
  sample.max_pixels = max_pixels;
  sample.image = {static_cast<int>(height), static_cast<int>(width), static_cast<int>(channels),
                  std::vector<uint8_t>(pixels, pixels + height * width * channels)};
  apply_image_function(spec, sample);
  return std::move(sample.image);
}

std::vector<std::string> registered_image_function_names() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return names_of(r.functions);
}

}  // namespace conveyor

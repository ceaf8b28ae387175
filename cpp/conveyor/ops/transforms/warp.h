#pragma once

#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "conveyor/ops/resize.h"
#include "conveyor/ops/transforms/pad_crop.h"
#include "conveyor/ops/transforms/registry.h"

namespace conveyor {

// The warps sample with Interpolation::kNearest or kBilinear (what
// torchvision's tensor warps take).

/// A 3x3 matrix, row-major; an affine one has the last row (0, 0, 1).
using Matrix3 = std::array<double, 9>;

/// a * b.
Matrix3 multiply(const Matrix3& a, const Matrix3& b);

/// torchvision's `_get_inverse_affine_matrix(center, angle, translate, scale,
/// shear, inverted)` as a 3x3 matrix (angles in degrees, shear (x, y)).
Matrix3 affine_matrix(std::array<double, 2> center, double angle, std::array<double, 2> translate, double scale,
                      std::array<double, 2> shear, bool inverted);

/// torchvision's `_get_perspective_coeffs(startpoints, endpoints)`: the eight
/// coefficients mapping an output point (endpoint) to its source point
/// (startpoint), solved in double and rounded to float32 as torchvision does.
/// Points are (x, y) for top-left, top-right, bottom-right, bottom-left.
/// Throws Error{kConfig} when the points are degenerate.
std::array<double, 8> perspective_coefficients(const std::array<std::array<double, 2>, 4>& startpoints,
                                               const std::array<std::array<double, 2>, 4>& endpoints);

/// One sample's warp: output pixel (x, y) (pixel centres at integers)
/// samples the source at src_from_dst * (x, y, 1) (divided by the third
/// coordinate when projective); boxes (pixel edges) move through
/// boxes_forward, then are shifted by -box_offset, enclosed and clipped to
/// box_canvas (the output when 0). `rot90` marks torchvision's exact fast
/// path for rotations by multiples of 90 degrees.
struct Warp {
  Matrix3 src_from_dst{1, 0, 0, 0, 1, 0, 0, 0, 1};
  Matrix3 boxes_forward{1, 0, 0, 0, 1, 0, 0, 0, 1};
  std::array<double, 2> box_offset{0, 0};
  std::array<int, 2> box_canvas{0, 0};  ///< (width, height) torchvision clips boxes to, when it differs.
  int out_height = 0;
  int out_width = 0;
  int rot90 = -1;  ///< -1: a real warp; 0..3: quarter turns anticlockwise (0: a copy).
  /// torchvision's own parameters, float32, for the nearest-neighbour kernel
  /// that repeats its grid arithmetic: the affine theta (6, centred
  /// coordinates) or the perspective coefficients (8, when `projective`).
  std::array<float, 8> grid{};
  bool projective = false;
};

/// The warp of torchvision's `rotate(image, angle, interpolation, expand,
/// center)` on a height x width image.
Warp rotation_warp(int height, int width, double angle, bool expand, std::optional<std::array<double, 2>> center);

/// The warp of torchvision's `affine(image, angle, translate, scale, shear,
/// center)` on a height x width image.
Warp affine_warp(int height, int width, double angle, std::array<double, 2> translate, double scale,
                 std::array<double, 2> shear, std::optional<std::array<double, 2>> center);

/// The warp of torchvision's `perspective(image, coefficients=...)` on a
/// height x width image.
Warp perspective_warp(int height, int width, const std::array<double, 8>& coefficients);

/// A rectangle of a warp's output, in its pixels.
struct WarpWindow {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
};

/// Applies `warp` to `sample` (OpenCV warpAffine / warpPerspective, constant
/// border `fill`; the result in sample.image, the old pixels in spare) and
/// moves its boxes (in the whole output's pixels). With a `window` (inside
/// the output), only that part of the output is computed and becomes
/// sample.image (exact rotations by multiples of 90 degrees compute it all).
/// Returns the origin of sample.image in the whole output. Throws what
/// SampleImage::check_size throws for the output's size, naming `what`.
std::array<int, 2> apply_warp(const Warp& warp, Interpolation interpolation, const FillArg& fill, SampleImage& sample,
                              std::string_view what, const WarpWindow* window = nullptr);

/// A step on the image that is one warp (RandomRotation, RandomAffine,
/// RandomPerspective). The planner draws the warp first and computes only the
/// window of its output that the crops and resizes after it read: a crop
/// after a warp is part of the warp (decision 11).
class WarpingStep : public ImageStep {
 public:
  const WarpingStep* warping() const final { return this; }
  /// This sample's warp of a height x width image (none: the image stays as
  /// it is), drawn from `rng` as apply_image() draws it.
  virtual std::optional<Warp> draw(int height, int width, SampleRng& rng) const = 0;
  /// Applies a warp from draw() to `sample` (see apply_warp).
  virtual std::array<int, 2> apply_drawn(const Warp& warp, SampleImage& sample, const WarpWindow* window) const = 0;
};

/// The "random_rotation", "random_affine" and "random_perspective" factories
/// (torchvision.transforms.RandomRotation / RandomAffine / RandomPerspective;
/// listed in registry.cc).
std::unique_ptr<const TransformStep> make_random_rotation_step(const TransformParams& params);
std::unique_ptr<const TransformStep> make_random_affine_step(const TransformParams& params);
std::unique_ptr<const TransformStep> make_random_perspective_step(const TransformParams& params);

/// The warp `step` (built by one of the factories above) draws for a
/// height x width image: what its apply_image() applies. None when the step
/// is not a warp or RandomPerspective's p says no. For tests of the draws.
std::optional<Warp> draw_warp(const TransformStep& step, int height, int width, SampleRng& rng);

/// The image functions "rotate", "affine" and "perspective"
/// (torchvision.transforms.v2.functional's), listed in registry.cc.
void rotate_function(const TransformParams& params, SampleImage& sample);
void affine_function(const TransformParams& params, SampleImage& sample);
void perspective_function(const TransformParams& params, SampleImage& sample);

}  // namespace conveyor

#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "conveyor/ops/transforms/registry.h"

namespace conveyor {

/// torchvision's padding modes ("constant", "edge", "reflect", "symmetric"),
/// numbered in that order in the parameter records.
enum class PadMode { kConstant = 0, kEdge = 1, kReflect = 2, kSymmetric = 3 };

/// torchvision's `fill` argument: one value for every channel or one per
/// channel (3), each in [0, 255].
struct FillArg {
  std::vector<double> values{0};

  /// Reads `arg` (default 0); Error{kConfig} naming it when malformed.
  static FillArg read(TransformArgs& args, std::string_view arg = "fill");
  /// Error{kConfig, "<transform>: ..."} when three values meet a 1-channel image.
  void check_channels(std::string_view transform, int channels) const;
  /// The value of channel `c` (0, 1, 2).
  double at(int c) const { return values.size() == 1 ? values[0] : values[static_cast<size_t>(c)]; }
  /// As uint8 the way torch converts a float fill to a uint8 image (truncation).
  Fill bytes() const;
};

/// Reads a padding mode argument (0..3).
PadMode read_pad_mode(TransformArgs& args, std::string_view arg = "padding_mode");

/// Rows [top, top + height) and columns [left, left + width) of `src`, which
/// may reach outside it: outside pixels follow `mode` (constant: `fill`;
/// edge, reflect, symmetric: torch's pad modes). Written into `dst` (resized).
void pad_crop_image(const Image& src, int top, int left, int height, int width, PadMode mode, const Fill& fill,
                    Image& dst);

/// Moves boxes as a crop of rows/columns from (top, left) of size height x
/// width: shifted, clipped, dropped when outside.
void crop_boxes(std::vector<BoundingBox>* boxes, double top, double left, int height, int width);

/// The "random_crop" (torchvision.transforms.RandomCrop: size [h, w],
/// padding [left, top, right, bottom], pad_if_needed, fill, padding_mode) and
/// "pad" (torchvision.transforms.Pad: padding, fill, padding_mode) factories,
/// listed in registry.cc. With padding_mode constant they are crops of the
/// fused axis-aligned group (no pass of their own); other modes need pixels
/// and run on the image.
std::unique_ptr<const TransformStep> make_random_crop_step(const TransformParams& params);
std::unique_ptr<const TransformStep> make_pad_step(const TransformParams& params);

/// The image functions "crop" (top, left, height, width), "center_crop"
/// (output_size [h, w]) and "pad" (padding [l, t, r, b], fill,
/// padding_mode), as torchvision.transforms.v2.functional's; listed in
/// registry.cc.
void crop_function(const TransformParams& params, SampleImage& sample);
void center_crop_function(const TransformParams& params, SampleImage& sample);
void pad_function(const TransformParams& params, SampleImage& sample);

}  // namespace conveyor

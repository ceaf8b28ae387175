#pragma once

#include <memory>
#include <string>

#include "conveyor/ops/transforms/registry.h"

namespace conveyor {

/// A user function as a step of the chain (T.Lambda): a kImage step that
/// hands each sample's image to `function` (see ImageCallback), whose result
/// may have any size, so the chain has no fixed size after it until a crop or
/// a resize to (h, w). `name` names it in errors ("Lambda(my_fn)").
/// Throws Error{kConfig} when `function` is empty.
std::unique_ptr<const TransformStep> make_function_step(std::string name, ImageCallback function);

/// Makes the image a user function `name` returned the sample's image: the
/// HWC `pixels` of height x width x channels (borrowed for the call) are
/// copied into the sample. Checked before the copy: Error{kDecode} when
/// `channels` is not the image's, and SampleImage::check_size's errors.
void take_function_result(SampleImage& sample, const uint8_t* pixels, int64_t height, int64_t width, int64_t channels,
                          std::string_view name);

}  // namespace conveyor

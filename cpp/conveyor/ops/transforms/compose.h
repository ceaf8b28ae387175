#pragma once

#include <memory>
#include <vector>

#include "conveyor/ops/transforms/registry.h"

namespace conveyor {

/// torchvision.transforms.v2's RandomApply, RandomChoice and RandomOrder, per
/// sample: steps on the image (kImage) holding other steps on the image,
/// their draws from the sample's stream. The compound factories "random_apply"
/// (p: one draw, the transforms in order when it is < p), "random_choice" (p:
/// one weight per transform, equal when not given; one draw picks one) and
/// "random_order" (a random permutation, drawn as Fisher-Yates from the last
/// position down) are listed in registry.cc.
///
/// Every child must be a step on the image: Error{kConfig} "RandomApply:
/// transforms[0] (horizontal_flip) is a crop, resize or flip; ...". The
/// chain's output size after the step is the children's when every outcome
/// gives the same size, else it depends on the sample.
std::unique_ptr<const TransformStep> make_random_apply_step(const TransformParams& params,
                                                            std::vector<std::unique_ptr<const TransformStep>> children);
std::unique_ptr<const TransformStep> make_random_choice_step(
    const TransformParams& params, std::vector<std::unique_ptr<const TransformStep>> children);
std::unique_ptr<const TransformStep> make_random_order_step(const TransformParams& params,
                                                            std::vector<std::unique_ptr<const TransformStep>> children);

}  // namespace conveyor

#pragma once

#include <memory>

#include "conveyor/ops/transforms/registry.h"

namespace conveyor {

// The histogram family: torchvision 0.29 transforms.v2.functional on uint8
// HWC images of 1 or 3 channels, each channel on its own, through one
// 256-entry table per channel built from the image (see
// docs/design/color.md). In place, no allocation. Pure functions:
// thread-safe on distinct images.

/// F.autocontrast: maps each channel's [min, max] onto [0, 255] in float32
/// ((x - min) / ((max - min) / 255), clamped, truncated); a constant channel
/// is unchanged.
void autocontrast(Image& image);

/// F.equalize: PIL's equalisation as v2 computes it per channel: step =
/// (pixels not of the channel's largest value) / 255; value k maps to
/// (cumulative count below k + step / 2) / step (integer division, clamped to
/// 255); a channel with step 0 is unchanged.
void equalize(Image& image);

/// autocontrast's and equalize's tables for `image`, without applying them
/// (see pixel_tables.h).
ChannelTables autocontrast_tables(const Image& image);
ChannelTables equalize_tables(const Image& image);

/// The "random_autocontrast" factory (RandomAutocontrast(p); listed in registry.cc).
std::unique_ptr<const TransformStep> make_random_autocontrast_step(const TransformParams& params);
/// The "random_equalize" factory (RandomEqualize(p)).
std::unique_ptr<const TransformStep> make_random_equalize_step(const TransformParams& params);

/// The "autocontrast" image function (no arguments; listed in registry.cc).
void autocontrast_function(const TransformParams& params, SampleImage& sample);
/// The "equalize" image function (no arguments).
void equalize_function(const TransformParams& params, SampleImage& sample);

}  // namespace conveyor

#pragma once

#include <functional>

#include "conveyor/ops/transforms/registry.h"

namespace conveyor {

// Pointwise results as per-channel tables (ChannelTables, registry.h): a
// step whose result on each value depends only on the value and on
// statistics of the image (brightness, posterize, contrast, autocontrast,
// equalize, ...) gives tables; when the output pass comes next, they wait
// there and are composed with the output's own tables (normalize, dtype), so
// the pixels are not rewritten. Pure functions on the caller's sample:
// thread-safe on distinct samples.

/// Tables that leave every value as it is.
ChannelTables identity_tables();

/// Maps every value of `image` (1 or 3 channels) through its channel's table, in one pass.
void apply_tables(Image& image, const ChannelTables& tables);

/// The tables of a function of the value alone, the same on every channel:
/// `op` applied to an image of the 256 values.
ChannelTables value_tables(const std::function<void(Image&)>& op);

/// A pointwise result on `sample`: kept in sample.pending_tables (after those
/// already pending) when sample.defer_tables, otherwise applied to the pixels.
void map_values(SampleImage& sample, const ChannelTables& tables);

/// Applies and clears sample.pending_tables, if any: before a step reads the pixels.
void apply_pending_tables(SampleImage& sample);

}  // namespace conveyor

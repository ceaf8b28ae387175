#include "conveyor/ops/transforms/pixel_tables.h"

#include <algorithm>
#include <cstddef>

namespace conveyor {

ChannelTables identity_tables() {
  ChannelTables tables;
  for (auto& table : tables) {
    for (int v = 0; v < 256; ++v) table[static_cast<size_t>(v)] = static_cast<uint8_t>(v);
  }
  return tables;
}

void apply_tables(Image& image, const ChannelTables& tables) {
  const size_t n = image.pixels.size();
  uint8_t* px = image.pixels.data();
  if (image.channels == 1) {
    for (size_t i = 0; i < n; ++i) px[i] = tables[0][px[i]];
    return;
  }
  for (size_t i = 0; i + 2 < n; i += 3) {
    px[i] = tables[0][px[i]];
    px[i + 1] = tables[1][px[i + 1]];
    px[i + 2] = tables[2][px[i + 2]];
  }
}

ChannelTables value_tables(const std::function<void(Image&)>& op) {
  // Per thread: no allocation per sample once warm.
  thread_local Image values{1, 256, 1, std::vector<uint8_t>(256)};
  for (int v = 0; v < 256; ++v) values.pixels[static_cast<size_t>(v)] = static_cast<uint8_t>(v);
  op(values);
  ChannelTables tables;
  for (auto& table : tables) std::copy(values.pixels.begin(), values.pixels.end(), table.begin());
  return tables;
}

void map_values(SampleImage& sample, const ChannelTables& tables) {
  if (!sample.defer_tables) {
    apply_pending_tables(sample);
    apply_tables(sample.image, tables);
    return;
  }
  if (!sample.pending_tables) {
    sample.pending_tables = tables;
    return;
  }
  ChannelTables& pending = *sample.pending_tables;
  for (size_t c = 0; c < pending.size(); ++c) {
    for (uint8_t& v : pending[c]) v = tables[c][v];
  }
}

void apply_pending_tables(SampleImage& sample) {
  if (!sample.pending_tables) return;
  apply_tables(sample.image, *sample.pending_tables);
  sample.pending_tables.reset();
}

}  // namespace conveyor

#pragma once

// For the fuzz targets that build a TarShardSource: every accessor on every
// sample of a source that was built, reading every byte it returns.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "conveyor/core/error.h"
#include "conveyor/io/tar_shards.h"

namespace conveyor::fuzz {

inline void read_all(const Bytes& bytes) {
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < bytes.size(); ++i) sink = sink ^ bytes.data()[i];
  (void)sink;
}

/// Aborts unless every sample of `source` (at least one) reads, with a key
/// starting "<shard>:", every field reads, an absent field is an
/// Error{kRead}, and indices out of range are errors, not reads.
inline void check_every_sample(const TarShardSource& source, const std::string& shard) {
  if (source.size() <= 0) std::abort();
  for (int64_t i = 0; i < source.size(); ++i) {
    const Record record = source.read(i);
    read_all(record.data);
    if (record.key != source.key(i) || record.key.rfind(shard + ":", 0) != 0) std::abort();
    for (const std::string& name : source.fields(i)) read_all(source.field(i, name));
    try {
      source.field(i, "NO-SUCH-FIELD");  // Field names are lower-cased: never present.
      std::abort();
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kRead) std::abort();
    }
  }
  for (int64_t i : {int64_t{-1}, source.size()}) {
    try {
      source.read(i);
      std::abort();
    } catch (const Error&) {
    }
  }
}

}  // namespace conveyor::fuzz

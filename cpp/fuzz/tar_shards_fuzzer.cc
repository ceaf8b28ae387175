// libFuzzer target: the tar shard index reader (TarShardSource) on an
// arbitrary file: header walk (ustar, GNU long names, pax records, base-256
// sizes), WebDataset grouping, `cls` parsing; then every accessor on every
// sample, reading every byte of every field it returns.
//
// Contract checked: construction either succeeds or throws conveyor::Error of
// kind kRead (a bad shard) or kConfig (no samples); accessors on a valid
// index never throw except field() of an absent name; views stay inside the file.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/io/tar_shards.h"
#include "fuzz_files.h"
#include "tar_source_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = conveyor::fuzz::write_file("shard.tar", data, size);
  std::unique_ptr<conveyor::TarShardSource> source;
  try {
    source = std::make_unique<conveyor::TarShardSource>(std::vector<std::string>{path});
  } catch (const conveyor::Error& e) {
    if (e.kind() == conveyor::ErrorKind::kConfig) return 0;  // No samples in the shard.
    // Errors about the shard are kRead and name it (possibly with ":member").
    if (e.kind() != conveyor::ErrorKind::kRead || e.key().rfind(path, 0) != 0) std::abort();
    return 0;
  }
  conveyor::fuzz::check_every_sample(*source, path);
  return 0;
}

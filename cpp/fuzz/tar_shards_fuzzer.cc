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

namespace {

void read_all(const conveyor::Bytes& bytes) {
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < bytes.size(); ++i) sink = sink ^ bytes.data()[i];
  (void)sink;
}

}  // namespace

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
  if (source->size() <= 0) std::abort();
  for (int64_t i = 0; i < source->size(); ++i) {
    const conveyor::Record record = source->read(i);
    read_all(record.data);
    if (record.key != source->key(i) || record.key.rfind(path + ":", 0) != 0) std::abort();
    for (const std::string& name : source->fields(i)) read_all(source->field(i, name));
    try {
      source->field(i, "NO-SUCH-FIELD");  // Field names are lower-cased: never present.
      std::abort();
    } catch (const conveyor::Error& e) {
      if (e.kind() != conveyor::ErrorKind::kRead) std::abort();
    }
  }
  // Out-of-range indices are errors, not reads outside the index.
  for (int64_t i : {int64_t{-1}, source->size()}) {
    try {
      source->read(i);
      std::abort();
    } catch (const conveyor::Error&) {
    }
  }
  return 0;
}

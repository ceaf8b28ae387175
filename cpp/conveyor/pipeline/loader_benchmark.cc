// Scheduling overhead of the Loader: samples/s through read -> transform ->
// ordered batch with a transform that does almost nothing, so the figure is
// the executor's own cost per sample (locks, queues, hand-offs).
#include <benchmark/benchmark.h>

#include <cstring>

#include "conveyor/pipeline/loader.h"

namespace conveyor {
namespace {

class TinySource : public Source {
 public:
  explicit TinySource(int64_t n) : n_(n), bytes_(Bytes::from_vector(std::vector<uint8_t>(64, 7))) {}
  int64_t size() const override { return n_; }
  Record read(int64_t index) const override { return Record{bytes_, index % 10, {}}; }
  std::string key(int64_t index) const override { return std::to_string(index); }

 private:
  int64_t n_;
  Bytes bytes_;
};

class CopyTransform : public SampleTransform {
 public:
  SampleSpec output_spec() const override { return {{64}, DType::kUInt8}; }
  void apply(std::span<const uint8_t> input, SampleRng&, void* out) const override {
    std::memcpy(out, input.data(), input.size());
  }
};

void BM_LoaderOverhead(benchmark::State& state) {
  LoaderOptions options;
  options.batch_size = 64;
  options.threads = static_cast<int>(state.range(0));
  options.io_threads = static_cast<int>(state.range(1));
  options.prefetch = 4;
  options.shuffle = true;
  constexpr int64_t kSamples = 64 * 200;
  Loader loader(std::make_shared<TinySource>(kSamples), std::make_shared<CopyTransform>(), options);
  int64_t epoch = 0;
  for (auto _ : state) {
    loader.start_epoch(epoch++);
    while (loader.next().status == NextResult::Status::kBatch) {
    }
  }
  state.SetItemsProcessed(state.iterations() * kSamples);
}
BENCHMARK(BM_LoaderOverhead)->Args({1, 1})->Args({2, 8})->Args({2, 32})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace conveyor

BENCHMARK_MAIN();

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>

#include "bindings.h"
#include "conveyor/pipeline/loader.h"

namespace nb = nanobind;

namespace conveyor::bindings {

namespace {

nb::dlpack::dtype to_dlpack(DType dtype) {
  switch (dtype) {
    case DType::kUInt8:
      return nb::dtype<uint8_t>();
    case DType::kInt64:
      return nb::dtype<int64_t>();
    case DType::kFloat16:
      return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case DType::kFloat32:
      return nb::dtype<float>();
  }
  return nb::dtype<uint8_t>();
}

// A DLPack-capable array viewing `data`; the capsule keeps the batch (and so
// its pooled buffer) alive until the last tensor using the memory is freed.
nb::ndarray<> view(const std::shared_ptr<Batch>& batch, void* data, const std::vector<int64_t>& shape, DType dtype) {
  std::vector<size_t> dims(shape.begin(), shape.end());
  auto* holder = new std::shared_ptr<Batch>(batch);
  nb::capsule owner(holder, [](void* p) noexcept { delete static_cast<std::shared_ptr<Batch>*>(p); });
  return nb::ndarray<>(data, dims.size(), dims.data(), owner, nullptr, to_dlpack(dtype));
}

// Batch memory from two Python callables (e.g. torch's pinned allocator). They
// are called from engine threads, so each call takes the GIL.
BufferAllocator python_allocator(nb::object allocator) {
  auto pair = nb::cast<std::pair<nb::callable, nb::callable>>(allocator);
  auto functions = std::shared_ptr<std::pair<nb::callable, nb::callable>>(
      new std::pair<nb::callable, nb::callable>(std::move(pair)), [](std::pair<nb::callable, nb::callable>* p) {
        nb::gil_scoped_acquire gil;
        delete p;
      });
  return {[functions](size_t bytes) -> void* {
            nb::gil_scoped_acquire gil;
            return reinterpret_cast<void*>(nb::cast<uintptr_t>(functions->first(bytes)));
          },
          [functions](void* data, size_t bytes) {
            nb::gil_scoped_acquire gil;
            functions->second(reinterpret_cast<uintptr_t>(data), bytes);
          }};
}

// A numpy array owning `data`.
template <typename T>
nb::ndarray<nb::numpy, T> owned_array(std::vector<T> data, std::initializer_list<size_t> shape) {
  auto* owned = new std::vector<T>(std::move(data));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(owned->data(), shape.size(), shape.begin(), owner);
}

}  // namespace

void bind_pipeline(nb::module_& m) {
  nb::class_<Batch>(m, "Batch")
      .def_prop_ro("index", &Batch::index)
      .def_prop_ro("size", &Batch::size)
      .def_prop_ro("end_position", &Batch::end_position)
      .def_prop_ro("address", [](const Batch& b) { return reinterpret_cast<uintptr_t>(b.data()); })
      .def_prop_ro("shape", &Batch::shape)
      .def_static(
          "images",
          [](const std::shared_ptr<Batch>& b) { return view(b, b->data(), b->shape(), b->sample_spec().dtype); },
          nb::arg("batch"), "The samples as a DLPack array sharing the batch's memory.")
      .def_static(
          "labels",
          [](const std::shared_ptr<Batch>& b) {
            return view(b, const_cast<int64_t*>(b->labels().data()), {b->size()}, DType::kInt64);
          },
          nb::arg("batch"), "The labels as a DLPack int64 array sharing the batch's memory.")
      .def_static(
          "boxes",
          [](const std::shared_ptr<Batch>& b) {
            FlatBoxes flat = b->flat_boxes();
            const size_t samples = flat.counts.size(), total = flat.categories.size();
            return nb::make_tuple(owned_array(std::move(flat.counts), {samples}),
                                  owned_array(std::move(flat.coords), {total, 4}),
                                  owned_array(std::move(flat.categories), {total}));
          },
          nb::arg("batch"), "(counts per sample, float32 boxes K×4 xywh, int64 categories K).");

  nb::class_<SkippedSample>(m, "SkippedSample")
      .def_ro("position", &SkippedSample::position)
      .def_ro("key", &SkippedSample::key)
      .def_ro("cause", &SkippedSample::cause);

  nb::class_<Loader>(m, "Loader")
      .def(
          "__init__",
          [](Loader* self, std::shared_ptr<Source> source, std::shared_ptr<SampleTransform> transform,
             int64_t batch_size, bool shuffle, uint64_t seed, bool drop_last, int threads, int io_threads, int prefetch,
             bool skip_errors, int64_t rank, int64_t world_size, int64_t shuffle_buffer, nb::object allocator) {
            LoaderOptions options;
            options.batch_size = batch_size;
            options.shuffle = shuffle;
            options.seed = seed;
            options.drop_last = drop_last;
            options.threads = threads;
            options.io_threads = io_threads;
            options.prefetch = prefetch;
            options.on_error = skip_errors ? OnError::kSkip : OnError::kRaise;
            options.rank = rank;
            options.world_size = world_size;
            options.shuffle_buffer = shuffle_buffer;
            if (!allocator.is_none()) options.allocator = python_allocator(allocator);
            new (self) Loader(std::move(source), std::move(transform), std::move(options));
          },
          nb::arg("source"), nb::arg("transform"), nb::kw_only(), nb::arg("batch_size"), nb::arg("shuffle"),
          nb::arg("seed"), nb::arg("drop_last"), nb::arg("threads"), nb::arg("io_threads"), nb::arg("prefetch"),
          nb::arg("skip_errors"), nb::arg("rank"), nb::arg("world_size"), nb::arg("shuffle_buffer") = 0,
          nb::arg("allocator") = nb::none(),
          "allocator: optional (allocate(nbytes) -> address, deallocate(address, nbytes)) for batch memory.")
      .def_prop_ro("num_samples", &Loader::num_samples)
      .def_prop_ro("num_batches", &Loader::num_batches)
      .def_prop_ro("threads", [](const Loader& l) { return l.options().threads; })
      .def_prop_ro("io_threads", [](const Loader& l) { return l.options().io_threads; })
      .def("start_epoch", &Loader::start_epoch, nb::arg("epoch"), nb::arg("start_position") = 0,
           nb::arg("start_batch") = 0, nb::call_guard<nb::gil_scoped_release>())
      .def(
          "next",
          [](Loader& loader, double timeout_seconds) -> nb::object {
            NextResult result;
            {
              nb::gil_scoped_release release;
              result = loader.next(std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
            }
            switch (result.status) {
              case NextResult::Status::kBatch:
                return nb::cast(result.batch);
              case NextResult::Status::kEnd:
                return nb::none();
              case NextResult::Status::kTimeout:
                return nb::bool_(false);
            }
            return nb::none();
          },
          nb::arg("timeout"), "The next Batch, None at the end of the epoch, False on timeout.")
      .def("stop", &Loader::stop, nb::call_guard<nb::gil_scoped_release>())
      .def("close", &Loader::close, nb::call_guard<nb::gil_scoped_release>())
      .def("skipped", &Loader::skipped, nb::call_guard<nb::gil_scoped_release>())
      .def("stats", [](const Loader& loader) {
        LoaderStats s;
        {
          // The engine's lock may be held by a thread waiting for the GIL (a
          // Python allocator or source), so never wait for it holding the GIL.
          nb::gil_scoped_release release;
          s = loader.stats();
        }
        nb::dict d;
        d["epoch"] = s.epoch;
        d["samples_read"] = s.samples_read;
        d["samples_processed"] = s.samples_processed;
        d["batches_delivered"] = s.batches_delivered;
        d["skipped"] = s.skipped;
        d["read_seconds"] = s.read_seconds;
        d["process_seconds"] = s.process_seconds;
        d["wait_seconds"] = s.wait_seconds;
        d["wall_seconds"] = s.wall_seconds;
        d["batches_ready"] = s.batches_ready;
        d["batches_in_flight"] = s.batches_in_flight;
        d["buffers_allocated"] = s.buffers_allocated;
        d["buffers_leased"] = s.buffers_leased;
        return d;
      });
}

}  // namespace conveyor::bindings

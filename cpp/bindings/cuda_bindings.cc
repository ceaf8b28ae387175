#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "bindings.h"
#include "conveyor/cuda/cuda_libraries.h"
#include "conveyor/cuda/device_image_decoder.h"
#include "conveyor/pipeline/batch.h"

namespace nb = nanobind;

namespace conveyor::bindings {

void bind_cuda(nb::module_& m) {
  m.def(
      "load_cuda_libraries",
      [] {
        const cuda::Libraries& l = cuda::libraries();
        return nb::make_tuple(l.jpeg_library, l.nvrtc_library);
      },
      "Loads the CUDA driver, nvJPEG and NVRTC (cuda/cuda_libraries.h); returns (nvJPEG's name, NVRTC's). "
      "Raises ConfigError naming what is missing.");

  nb::class_<DeviceImageDecoder>(m, "DeviceImageDecoder")
      .def(nb::init<std::shared_ptr<const ImagePipeline>, int>(), nb::arg("pipeline"), nb::arg("device"))
      .def(
          "decode",
          [](DeviceImageDecoder& decoder, const std::shared_ptr<Batch>& batch, uintptr_t out, uintptr_t stream) {
            std::vector<std::span<const uint8_t>> records;
            records.reserve(batch->samples().size());
            for (const SampleOutput& sample : batch->samples()) {
              records.emplace_back(static_cast<const uint8_t*>(sample.buffer.data()), sample.spec.num_bytes());
            }
            nb::gil_scoped_release release;
            decoder.decode(records, out, stream);
          },
          nb::arg("batch"), nb::arg("out"), nb::arg("stream"),
          "Queues the batch's records (DevicePlanTransform) into device memory `out` on CUDA stream `stream`.")
      .def_prop_ro("backend", &DeviceImageDecoder::backend)
      .def_prop_ro("host_redone", &DeviceImageDecoder::host_redone)
      .def_prop_ro("decode_seconds", &DeviceImageDecoder::decode_seconds);
}

}  // namespace conveyor::bindings

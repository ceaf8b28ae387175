#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "bindings.h"
#include "conveyor/core/error.h"
#include "conveyor/core/rng.h"
#include "conveyor/ops/batch_mix.h"
#include "conveyor/ops/device_plan.h"
#include "conveyor/ops/image_decode.h"
#include "conveyor/ops/image_pipeline.h"
#include "conveyor/ops/raw_tensor_transform.h"
#include "python_function.h"

namespace nb = nanobind;

namespace conveyor::bindings {

namespace {

using Array = nb::ndarray<nb::numpy>;

std::span<const uint8_t> as_span(const nb::bytes& data) {
  return {reinterpret_cast<const uint8_t*>(data.c_str()), data.size()};
}

// A numpy array owning `storage` (a heap buffer of its bytes).
Array to_numpy(std::unique_ptr<uint8_t[]> storage, const std::vector<int64_t>& shape, DType dtype) {
  check_config(dtype != DType::kBFloat16,
               "numpy has no bfloat16: a single sample comes as numpy; batches of the Loader come as torch tensors");
  nb::dlpack::dtype type = nb::dtype<uint8_t>();
  if (dtype == DType::kFloat32) type = nb::dtype<float>();
  if (dtype == DType::kFloat16) type = {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
  std::vector<size_t> dims(shape.begin(), shape.end());
  uint8_t* data = storage.release();
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<uint8_t*>(p); });
  return Array(data, dims.size(), dims.data(), owner, nullptr, type);
}

Layout parse_layout(const std::string& name) {
  if (name == "CHW") return Layout::kCHW;
  if (name == "HWC") return Layout::kHWC;
  throw Error(ErrorKind::kConfig, "layout must be 'CHW' or 'HWC', got '" + name + "'");
}

// A transform as Python's Transform._spec() gives it: (name, params),
// (name, params, function) for a user function (T.Lambda), or (name, params,
// None, [children]) for a compound transform (T.RandomApply and its kin).
TransformSpec transform_spec(const nb::handle& item) {
  check_config(nb::isinstance<nb::tuple>(item), "transforms: each item must be a tuple (name, params, ...)");
  const nb::tuple spec = nb::borrow<nb::tuple>(item);
  check_config(spec.size() >= 2 && spec.size() <= 4,
               "transforms: each item must be (name, params), (name, params, function) or (name, params, None, "
               "children)");
  TransformSpec out{nb::cast<std::string>(spec[0]), nb::cast<TransformParams>(spec[1])};
  if (spec.size() >= 3 && !spec[2].is_none()) out.function = python_image_callback(nb::borrow(spec[2]), out.name);
  if (spec.size() == 4) {
    for (const nb::handle child : nb::borrow<nb::sequence>(spec[3])) out.children.push_back(transform_spec(child));
  }
  return out;
}

}  // namespace

void bind_ops(nb::module_& m) {
  m.def("registered_transforms", &registered_transform_names,
        "The names of the registered C++ transforms (what a Python Transform's `name` refers to).");
  m.def(
      "check_transform", [](const nb::tuple& spec) { make_transform_step(transform_spec(spec)); }, nb::arg("spec"),
      "Builds the transform of `spec` (as Transform._spec() gives it) and drops it: raises ConfigError naming the "
      "transform and the argument when the parameters are bad.");
  m.def(
      "transform_defaults", [](const nb::tuple& spec) { return transform_defaults(transform_spec(spec)); },
      nb::arg("spec"),
      "The defaults of the arguments the transform of `spec` (as check_transform takes it) leaves out, as its C++ "
      "factory applies them: {argument: [numbers]}. Raises ConfigError as check_transform.");
  m.def("registered_image_functions", &registered_image_function_names,
        "The names of the registered image functions (what conveyor.transforms.functional calls).");
  m.attr("DEFAULT_MAX_PIXELS") = kDefaultMaxPixels;
  nb::list image_dtypes;
  for (DType dtype : kImageDTypes) image_dtypes.append(std::string(dtype_name(dtype)));
  m.attr("IMAGE_DTYPES") = nb::tuple(image_dtypes);
  m.def(
      "apply_image_function",
      [](const std::string& name, const TransformParams& params,
         const nb::ndarray<const uint8_t, nb::ndim<3>, nb::c_contig, nb::device::cpu>& image) {
        Image out;
        {
          nb::gil_scoped_release release;
          out = apply_image_function({name, params}, image.data(), static_cast<int64_t>(image.shape(0)),
                                     static_cast<int64_t>(image.shape(1)), static_cast<int64_t>(image.shape(2)));
        }
        auto storage = std::make_unique_for_overwrite<uint8_t[]>(out.pixels.size());
        std::memcpy(storage.get(), out.pixels.data(), out.pixels.size());
        return to_numpy(std::move(storage), {out.height, out.width, out.channels}, DType::kUInt8);
      },
      nb::arg("name"), nb::arg("params"), nb::arg("image"),
      "Applies the registered image function `name` with `params` to a uint8 HWC array; returns a new array.");

  nb::class_<ImagePipeline, SampleTransform>(m, "ImagePipeline")
      .def(
          "__init__",
          [](ImagePipeline* self, const std::vector<nb::tuple>& transforms, const std::string& dtype,
             const std::string& layout, int channels, int64_t max_pixels, bool crop_decode, bool dct_scale,
             double dct_margin, std::optional<std::array<int64_t, 3>> raw_shape, bool variable_size, bool stream_output,
             bool exif_orientation) {
            ImageOutputSpec output{parse_dtype(dtype), parse_layout(layout), channels};
            std::vector<TransformSpec> specs;
            for (const nb::tuple& item : transforms) specs.push_back(transform_spec(item));
            ImagePipelineOptions options;
            options.crop_decode = crop_decode;
            options.dct_scale = dct_scale;
            options.dct_margin = dct_margin;
            options.variable_size = variable_size;
            options.stream_output = stream_output;
            options.exif_orientation = exif_orientation;
            if (raw_shape) options.raw_input = raw_image_shape((*raw_shape)[0], (*raw_shape)[1], (*raw_shape)[2]);
            new (self) ImagePipeline(std::move(specs), output, max_pixels, options);
          },
          nb::arg("transforms"), nb::kw_only(), nb::arg("dtype") = "float32", nb::arg("layout") = "CHW",
          nb::arg("channels") = 3, nb::arg("max_pixels") = kDefaultMaxPixels, nb::arg("crop_decode") = true,
          nb::arg("dct_scale") = true, nb::arg("dct_margin") = ImagePipelineOptions{}.dct_margin,
          nb::arg("raw_shape") = nb::none(), nb::arg("variable_size") = false, nb::arg("stream_output") = false,
          nb::arg("exif_orientation") = ImagePipelineOptions{}.exif_orientation,
          "raw_shape: (height, width, channels) when inputs are raw uint8 pixels of that shape, not encoded images; "
          "stream_output: write float32 CHW outputs with streaming stores (for outputs not read again soon).")
      .def(
          "apply",
          [](const ImagePipeline& pipeline, const nb::bytes& data, uint64_t seed, uint64_t epoch, uint64_t index) {
            SampleSpec spec;
            std::unique_ptr<uint8_t[]> storage;
            {
              nb::gil_scoped_release release;
              SampleRng rng(seed, epoch, index);
              // Fixed or per-sample size: the output's spec is known once the sample's steps ran.
              pipeline.apply_variable(
                  as_span(data), rng,
                  [&](const SampleSpec& s) -> void* {
                    spec = s;
                    storage = std::make_unique_for_overwrite<uint8_t[]>(s.num_bytes());
                    return storage.get();
                  },
                  nullptr);
            }
            return to_numpy(std::move(storage), spec.shape, spec.dtype);
          },
          nb::arg("data"), nb::arg("seed") = 0, nb::arg("epoch") = 0, nb::arg("index") = 0,
          "Runs the pipeline on one encoded image with the random stream of (seed, epoch, index).");

  m.def(
      "decode_image",
      [](const nb::bytes& data, int64_t max_pixels, int channels) {
        Image image;
        {
          nb::gil_scoped_release release;
          image = decode_image(as_span(data), channels, max_pixels);
        }
        auto storage = std::make_unique_for_overwrite<uint8_t[]>(image.pixels.size());
        std::memcpy(storage.get(), image.pixels.data(), image.pixels.size());
        return to_numpy(std::move(storage), {image.height, image.width, image.channels}, DType::kUInt8);
      },
      nb::arg("data"), nb::arg("max_pixels") = kDefaultMaxPixels, nb::arg("channels") = 3,
      "Decodes a whole JPEG/PNG/WebP/TIFF/BMP/PNM/GIF image to a uint8 HWC array (EXIF orientation applied).");
  m.def(
      "raw_image_shape",
      [](int64_t height, int64_t width, int64_t channels) {
        const RawImageShape shape = raw_image_shape(height, width, channels);
        return std::make_tuple(shape.height, shape.width, shape.channels);
      },
      nb::arg("height"), nb::arg("width"), nb::arg("channels"),
      "(height, width, channels) of raw uint8 image samples as the pipeline takes them; ConfigError naming them "
      "when a side is not in [1, 2**31 - 1] or channels is not 1 or 3.");
  m.def(
      "read_image_info",
      [](const nb::bytes& data, int64_t max_pixels) {
        const ImageInfo info = read_image_info(as_span(data), max_pixels);
        return nb::make_tuple(std::string(image_format_name(info.format)), info.height, info.width, info.orientation);
      },
      nb::arg("data"), nb::arg("max_pixels") = kDefaultMaxPixels,
      "(format, height, width, exif_orientation) from the header; height/width as displayed.");
  m.def(
      "sample_random_resized_crop",
      [](int height, int width, std::array<double, 2> scale, std::array<double, 2> ratio, uint64_t seed, uint64_t epoch,
         uint64_t index) {
        SampleRng rng(seed, epoch, index);
        const CropBox box = sample_random_resized_crop(height, width, scale, ratio, rng);
        return std::make_tuple(box.top, box.left, box.height, box.width);
      },
      nb::arg("height"), nb::arg("width"), nb::arg("scale"), nb::arg("ratio"), nb::arg("seed"), nb::arg("epoch"),
      nb::arg("index"), "The RandomResizedCrop box (top, left, height, width) drawn from (seed, epoch, index).");

  nb::class_<DevicePlanTransform, SampleTransform>(m, "DevicePlanTransform")
      .def(nb::init<std::shared_ptr<const ImagePipeline>>(), nb::arg("pipeline"))
      .def_prop_ro("device_samples", &DevicePlanTransform::device_samples)
      .def_prop_ro("host_samples", &DevicePlanTransform::host_samples)
      .def_static(
          "jpeg_unsupported",
          [](nb::bytes data) {
            return device_jpeg_unsupported({reinterpret_cast<const uint8_t*>(data.c_str()), data.size()});
          },
          nb::arg("data"), "Why the device cannot decode this JPEG, or \"\" (ops/device_plan.h).");

  nb::class_<TensorCopyTransform, SampleTransform>(m, "TensorCopyTransform")
      .def(
          "__init__",
          [](TensorCopyTransform* self, std::vector<int64_t> shape, const std::string& dtype) {
            new (self) TensorCopyTransform(SampleSpec{std::move(shape), parse_dtype(dtype)});
          },
          nb::arg("shape"), nb::arg("dtype"),
          "Copies each sample's bytes as they are into a tensor of shape and dtype.");
  nb::enum_<MixKind>(m, "MixKind", "conveyor::MixKind (ops/batch_mix.h).")
      .value("MIXUP", MixKind::kMixUp)
      .value("CUTMIX", MixKind::kCutMix);
  nb::class_<MixOption>(m, "MixOption", "conveyor::MixOption (ops/batch_mix.h).")
      .def(
          "__init__",
          [](MixOption* self, MixKind kind, double alpha) {
            new (self) MixOption{kind, alpha};
          },
          nb::arg("kind"), nb::arg("alpha"))
      .def_rw("kind", &MixOption::kind)
      .def_rw("alpha", &MixOption::alpha);
  nb::class_<BatchMixSpec>(m, "BatchMixSpec", "conveyor::BatchMixSpec (ops/batch_mix.h).")
      .def(nb::init<>())
      .def_rw("options", &BatchMixSpec::options)
      .def_rw("p", &BatchMixSpec::p)
      .def_rw("num_classes", &BatchMixSpec::num_classes)
      .def_rw("channels_last", &BatchMixSpec::channels_last);
  m.def("check_batch_mix_arguments", &check_batch_mix_arguments, nb::arg("spec"), nb::arg("num_classes_known"),
        "Raises ConfigError naming the transform and argument when a batch mix's own arguments break its rules "
        "(alpha, RandomChoice's p, num_classes when known).");
  m.def(
      "sample_batch_mix",
      [](const BatchMixSpec& spec, int64_t height, int64_t width, uint64_t seed, uint64_t epoch, uint64_t batch) {
        check_config(height >= 1 && width >= 1, "height and width must be >= 1");
        SampleRng rng = batch_mix_rng(seed, epoch, batch);
        const BatchMixParams p = sample_batch_mix(spec, height, width, rng);
        return nb::make_tuple(std::string(mix_kind_name(p.kind)), p.lambda, p.center_x, p.center_y, p.x1, p.y1, p.x2,
                              p.y2, p.label_lambda);
      },
      nb::arg("spec"), nb::arg("height"), nb::arg("width"), nb::arg("seed"), nb::arg("epoch"), nb::arg("batch"),
      "The batch mix the loader draws for batch `batch` of `epoch`: (kind, lambda, center_x, center_y, x1, y1, x2, "
      "y2, label_lambda).");
  m.def(
      "sample_beta",
      [](double a, double b, int64_t count, uint64_t seed, uint64_t epoch, uint64_t stream) {
        check_config(a > 0 && b > 0 && std::isfinite(a) && std::isfinite(b), "a and b must be finite and > 0");
        check_config(count >= 0, "count must be >= 0");
        auto storage = std::make_unique_for_overwrite<uint8_t[]>(static_cast<size_t>(count) * sizeof(double));
        {
          nb::gil_scoped_release release;
          SampleRng rng(seed, epoch, stream);
          auto* out = reinterpret_cast<double*>(storage.get());
          for (int64_t i = 0; i < count; ++i) out[i] = sample_beta(a, b, rng);
        }
        std::vector<size_t> dims{static_cast<size_t>(count)};
        uint8_t* data = storage.release();
        nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<uint8_t*>(p); });
        return Array(data, dims.size(), dims.data(), owner, nullptr, nb::dtype<double>());
      },
      nb::arg("a"), nb::arg("b"), nb::arg("count"), nb::arg("seed") = 0, nb::arg("epoch") = 0, nb::arg("stream") = 0,
      "`count` Beta(a, b) draws of the engine's sampler (conveyor::sample_beta) from one random stream.");

  // The transform of raw-pixel sources (IDX).
  nb::class_<RawTensorTransform, SampleTransform>(m, "RawTensorTransform")
      .def(
          "__init__",
          [](RawTensorTransform* self, int64_t height, int64_t width, int64_t channels, const std::string& dtype,
             bool channels_first, std::vector<float> mean, std::vector<float> std) {
            RawTensorSpec spec;
            spec.height = height;
            spec.width = width;
            spec.channels = channels;
            spec.dtype = parse_dtype(dtype);
            spec.channels_first = channels_first;
            spec.mean = std::move(mean);
            spec.std = std::move(std);
            new (self) RawTensorTransform(std::move(spec));
          },
          nb::arg("height"), nb::arg("width"), nb::kw_only(), nb::arg("channels") = 1, nb::arg("dtype") = "uint8",
          nb::arg("channels_first") = true, nb::arg("mean") = std::vector<float>{},
          nb::arg("std") = std::vector<float>{});
}

}  // namespace conveyor::bindings

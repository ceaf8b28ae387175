// Per-core throughput of the image kernels (images/s = items_per_second).
//
//   build/dev/image_pipeline_benchmark [--benchmark_min_time=2s]
//
// Input: 200 JPEGs generated at start-up (textured synthetic images, short
// side 200-500 px, ImageNet-like aspect ratios, quality 90, 4:2:0), or every
// .jpg/.jpeg file of the folder named by CONVEYOR_BENCH_IMAGES. All files are
// in memory: this measures decode + transforms only, on one thread.
#include <benchmark/benchmark.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "conveyor/ops/float_output.h"
#include "conveyor/ops/image_decode.h"
#include "conveyor/ops/image_pipeline.h"
#include "conveyor/ops/resize.h"
#include "conveyor/ops/transforms/blur.h"
#include "conveyor/ops/transforms/color.h"
#include "conveyor/ops/transforms/histogram.h"
#include "conveyor/ops/transforms/policies.h"

namespace conveyor {
namespace {

using Bytes = std::vector<uint8_t>;

// Photo-like content: smooth gradients, a few hard edges, mid-frequency waves
// and sensor-like noise, so entropy decoding and resampling do real work.
Bytes synthetic_jpeg(int height, int width, std::mt19937& gen) {
  std::vector<uint8_t> rgb(static_cast<size_t>(height) * width * 3);
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<double> noise(0, 6);
  const double fx = 0.02 + 0.2 * u(gen), fy = 0.02 + 0.2 * u(gen), edge = width * u(gen);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < 3; ++c) {
        double v = 90 + 60.0 * x / width + 40.0 * y / height * (c + 1) / 2;
        v += 35 * std::sin(fx * x * (1 + 0.3 * c) + fy * y) * std::cos(0.013 * x * y / (1 + y));
        v += (x + 0.5 * y > edge ? 40 : -20) + noise(gen);
        rgb[(static_cast<size_t>(y) * width + x) * 3 + c] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
    }
  }
  tjhandle handle = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  if (tjCompress2(handle, rgb.data(), width, 0, height, TJPF_RGB, &out, &size, TJSAMP_420, 90, 0) != 0) {
    throw std::runtime_error(tjGetErrorStr2(handle));
  }
  Bytes bytes(out, out + size);
  tjFree(out);
  tjDestroy(handle);
  return bytes;
}

const std::vector<Bytes>& images() {
  static const std::vector<Bytes> files = [] {
    std::vector<Bytes> result;
    if (const char* dir = std::getenv("CONVEYOR_BENCH_IMAGES")) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
        std::string ext = entry.path().extension().string();
        std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
        if (ext != ".jpg" && ext != ".jpeg") continue;
        std::ifstream in(entry.path(), std::ios::binary);
        result.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      }
      if (result.empty()) throw std::runtime_error(std::string("no JPEG files in ") + dir);
      return result;
    }
    std::mt19937 gen(2024);
    std::uniform_int_distribution<int> short_side(200, 500);
    const double aspects[] = {4.0 / 3.0, 3.0 / 2.0, 1.0, 3.0 / 4.0, 2.0 / 3.0};
    for (int i = 0; i < 200; ++i) {
      const int s = short_side(gen);
      const double a = aspects[i % 5];
      const int h = a >= 1 ? s : static_cast<int>(s / a), w = a >= 1 ? static_cast<int>(s * a) : s;
      result.push_back(synthetic_jpeg(h, w, gen));
    }
    return result;
  }();
  return files;
}

void BM_TurboJpegFullDecode(benchmark::State& state) {
  const auto& files = images();
  tjhandle handle = tjInitDecompress();
  std::vector<uint8_t> out;
  size_t i = 0;
  for (auto _ : state) {
    const Bytes& f = files[i++ % files.size()];
    int w = 0, h = 0, subsamp = 0, colorspace = 0;
    tjDecompressHeader3(handle, f.data(), f.size(), &w, &h, &subsamp, &colorspace);
    out.resize(static_cast<size_t>(w) * h * 3);
    tjDecompress2(handle, f.data(), f.size(), out.data(), w, 0, h, TJPF_RGB, 0);
    benchmark::DoNotOptimize(out.data());
  }
  tjDestroy(handle);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TurboJpegFullDecode);

void BM_DecodeImage(benchmark::State& state) {
  const auto& files = images();
  size_t i = 0;
  for (auto _ : state) {
    const Bytes& f = files[i++ % files.size()];
    Image image = decode_image({f.data(), f.size()});
    benchmark::DoNotOptimize(image.pixels.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecodeImage);

// Each image into the same output (slots = 1: it stays in cache), or into
// the next of `slots` outputs in turn, as the loader fills the samples of a
// batch buffer (64 slots: 38.5 MB for the train chain, out of cache).
void run_pipeline(benchmark::State& state, const ImagePipeline& pipeline, size_t slots = 1) {
  const auto& files = images();
  const size_t bytes = pipeline.output_spec().num_bytes();
  std::vector<uint8_t> out(bytes * slots);
  uint64_t i = 0;
  for (auto _ : state) {
    const Bytes& f = files[i % files.size()];
    uint8_t* slot = out.data() + (i % slots) * bytes;
    SampleRng rng(0, 0, i++);
    pipeline.apply({f.data(), f.size()}, rng, slot);
    benchmark::DoNotOptimize(slot);
  }
  state.SetItemsProcessed(state.iterations());
}

const NormalizeSpec kImageNet{{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};

void BM_TrainChain(benchmark::State& state) {
  // RandomResizedCrop(224) + RandomHorizontalFlip + Normalize -> float32 CHW.
  ImagePipelineOptions options;
  options.crop_decode = state.range(0) != 0;
  options.dct_scale = state.range(0) != 0;
  const ImagePipeline p({RandomResizedCropSpec{{224, 224}}, HorizontalFlipSpec{0.5}, kImageNet}, {}, kDefaultMaxPixels,
                        options);
  run_pipeline(state, p);
}
BENCHMARK(BM_TrainChain)->ArgName("crop_decode")->Arg(1)->Arg(0);

void BM_TrainChainIntoBatch(benchmark::State& state) {
  // BM_TrainChain/crop_decode:1 writing each image into the next sample slot
  // of a batch of 64, as the loader does, with (stream:1, the loader's
  // setting) or without streaming stores.
  ImagePipelineOptions options;
  options.stream_output = state.range(0) != 0;
  const ImagePipeline p({RandomResizedCropSpec{{224, 224}}, HorizontalFlipSpec{0.5}, kImageNet}, {}, kDefaultMaxPixels,
                        options);
  run_pipeline(state, p, 64);
}
BENCHMARK(BM_TrainChainIntoBatch)->ArgName("stream")->Arg(1)->Arg(0);

void BM_TrainChainColorJitter(benchmark::State& state) {
  // The train chain with ColorJitter(0.4, 0.4, 0.4, 0.1) (state.range(0) = 1)
  // or with GaussianBlur(23) (2) after the crop.
  const TransformSpec jitter{
      "color_jitter",
      {{"brightness", {0.6, 1.4}}, {"contrast", {0.6, 1.4}}, {"saturation", {0.6, 1.4}}, {"hue", {-0.1, 0.1}}}};
  const TransformSpec blur{"gaussian_blur", {{"kernel_size", {23}}, {"sigma", {0.1, 2.0}}}};
  const ImagePipeline p(
      {RandomResizedCropSpec{{224, 224}}, HorizontalFlipSpec{0.5}, state.range(0) == 1 ? jitter : blur, kImageNet}, {});
  run_pipeline(state, p);
}
BENCHMARK(BM_TrainChainColorJitter)->ArgName("jitter1_blur2")->Arg(1)->Arg(2);

void BM_TrainChainTrivialAugment(benchmark::State& state) {
  // torchvision's ImageNet recipe: RandomResizedCrop(224) +
  // RandomHorizontalFlip + TrivialAugmentWide + Normalize, then (erasing:1)
  // RandomErasing(0.1) (compare BM_TrainChain/crop_decode:1).
  std::vector<TransformSpec> chain{RandomResizedCropSpec{{224, 224}}, HorizontalFlipSpec{0.5},
                                   TransformSpec{"trivial_augment_wide", {}}, kImageNet};
  if (state.range(0) != 0) chain.push_back(TransformSpec{"random_erasing", {{"p", {0.1}}}});
  const ImagePipeline p(chain, {});
  run_pipeline(state, p);
}
BENCHMARK(BM_TrainChainTrivialAugment)->ArgName("erasing")->Arg(0)->Arg(1);

void BM_TrainChainErasing(benchmark::State& state) {
  // The train chain with RandomErasing(p) after Normalize, p = state.range(0) / 10
  // (torchvision's ImageNet recipe uses 0.1; 10: every image).
  const TransformSpec erasing{"random_erasing", {{"p", {static_cast<double>(state.range(0)) / 10}}}};
  const ImagePipeline p({RandomResizedCropSpec{{224, 224}}, HorizontalFlipSpec{0.5}, kImageNet, erasing}, {});
  run_pipeline(state, p);
}
BENCHMARK(BM_TrainChainErasing)->ArgName("p_tenths")->Arg(1)->Arg(10);

void BM_TrainChainUint8(benchmark::State& state) {
  // The same geometry, uint8 CHW output (normalize on the GPU).
  const ImagePipeline p({RandomResizedCropSpec{{224, 224}}, HorizontalFlipSpec{0.5}}, {DType::kUInt8});
  run_pipeline(state, p);
}
BENCHMARK(BM_TrainChainUint8);

void BM_EvalChain(benchmark::State& state) {
  // Resize(256) + CenterCrop(224) + Normalize -> float32 CHW.
  const ImagePipeline p({ResizeSpec{256}, CenterCropSpec{{224, 224}}, kImageNet}, {});
  run_pipeline(state, p);
}
BENCHMARK(BM_EvalChain);

// --- the resize alone: a side-by-side source box to 224 x 224 RGB ----------
// state.range(0): the box's side in tenths of the output side (13: a 291-pixel
// box, tent prefilter + bilinear; 8: an upscale), state.range(1): 1 for a
// fractional box origin (the eval chain's), 0 for whole pixels (a crop).
void BM_Resize224(benchmark::State& state) {
  const int side = static_cast<int>(224 * state.range(0) / 10) + 8;
  std::mt19937 gen(7);
  std::vector<uint8_t> pixels(static_cast<size_t>(side) * side * 3);
  for (auto& v : pixels) v = static_cast<uint8_t>(gen());
  const ImageView src{pixels.data(), side, side, 3, static_cast<ptrdiff_t>(side) * 3};
  const bool fractional = state.range(1) != 0;
  const double extent = fractional ? 224.0 * static_cast<double>(state.range(0)) / 10 : side - 8;
  const double o = fractional ? 2.37 : 2;
  const BoxF box{o, o, o + extent, o + extent};
  std::vector<uint8_t> out(224 * 224 * 3), scratch;
  for (auto _ : state) {
    resize_image(src, box, out.data(), 224, 224, 224 * 3, Resampling{}, scratch);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Resize224)
    ->ArgNames({"box_tenths", "fractional"})
    ->Args({8, 0})
    ->Args({13, 0})
    ->Args({13, 1})
    ->Args({19, 1});

// --- colour kernels: per-image cost on a 224 x 224 RGB image ---------------
// The image is the first input resized to 224 x 224; each iteration restores
// it (a 150 kB copy, the "copy only" row) and runs one kernel in place, as the
// pipeline's image steps do.
const Image& image_224() {
  static const Image image = [] {
    const ImagePipeline p({ResizeSpec{0, {224, 224}}}, {DType::kUInt8, Layout::kHWC});
    Image out{224, 224, 3, std::vector<uint8_t>(224 * 224 * 3)};
    const Bytes& f = images().front();
    SampleRng rng(0, 0, 0);
    p.apply({f.data(), f.size()}, rng, out.pixels.data());
    return out;
  }();
  return image;
}

// --- the output pass alone: a 224 x 224 RGB image to float32 CHW with
// ImageNet's Normalize, through the tables (arithmetic:0) or as
// NormalizeArithmetic (1), into one output (slots:1, in cache) or the next
// of 64 with streaming stores, as into a batch.
void BM_OutputPass(benchmark::State& state) {
  const Image& image = image_224();
  const ImageView view{image.pixels.data(), image.height, image.width, 3, static_cast<ptrdiff_t>(image.width) * 3};
  std::vector<float> tables;
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v)
      tables.push_back((static_cast<float>(v) / 255.0f - kImageNet.mean[c]) / kImageNet.std[c]);
  }
  const auto arithmetic = NormalizeArithmetic::make(3, kImageNet.mean.data(), kImageNet.std.data());
  if (state.range(0) != 0 && !arithmetic) {
    state.SkipWithError("NormalizeArithmetic is not available here");
    return;
  }
  const size_t slots = static_cast<size_t>(state.range(1)), floats = image.pixels.size();
  // 64-byte aligned, as the loader's batch buffers.
  std::vector<float> out(floats * slots + 16);
  float* first = out.data() + (16 - reinterpret_cast<uintptr_t>(out.data()) / sizeof(float) % 16) % 16;
  uint64_t i = 0;
  for (auto _ : state) {
    float* slot = first + (i % slots) * floats;
    const bool flip = (i++ & 1) != 0;
    if (state.range(0) != 0) {
      arithmetic->write_chw(view, flip, slot, slots > 1);
    } else {
      write_chw_float(view, flip, tables.data(), slot, slots > 1);
    }
    benchmark::DoNotOptimize(slot);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_OutputPass)->ArgNames({"arithmetic", "slots"})->Args({0, 1})->Args({1, 1})->Args({0, 64})->Args({1, 64});

using ColorKernel = void (*)(SampleImage&);

void run_color_kernel(benchmark::State& state, ColorKernel kernel) {
  const Image& source = image_224();
  SampleImage sample{source, {}, nullptr};
  sample.spare.reserve(source.pixels.size());
  for (auto _ : state) {
    sample.image.pixels.assign(source.pixels.begin(), source.pixels.end());
    sample.image.channels = source.channels;
    kernel(sample);
    benchmark::DoNotOptimize(sample.image.pixels.data());
  }
  state.SetItemsProcessed(state.iterations());
}

const bool kColorBenchmarks = [] {
  const std::pair<const char*, ColorKernel> kernels[] = {
      {"copy_only", [](SampleImage&) {}},
      {"adjust_brightness", [](SampleImage& s) { adjust_brightness(s.image, 1.3); }},
      {"adjust_contrast", [](SampleImage& s) { adjust_contrast(s.image, 1.3); }},
      {"adjust_saturation", [](SampleImage& s) { adjust_saturation(s.image, 1.3); }},
      {"adjust_hue", [](SampleImage& s) { adjust_hue(s.image, 0.1); }},
      {"rgb_to_grayscale_3", [](SampleImage& s) { rgb_to_grayscale(s, 3); }},
      {"invert", [](SampleImage& s) { invert(s.image); }},
      {"posterize", [](SampleImage& s) { posterize(s.image, 4); }},
      {"solarize", [](SampleImage& s) { solarize(s.image, 128); }},
      {"gaussian_blur_k23",
       [](SampleImage& s) {
         gaussian_blur(s, {23, 23}, {1.5, 1.5});
       }},
      {"gaussian_blur_k5",
       [](SampleImage& s) {
         gaussian_blur(s, {5, 5}, {1.0, 1.0});
       }},
      {"adjust_sharpness", [](SampleImage& s) { adjust_sharpness(s, 2.0); }},
      {"autocontrast", [](SampleImage& s) { autocontrast(s.image); }},
      {"equalize", [](SampleImage& s) { equalize(s.image); }},
      // TrivialAugmentWide's geometric ops (nearest, as its default), mid-range magnitudes.
      {"shear_x_0.5_nearest",
       [](SampleImage& s) { apply_augment_op(s, AugmentOp::kShearX, 0.5, Interpolation::kNearest, FillArg{}); }},
      {"translate_x_16_nearest",
       [](SampleImage& s) { apply_augment_op(s, AugmentOp::kTranslateX, 16, Interpolation::kNearest, FillArg{}); }},
      {"rotate_30_nearest",
       [](SampleImage& s) { apply_augment_op(s, AugmentOp::kRotate, 30, Interpolation::kNearest, FillArg{}); }},
      {"color_jitter_0.4_0.4_0.4_0.1",
       [](SampleImage& s) {
         ColorJitterParams params;
         params.brightness = 1.2, params.contrast = 0.8, params.saturation = 1.3, params.hue = 0.05;
         apply_color_jitter(s.image, params);
       }},
  };
  for (const auto& [name, kernel] : kernels) {
    benchmark::RegisterBenchmark((std::string("BM_Color224/") + name).c_str(),
                                 [kernel](benchmark::State& state) { run_color_kernel(state, kernel); });
  }
  return true;
}();

}  // namespace
}  // namespace conveyor

BENCHMARK_MAIN();

#include "conveyor/cuda/device_image_decoder.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "conveyor/core/error.h"
#include "conveyor/cuda/cuda_libraries.h"
#include "conveyor/ops/device_plan.h"

namespace conveyor {

namespace {

using cuda::check_driver;
using cuda::check_jpeg;

constexpr size_t kAlignment = 256;
size_t aligned(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// Makes the device's primary context current for a scope (torch uses the
// same context, so memory and streams are shared with it).
class CurrentContext {
 public:
  explicit CurrentContext(void* context) {
    check_driver(cuda::libraries().cuCtxPushCurrent(context), "cuCtxPushCurrent");
  }
  ~CurrentContext() {
    void* popped = nullptr;
    cuda::libraries().cuCtxPopCurrent(&popped);
  }
  CurrentContext(const CurrentContext&) = delete;
  CurrentContext& operator=(const CurrentContext&) = delete;
};

// Device memory that grows; released by its owner (Device, with its
// context current).
struct DeviceBuffer {
  cuda::DevicePointer address = 0;
  size_t capacity = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // At least `bytes`; when it must grow, waits for `stream` first (its
  // queued work may still read the old memory).
  cuda::DevicePointer reserve(size_t bytes, cuda::Stream stream) {
    if (bytes <= capacity) return address;
    const cuda::Libraries& l = cuda::libraries();
    if (address != 0) {
      check_driver(l.cuStreamSynchronize(stream), "cuStreamSynchronize");
    }
    const size_t grown = std::max(bytes, capacity + capacity / 2);
    release();
    check_driver(l.cuMemAlloc(&address, grown), "cuMemAlloc");
    capacity = grown;
    return address;
  }
  void release() noexcept {
    if (address != 0) cuda::libraries().cuMemFree(address);
    address = 0;
    capacity = 0;
  }
};

}  // namespace

struct DeviceImageDecoder::Device {
  int ordinal = 0;
  void* context = nullptr;
  void* module = nullptr;
  void* kernel = nullptr;
  void* jpeg = nullptr;
  void* jpeg_state = nullptr;
  int initialized_batch = -1;               // The batch size nvJPEG's batched decoder is set up for.
  std::optional<cuda::Stream> last_stream;  // The stream of the last decode.
  DeviceBuffer tables, samples, decoded;
  std::vector<DeviceSample> host_samples;
  std::vector<const unsigned char*> jpeg_data;
  std::vector<size_t> jpeg_sizes;
  std::vector<cuda::JpegImage> jpeg_images;
  std::vector<size_t> jpeg_slots;  // The batch position of each JPEG decoded.
  std::vector<uint8_t> redone;     // Host outputs of a batch nvJPEG refused.

  ~Device() {
    if (context == nullptr) return;  // Made before the libraries loaded, or the context failed.
    const cuda::Libraries& l = cuda::libraries();
    // Nothing here throws (a destructor): failures leave the memory to the
    // context's end.
    if (l.cuCtxPushCurrent(context) == 0) {
      tables.release();
      samples.release();
      decoded.release();
      if (jpeg_state != nullptr) l.nvjpegJpegStateDestroy(jpeg_state);
      if (jpeg != nullptr) l.nvjpegDestroy(jpeg);
      if (module != nullptr) l.cuModuleUnload(module);
      void* popped = nullptr;
      l.cuCtxPopCurrent(&popped);
    }
    l.cuDevicePrimaryCtxRelease(ordinal);
  }
};

namespace {

// The kernel's cubin for compute capability major.minor, compiled by NVRTC.
std::vector<char> compile_kernel(int major, int minor) {
  const cuda::Libraries& l = cuda::libraries();
  void* program = nullptr;
  const auto check = [&](cuda::Result result, const char* what) {
    if (result != 0) throw Error(ErrorKind::kInternal, std::string(what) + ": " + l.nvrtcGetErrorString(result));
  };
  check(l.nvrtcCreateProgram(&program, kDeviceResampleSource, "conveyor_resample.cu", 0, nullptr, nullptr),
        "nvrtcCreateProgram");
  struct Destroy {
    void*& program;
    ~Destroy() { cuda::libraries().nvrtcDestroyProgram(&program); }
  } destroy{program};
  const std::string arch = "--gpu-architecture=sm_" + std::to_string(major) + std::to_string(minor);
  const char* options[] = {arch.c_str(), "-default-device", "--std=c++17"};
  const cuda::Result compiled = l.nvrtcCompileProgram(program, 3, options);
  if (compiled != 0) {
    size_t size = 0;
    l.nvrtcGetProgramLogSize(program, &size);
    std::string log(size, '\0');
    l.nvrtcGetProgramLog(program, log.data());
    throw Error(ErrorKind::kInternal, "compiling the resample kernel for sm_" + std::to_string(major) +
                                          std::to_string(minor) + " (NVRTC): " + l.nvrtcGetErrorString(compiled) +
                                          "\n" + log);
  }
  size_t size = 0;
  check(l.nvrtcGetCUBINSize(program, &size), "nvrtcGetCUBINSize");
  std::vector<char> cubin(size);
  check(l.nvrtcGetCUBIN(program, cubin.data()), "nvrtcGetCUBIN");
  return cubin;
}

}  // namespace

DeviceImageDecoder::DeviceImageDecoder(std::shared_ptr<const ImagePipeline> pipeline, int device)
    : pipeline_(std::move(pipeline)), device_(std::make_unique<Device>()) {
  check_config(pipeline_ != nullptr, "DeviceImageDecoder: no pipeline");
  check_config(pipeline_->device_unsupported().empty(),
               "decoding on the GPU: " + pipeline_->device_unsupported() + " (only on the CPU)");
  const cuda::Libraries& l = cuda::libraries();
  Device& d = *device_;
  check_driver(l.cuInit(0), "cuInit");
  int handle = 0;
  check_driver(l.cuDeviceGet(&handle, device), ("cuDeviceGet(" + std::to_string(device) + ")").c_str());
  d.ordinal = handle;
  check_driver(l.cuDevicePrimaryCtxRetain(&d.context, handle), "cuDevicePrimaryCtxRetain");
  CurrentContext current(d.context);
  int major = 0, minor = 0;
  check_driver(l.cuDeviceGetAttribute(&major, cuda::kAttributeComputeMajor, handle), "cuDeviceGetAttribute");
  check_driver(l.cuDeviceGetAttribute(&minor, cuda::kAttributeComputeMinor, handle), "cuDeviceGetAttribute");
  const std::vector<char> cubin = compile_kernel(major, minor);
  check_driver(l.cuModuleLoadData(&d.module, cubin.data()), "cuModuleLoadData");
  check_driver(l.cuModuleGetFunction(&d.kernel, d.module, "conveyor_resample_batch"), "cuModuleGetFunction");

  // The hardware engines where the GPU has them (A100, H100...), else the
  // GPU-assisted Huffman decoder, else nvJPEG's default.
  if (l.nvjpegCreateEx(cuda::kJpegBackendHardware, nullptr, nullptr, 0, &d.jpeg) == 0) {
    unsigned engines = 0, cores = 0;
    if (l.nvjpegGetHardwareDecoderInfo != nullptr) l.nvjpegGetHardwareDecoderInfo(d.jpeg, &engines, &cores);
    backend_ = "hardware (" + std::to_string(engines) + " engines)";
  } else if (l.nvjpegCreateEx(cuda::kJpegBackendGpuHybrid, nullptr, nullptr, 0, &d.jpeg) == 0) {
    backend_ = "GPU hybrid";
  } else {
    check_jpeg(l.nvjpegCreateEx(cuda::kJpegBackendDefault, nullptr, nullptr, 0, &d.jpeg), "nvjpegCreateEx");
    backend_ = "default";
  }
  check_jpeg(l.nvjpegJpegStateCreate(d.jpeg, &d.jpeg_state), "nvjpegJpegStateCreate");

  const std::vector<uint8_t> tables = pipeline_->output_tables();
  d.tables.reserve(tables.size(), nullptr);
  check_driver(l.cuMemcpyHtoDAsync(d.tables.address, tables.data(), tables.size(), nullptr), "cuMemcpyHtoDAsync");
  check_driver(l.cuStreamSynchronize(nullptr), "cuStreamSynchronize");
}

DeviceImageDecoder::~DeviceImageDecoder() = default;

void DeviceImageDecoder::decode(std::span<const std::span<const uint8_t>> records, uintptr_t out,
                                uintptr_t stream_address) {
  const cuda::Libraries& l = cuda::libraries();
  Device& d = *device_;
  auto* stream = reinterpret_cast<cuda::Stream>(stream_address);
  const ImagePipeline& pipeline = *pipeline_;
  const SampleSpec spec = pipeline.output_spec();
  const size_t sample_bytes = spec.num_bytes();
  const bool chw = pipeline.output().layout == Layout::kCHW;
  const int out_h = static_cast<int>(chw ? spec.shape[1] : spec.shape[0]);
  const int out_w = static_cast<int>(chw ? spec.shape[2] : spec.shape[1]);
  // One grid row per sample: CUDA allows 65535.
  check_config(records.size() <= 65535,
               "decoding on the GPU: batches of at most 65535 samples, got " + std::to_string(records.size()));
  const int count = static_cast<int>(records.size());
  if (count == 0) return;
  const std::lock_guard lock(mutex_);
  struct Timed {
    std::atomic<double>& seconds;
    std::chrono::steady_clock::time_point began = std::chrono::steady_clock::now();
    ~Timed() {
      const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      seconds.store(seconds.load(std::memory_order_relaxed) + spent, std::memory_order_relaxed);  // Under the lock.
    }
  } timed{decode_seconds_};
  CurrentContext current(d.context);
  // The device buffers are reused by each call, in the order of its stream:
  // work of another stream must be finished first (a side pass decodes on
  // the consumer's stream).
  if (d.last_stream.has_value() && *d.last_stream != stream) {
    check_driver(l.cuStreamSynchronize(*d.last_stream), "cuStreamSynchronize");
  }
  d.last_stream = stream;

  // Where each JPEG is decoded: one block of device memory per batch.
  std::vector<DeviceSampleView> views;
  views.reserve(records.size());
  size_t decoded_bytes = 0;
  for (const std::span<const uint8_t> record : records) {
    views.push_back(read_device_sample(record));
    const DeviceSampleRecord& r = views.back().record;
    if (r.kind == DeviceSampleKind::kJpeg) decoded_bytes += aligned(static_cast<size_t>(r.width) * r.height * 3);
  }
  const cuda::DevicePointer decoded = d.decoded.reserve(std::max<size_t>(decoded_bytes, 1), stream);
  d.host_samples.assign(records.size(), DeviceSample{});
  d.jpeg_data.clear();
  d.jpeg_sizes.clear();
  d.jpeg_images.clear();
  d.jpeg_slots.clear();
  size_t offset = 0;
  for (size_t i = 0; i < views.size(); ++i) {
    const DeviceSampleRecord& r = views[i].record;
    if (r.kind != DeviceSampleKind::kJpeg) continue;
    DeviceSample& s = d.host_samples[i];
    s = r.sample;
    s.pixels = decoded + offset;
    s.pitch = static_cast<long long>(r.width) * 3;
    cuda::JpegImage image{};
    image.channel[0] = reinterpret_cast<unsigned char*>(s.pixels);
    image.pitch[0] = static_cast<size_t>(s.pitch);
    d.jpeg_images.push_back(image);
    d.jpeg_data.push_back(views[i].payload.data());
    d.jpeg_sizes.push_back(views[i].payload.size());
    d.jpeg_slots.push_back(i);
    offset += aligned(static_cast<size_t>(r.width) * r.height * 3);
  }

  bool redone = false;
  if (!d.jpeg_data.empty()) {
    const int jpegs = static_cast<int>(d.jpeg_data.size());
    cuda::Result status = 0;
    if (d.initialized_batch != jpegs) {
      status = l.nvjpegDecodeBatchedInitialize(d.jpeg, d.jpeg_state, jpegs, 1, cuda::kJpegOutputRgbInterleaved);
      d.initialized_batch = status == 0 ? jpegs : -1;
    }
    if (status == 0) {
      status = l.nvjpegDecodeBatched(d.jpeg, d.jpeg_state, d.jpeg_data.data(), d.jpeg_sizes.data(),
                                     d.jpeg_images.data(), stream);
    }
    if (status != 0) {
      // nvJPEG refused the batch (a file it cannot take after all, or a
      // corrupt one): its JPEGs take the CPU path, from their own random
      // streams, and the batch decoder is set up again.
      d.initialized_batch = -1;
      redone = true;
      d.redone.resize(d.jpeg_slots.size() * sample_bytes);
      for (size_t k = 0; k < d.jpeg_slots.size(); ++k) {
        const size_t i = d.jpeg_slots[k];
        SampleRng rng = views[i].record.rng;
        pipeline.apply(views[i].payload, rng, d.redone.data() + k * sample_bytes);
        d.host_samples[i].on_device = 0;
        check_driver(
            l.cuMemcpyHtoDAsync(out + i * sample_bytes, d.redone.data() + k * sample_bytes, sample_bytes, stream),
            "cuMemcpyHtoDAsync");
      }
      host_redone_.fetch_add(static_cast<int64_t>(d.jpeg_slots.size()), std::memory_order_relaxed);
    }
  }
  // Samples finished by the cpu threads: copied as they are.
  for (size_t i = 0; i < views.size(); ++i) {
    if (views[i].record.kind != DeviceSampleKind::kDone) continue;
    check_driver(l.cuMemcpyHtoDAsync(out + i * sample_bytes, views[i].payload.data(), sample_bytes, stream),
                 "cuMemcpyHtoDAsync");
  }
  // Pageable memory: the copy has taken the bytes when it returns.
  const cuda::DevicePointer samples = d.samples.reserve(records.size() * sizeof(DeviceSample), stream);
  check_driver(l.cuMemcpyHtoDAsync(samples, d.host_samples.data(), records.size() * sizeof(DeviceSample), stream),
               "cuMemcpyHtoDAsync");
  int element = static_cast<int>(dtype_size(pipeline.output().dtype));
  int chw_flag = chw ? 1 : 0;
  int height = out_h, width = out_w, batch = count;
  cuda::DevicePointer out_address = out, tables = d.tables.address;
  void* arguments[] = {
      const_cast<cuda::DevicePointer*>(&samples), &batch, &out_address, &tables, &height, &width, &element, &chw_flag};
  constexpr unsigned kThreads = 256;
  const unsigned blocks = static_cast<unsigned>((static_cast<int64_t>(out_h) * out_w + kThreads - 1) / kThreads);
  check_driver(l.cuLaunchKernel(d.kernel, blocks, static_cast<unsigned>(count), 1, kThreads, 1, 1, 0, stream, arguments,
                                nullptr),
               "cuLaunchKernel");
  // The redone outputs are host memory this object reuses: wait for their copies.
  if (redone) check_driver(l.cuStreamSynchronize(stream), "cuStreamSynchronize");
}

}  // namespace conveyor

#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "conveyor/core/rng.h"
#include "conveyor/core/sample_transform.h"
#include "conveyor/ops/device_resample.h"
#include "conveyor/ops/image_pipeline.h"

namespace conveyor {

/// Why a JPEG cannot be decoded by nvJPEG's batched decoders (the hardware
/// one included) as libjpeg decodes it, or "" when it can: baseline, 8-bit,
/// one scan, 1 component or 3 in 4:4:4, 4:2:2, 4:4:0 or 4:2:0, YCbCr as
/// libjpeg decides it (JFIF and Adobe markers, component names), complete
/// (an EOI after the scan). Reads the markers only. Thread-safe (pure function).
std::string device_jpeg_unsupported(std::span<const uint8_t> data);

/// How one sample of a device-decoded batch arrives from the cpu threads.
enum class DeviceSampleKind : uint32_t {
  kJpeg = 1,  ///< The encoded JPEG, for the device to decode and resample.
  kDone = 2,  ///< Finished on the host by the CPU path (another format, or a JPEG the device cannot take).
};

/// The fixed part of one sample's record (DevicePlanTransform's output), in
/// front of its payload: the JPEG's bytes (kJpeg) or the finished output
/// sample (kDone).
struct DeviceSampleRecord {
  uint32_t magic = kMagic;
  DeviceSampleKind kind = DeviceSampleKind::kJpeg;
  int32_t width = 0, height = 0;  ///< The source image's (kJpeg).
  DeviceSample sample{};          ///< The resample's placement (kJpeg; `pixels` is filled on the device).
  SampleRng rng{0, 0, 0};         ///< The sample's random stream before the plan: the CPU path redone from it.
  uint64_t payload_bytes = 0;

  static constexpr uint32_t kMagic = 0x43565944;  // "DYVC"
};

/// One record read back: its fixed part and its payload, viewing the
/// record's bytes. Throws Error{kInternal} when the bytes are not a record.
struct DeviceSampleView {
  DeviceSampleRecord record;
  std::span<const uint8_t> payload;
};
DeviceSampleView read_device_sample(std::span<const uint8_t> bytes);

/// The cpu threads' half of decoding on a device: for each sample, the
/// header is read and the random parameters drawn exactly as `pipeline`
/// draws them (the same SampleRng, so batches equal for any thread count
/// and resume is exact), and the JPEG's bytes are kept with the placement
/// for the device to decode (cuda/device_image_decoder.h). A sample the
/// device cannot take (PNG, progressive or CMYK JPEG, an EXIF orientation...)
/// is finished here by `pipeline` itself and copied as it is. Each sample's
/// output is a variable-length uint8 record (DeviceSampleRecord + payload).
///
/// Thread-safety: apply_variable() may run concurrently; the counters are atomic.
class DevicePlanTransform final : public SampleTransform {
 public:
  /// Throws Error{kConfig} naming the first step or option a device cannot
  /// run (ImagePipeline::device_unsupported()).
  explicit DevicePlanTransform(std::shared_ptr<const ImagePipeline> pipeline);

  /// uint8 [-1]: one record per sample.
  SampleSpec output_spec() const override;
  bool fixed_shape() const override { return false; }
  void apply(std::span<const uint8_t> input, SampleRng& rng, void* out) const override;
  void apply_variable(std::span<const uint8_t> input, SampleRng& rng, const SampleAllocator& allocate,
                      std::vector<BoundingBox>* boxes) const override;

  /// The pipeline the device imitates (its output spec is the batch's).
  const ImagePipeline& pipeline() const noexcept { return *pipeline_; }
  /// Samples planned for the device, and finished on the host, since construction.
  int64_t device_samples() const noexcept { return device_samples_.load(std::memory_order_relaxed); }
  int64_t host_samples() const noexcept { return host_samples_.load(std::memory_order_relaxed); }

 private:
  std::shared_ptr<const ImagePipeline> pipeline_;
  mutable std::atomic<int64_t> device_samples_{0};
  mutable std::atomic<int64_t> host_samples_{0};
};

/// The host's run of what the device computes for one kJpeg record whose
/// JPEG was decoded whole into `rgb` (RGB, interleaved, `pitch` bytes per
/// row): the output sample in `pipeline`'s dtype and layout, into `out`
/// (its output_spec().num_bytes()). The reference the tests compare with the
/// CPU path; the device runs the same code (ops/device_resample.h).
void device_resample_on_host(const ImagePipeline& pipeline, const DeviceSampleRecord& record, const uint8_t* rgb,
                             int64_t pitch, void* out);

}  // namespace conveyor

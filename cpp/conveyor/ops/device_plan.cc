#include "conveyor/ops/device_plan.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "conveyor/core/error.h"
#include "conveyor/ops/image_decode.h"

namespace conveyor {

namespace {

uint16_t big_endian16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }

// Whether the entropy-coded data from `at` on holds another marker than
// restarts and the end: a second scan (a progressive or non-interleaved file).
bool has_second_scan(std::span<const uint8_t> data, size_t at) {
  for (size_t i = at; i + 1 < data.size(); ++i) {
    const void* marker = std::memchr(data.data() + i, 0xFF, data.size() - 1 - i);
    if (marker == nullptr) return false;
    i = static_cast<size_t>(static_cast<const uint8_t*>(marker) - data.data());
    const uint8_t m = data[i + 1];
    if (m == 0x00 || m == 0xFF || (m >= 0xD0 && m <= 0xD7)) continue;  // Stuffing, fill, RSTn.
    if (m == 0xD9) return false;                                       // EOI.
    return true;
  }
  return false;
}

}  // namespace

std::string device_jpeg_unsupported(std::span<const uint8_t> data) {
  if (data.size() < 4 || data[0] != 0xFF || data[1] != 0xD8) return "not a JPEG";
  size_t i = 2;
  bool frame = false, jfif = false, rgb_ids = false;
  int adobe_transform = -1;  // Adobe's APP14 colour transform flag, when present.
  while (i + 4 <= data.size()) {
    if (data[i] != 0xFF) return "a corrupt header";
    const uint8_t marker = data[i + 1];
    if (marker == 0xFF) {  // Fill byte.
      ++i;
      continue;
    }
    const size_t length = big_endian16(&data[i + 2]);
    if (length < 2 || i + 2 + length > data.size()) return "a corrupt header";
    const uint8_t* body = &data[i + 4];
    const size_t body_size = length - 2;
    if (marker == 0xC1) {
      return "an extended-sequential JPEG";  // nvJPEG's hardware decoder takes baseline ones only.
    } else if (marker == 0xC0) {
      if (body_size < 6) return "a corrupt header";
      if (body[0] != 8) return "a " + std::to_string(body[0]) + "-bit JPEG";
      const int components = body[5];
      if (body_size < 6 + 3 * static_cast<size_t>(components)) return "a corrupt header";
      if (components == 3) {
        const int yh = body[7] >> 4, yv = body[7] & 15;
        for (int c = 1; c < 3; ++c) {
          if (body[6 + 3 * c + 1] != 0x11) return "unusual chroma sampling factors";
        }
        if (yh < 1 || yh > 2 || yv < 1 || yv > 2) return "chroma subsampling other than 4:4:4, 4:2:2, 4:4:0, 4:2:0";
        rgb_ids = body[6] == 'R' && body[9] == 'G' && body[12] == 'B';
      } else if (components != 1) {
        return components == 4 ? "a CMYK JPEG" : "a JPEG of " + std::to_string(components) + " components";
      }
      frame = true;
    } else if (marker == 0xC2 || marker == 0xC6 || marker == 0xCA || marker == 0xCE) {
      return "a progressive JPEG";
    } else if ((marker >= 0xC3 && marker <= 0xCF) && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) {
      return "a lossless, hierarchical or arithmetic-coded JPEG";
    } else if (marker == 0xE0 && body_size >= 5 && std::memcmp(body, "JFIF", 5) == 0) {
      jfif = true;
    } else if (marker == 0xEE && body_size >= 12 && std::memcmp(body, "Adobe", 5) == 0) {
      adobe_transform = body[11];
    } else if (marker == 0xDA) {
      if (!frame) return "a corrupt header";
      // libjpeg's rule for the colour space of 3 components, which nvJPEG
      // does not follow: YCbCr unless Adobe says otherwise, or, without JFIF
      // and Adobe markers, the components are named R, G, B.
      if (adobe_transform == 0 || (adobe_transform < 0 && !jfif && rgb_ids)) return "an RGB JPEG (no YCbCr)";
      if (has_second_scan(data, i + 2 + length)) return "a JPEG of several scans";
      // The end marker, maybe followed by padding: a truncated file goes to
      // the CPU path, which names it.
      size_t end = data.size();
      while (end > 2 && data[end - 1] == 0) --end;
      if (end < 2 || data[end - 2] != 0xFF || data[end - 1] != 0xD9) return "a truncated JPEG (no end marker)";
      return "";
    }
    i += 2 + length;
  }
  return "a corrupt header";
}

DeviceSampleView read_device_sample(std::span<const uint8_t> bytes) {
  DeviceSampleView view;
  if (bytes.size() < sizeof(DeviceSampleRecord)) {
    throw Error(ErrorKind::kInternal, "a device sample record of " + std::to_string(bytes.size()) + " bytes");
  }
  std::memcpy(&view.record, bytes.data(), sizeof(DeviceSampleRecord));
  if (view.record.magic != DeviceSampleRecord::kMagic ||
      view.record.payload_bytes != bytes.size() - sizeof(DeviceSampleRecord)) {
    throw Error(ErrorKind::kInternal, "not a device sample record (made by DevicePlanTransform)");
  }
  view.payload = bytes.subspan(sizeof(DeviceSampleRecord));
  return view;
}

DevicePlanTransform::DevicePlanTransform(std::shared_ptr<const ImagePipeline> pipeline)
    : pipeline_(std::move(pipeline)) {
  check_config(pipeline_ != nullptr, "DevicePlanTransform: no pipeline");
  const std::string& unsupported = pipeline_->device_unsupported();
  check_config(unsupported.empty(), "decoding on the GPU: " + unsupported + " (only on the CPU)");
}

SampleSpec DevicePlanTransform::output_spec() const { return SampleSpec{{-1}, DType::kUInt8}; }

void DevicePlanTransform::apply(std::span<const uint8_t>, SampleRng&, void*) const {
  throw Error(ErrorKind::kConfig, "DevicePlanTransform: records have no fixed size (apply_variable only)");
}

void DevicePlanTransform::apply_variable(std::span<const uint8_t> input, SampleRng& rng,
                                         const SampleAllocator& allocate, std::vector<BoundingBox>* boxes) const {
  check_config(boxes == nullptr, "decoding on the GPU: boxes are moved on the CPU path only");
  const ImagePipeline& pipeline = *pipeline_;
  DeviceSampleRecord record;
  record.rng = rng;
  const ImageInfo info = read_image_info(input, pipeline.max_pixels());
  std::string host_reason =
      info.format == ImageFormat::kJpeg ? device_jpeg_unsupported(input) : std::string("not a JPEG");
  // An EXIF orientation goes to the CPU path whether or not it is applied:
  // info's size is the displayed one, which the CPU path swaps back when it
  // ignores the tag.
  if (host_reason.empty() && info.orientation != 1) host_reason = "an EXIF orientation";
  const auto allocate_record = [&](uint64_t payload) {
    record.payload_bytes = payload;
    auto* bytes = static_cast<uint8_t*>(
        allocate(SampleSpec{{static_cast<int64_t>(sizeof(DeviceSampleRecord) + payload)}, DType::kUInt8}));
    return bytes;
  };
  if (!host_reason.empty()) {
    // The CPU path, exactly: the same stream of random numbers.
    record.kind = DeviceSampleKind::kDone;
    uint8_t* bytes = allocate_record(static_cast<uint64_t>(pipeline.output_spec().num_bytes()));
    pipeline.apply(input, rng, bytes + sizeof(DeviceSampleRecord));
    std::memcpy(bytes, &record, sizeof(record));
    host_samples_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  record.kind = DeviceSampleKind::kJpeg;
  record.width = info.width;
  record.height = info.height;
  record.sample = pipeline.place_on_device(info.height, info.width, rng);
  uint8_t* bytes = allocate_record(input.size());
  std::memcpy(bytes, &record, sizeof(record));
  std::memcpy(bytes + sizeof(DeviceSampleRecord), input.data(), input.size());
  device_samples_.fetch_add(1, std::memory_order_relaxed);
}

void device_resample_on_host(const ImagePipeline& pipeline, const DeviceSampleRecord& record, const uint8_t* rgb,
                             int64_t pitch, void* out) {
  const SampleSpec spec = pipeline.output_spec();
  const bool chw = pipeline.output().layout == Layout::kCHW;
  const int out_h = static_cast<int>(chw ? spec.shape[1] : spec.shape[0]);
  const int out_w = static_cast<int>(chw ? spec.shape[2] : spec.shape[1]);
  const std::vector<uint8_t> tables = pipeline.output_tables();
  DeviceSample sample = record.sample;
  sample.pixels = reinterpret_cast<uintptr_t>(rgb);
  sample.pitch = pitch;
  const int element = static_cast<int>(dtype_size(pipeline.output().dtype));
  for (int y = 0; y < out_h; ++y) {
    for (int x = 0; x < out_w; ++x) {
      device_write_pixel(sample, 0, x, y, out_h, out_w, element, chw ? 1 : 0, tables.data(),
                         static_cast<uint8_t*>(out));
    }
  }
}

}  // namespace conveyor

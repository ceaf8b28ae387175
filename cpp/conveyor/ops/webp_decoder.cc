#include "conveyor/ops/webp_decoder.h"

#include <webp/decode.h>
#include <webp/demux.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "conveyor/core/error.h"
#include "conveyor/ops/orientation.h"

namespace conveyor::detail {

namespace {

class WebpDecoder final : public ImageDecoder {
 public:
  WebpDecoder() = default;
  WebpDecoder(const WebpDecoder&) = delete;
  WebpDecoder& operator=(const WebpDecoder&) = delete;
  ~WebpDecoder() override { WebPDemuxDelete(demux_); }

  // The container is parsed by libwebp's demuxer (chunk headers only): the
  // canvas size, the first frame's bitstream and an EXIF chunk.
  void open(std::span<const uint8_t> data, int64_t max_pixels) {
    const WebPData webp{data.data(), data.size()};
    WebPDemuxState state = WEBP_DEMUX_PARSE_ERROR;
    demux_ = WebPDemuxPartial(&webp, &state);
    if (demux_ == nullptr || state == WEBP_DEMUX_PARSE_ERROR) throw Error(ErrorKind::kDecode, "WebP: invalid header");
    if (state != WEBP_DEMUX_DONE) throw Error(ErrorKind::kDecode, "WebP: truncated data");
    const uint32_t flags = WebPDemuxGetI(demux_, WEBP_FF_FORMAT_FLAGS);
    check_pixel_limit(WebPDemuxGetI(demux_, WEBP_FF_CANVAS_HEIGHT), WebPDemuxGetI(demux_, WEBP_FF_CANVAS_WIDTH),
                      max_pixels, "WebP");
    canvas_w_ = static_cast<int>(WebPDemuxGetI(demux_, WEBP_FF_CANVAS_WIDTH));
    canvas_h_ = static_cast<int>(WebPDemuxGetI(demux_, WEBP_FF_CANVAS_HEIGHT));
    WebPIterator frame;
    if (!WebPDemuxGetFrame(demux_, 1, &frame)) throw Error(ErrorKind::kDecode, "WebP: no image data");
    frame_ = {frame.fragment.bytes, frame.fragment.size};
    frame_x_ = frame.x_offset;
    frame_y_ = frame.y_offset;
    frame_w_ = frame.width;
    frame_h_ = frame.height;
    WebPDemuxReleaseIterator(&frame);
    animated_ = (flags & ANIMATION_FLAG) != 0;
    if (flags & EXIF_FLAG) {
      WebPChunkIterator chunk;
      if (WebPDemuxGetChunk(demux_, "EXIF", 1, &chunk)) {
        orientation_ = exif_orientation({chunk.chunk.bytes, chunk.chunk.size});
        orientation_is_exif_ = true;
        WebPDemuxReleaseChunkIterator(&chunk);
      }
    }
    info_.format = ImageFormat::kWebp;
    info_.orientation = orientation_;
    info_.width = transposes(orientation_) ? canvas_h_ : canvas_w_;
    info_.height = transposes(orientation_) ? canvas_w_ : canvas_h_;
  }

  Decoded decode(const DecodeRequest& request, Scratch& scratch) override {
    if (animated_) return decode_first_frame(request, scratch);
    const Region r = to_stored(request.region, orientation_, canvas_w_, canvas_h_);
    // Decodes only the region and a small margin (libwebp's cropping; its
    // origin must be even). Two spare pixels on each side: libwebp's chroma
    // upsampling replicates the edge of a crop instead of reading the next
    // pixel.
    const int left = std::max(r.x - 2, 0) & ~1, top = std::max(r.y - 2, 0) & ~1;
    const int width = std::min(r.x + r.width + 2, canvas_w_) - left;
    const int height = std::min(r.y + r.height + 2, canvas_h_) - top;
    ImageView view = decode_frame(left, top, width, height, scratch.decoded);
    if (request.channels == 1) view = rgb_to_gray(view, scratch.converted);
    view = orient(crop_view(view, {r.x - left, r.y - top, r.width, r.height}), orientation_, scratch.oriented);
    return {view, static_cast<double>(request.region.x), static_cast<double>(request.region.y), 1.0};
  }

 private:
  // The first frame of an animation as PIL shows it (libwebp's animation
  // decoder): a canvas cleared to transparent black with the frame, a key
  // frame, written over its rectangle; alpha dropped.
  Decoded decode_first_frame(const DecodeRequest& request, Scratch& scratch) {
    const ImageView frame = decode_frame(0, 0, frame_w_, frame_h_, scratch.converted);
    const size_t stride = static_cast<size_t>(canvas_w_) * 3;
    scratch.decoded.assign(stride * canvas_h_, 0);
    for (int y = 0; y < frame_h_; ++y) {
      std::memcpy(scratch.decoded.data() + (frame_y_ + y) * stride + static_cast<size_t>(frame_x_) * 3, frame.row(y),
                  static_cast<size_t>(frame_w_) * 3);
    }
    ImageView canvas{scratch.decoded.data(), canvas_h_, canvas_w_, 3, static_cast<ptrdiff_t>(stride)};
    if (request.channels == 1) canvas = rgb_to_gray(canvas, scratch.converted);
    return oriented_region(canvas, orientation_, request, scratch);
  }

  // Decodes the rectangle (left, top, width, height) of the first frame's
  // bitstream to RGB in `buffer`. Alpha, if any, is dropped (as PIL's
  // convert("RGB")).
  ImageView decode_frame(int left, int top, int width, int height, std::vector<uint8_t>& buffer) {
    WebPDecoderConfig config;
    if (!WebPInitDecoderConfig(&config)) throw Error(ErrorKind::kInternal, "WebP: decoder version mismatch");
    if (left != 0 || top != 0 || width != frame_w_ || height != frame_h_) {
      config.options.use_cropping = 1;
      config.options.crop_left = left;
      config.options.crop_top = top;
      config.options.crop_width = width;
      config.options.crop_height = height;
    }
    const int stride = width * 3;
    buffer.resize(static_cast<size_t>(stride) * height);
    config.output.colorspace = MODE_RGB;
    config.output.is_external_memory = 1;
    config.output.u.RGBA.rgba = buffer.data();
    config.output.u.RGBA.stride = stride;
    config.output.u.RGBA.size = buffer.size();
    const VP8StatusCode status = WebPDecode(frame_.data(), frame_.size(), &config);
    WebPFreeDecBuffer(&config.output);
    if (status != VP8_STATUS_OK) throw Error(ErrorKind::kDecode, "WebP: corrupt or truncated data");
    return {buffer.data(), height, width, 3, stride};
  }

  WebPDemuxer* demux_ = nullptr;
  std::span<const uint8_t> frame_;  // The first frame's bitstream (inside the caller's data).
  int canvas_w_ = 0, canvas_h_ = 0;
  int frame_x_ = 0, frame_y_ = 0, frame_w_ = 0, frame_h_ = 0;
  bool animated_ = false;
};

}  // namespace

std::unique_ptr<ImageDecoder> open_webp(std::span<const uint8_t> data, int64_t max_pixels) {
  auto decoder = std::make_unique<WebpDecoder>();
  decoder->open(data, max_pixels);
  return decoder;
}

}  // namespace conveyor::detail

#include "conveyor/ops/jpeg_decoder.h"

#include <jerror.h>
#include <jpeglib.h>

#include <algorithm>
#include <array>
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t first.
#include <cstring>
#include <string>
#include <utility>

#include "conveyor/core/error.h"
#include "conveyor/ops/orientation.h"

namespace conveyor::detail {

namespace {

// libjpeg reports fatal errors through error_exit, which must not return; the
// default calls exit(). We longjmp back to the setjmp in the JpegDecoder method
// that called into libjpeg; those methods hold no object with a destructor
// across libjpeg calls, and turn the jump into a C++ exception.
struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void on_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings are never printed. A premature end of data (libjpeg would pad the
// image with grey) is an error, as PIL raises on truncated images by default;
// other corrupt-data warnings (e.g. extraneous bytes before a marker, common in
// real data sets) are tolerated like PIL and libjpeg's own tools do.
void on_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // Trace messages.
  if (cinfo->err->msg_code == JWRN_JPEG_EOF) on_error_exit(cinfo);
  cinfo->err->num_warnings++;
}

void on_output_message(j_common_ptr) {}

// The EXIF orientation of the first APP1 "Exif" marker (as PIL reads it); 1 if absent.
int jpeg_exif_orientation(const jpeg_decompress_struct& cinfo) {
  for (jpeg_saved_marker_ptr m = cinfo.marker_list; m != nullptr; m = m->next) {
    if (m->marker != JPEG_APP0 + 1 || m->data_length < 6 || std::memcmp(m->data, "Exif\0\0", 6) != 0) continue;
    return exif_orientation({m->data, m->data_length});
  }
  return 1;
}

// PIL's CMYK -> RGB on Adobe-inverted samples (PIL assumes Adobe polarity for
// every CMYK JPEG): R = (255 - C) * (255 - K) / 255, rounded as PIL's MULDIV255.
inline uint8_t muldiv255(uint32_t a, uint32_t b) {
  const uint32_t t = a * b + 128;
  return static_cast<uint8_t>((t + (t >> 8)) >> 8);
}

class JpegDecoder final : public ImageDecoder {
 public:
  JpegDecoder() {
    std::memset(&cinfo_, 0, sizeof(cinfo_));
    cinfo_.err = jpeg_std_error(&err_.pub);
    err_.pub.error_exit = on_error_exit;
    err_.pub.emit_message = on_emit_message;
    err_.pub.output_message = on_output_message;
  }
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;
  // Safe on a zeroed or partially created struct (it checks cinfo->mem).
  ~JpegDecoder() override { jpeg_destroy_decompress(&cinfo_); }

  void open(std::span<const uint8_t> data, int64_t max_pixels) {
    if (setjmp(err_.jump)) fail();
    jpeg_create_decompress(&cinfo_);
    jpeg_mem_src(&cinfo_, data.data(), static_cast<unsigned long>(data.size()));
    jpeg_save_markers(&cinfo_, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&cinfo_, TRUE);
    check_pixel_limit(cinfo_.image_height, cinfo_.image_width, max_pixels, "JPEG");
    orientation_ = jpeg_exif_orientation(cinfo_);
    orientation_is_exif_ = true;
    info_.format = ImageFormat::kJpeg;
    info_.orientation = orientation_;
    const int w = static_cast<int>(cinfo_.image_width), h = static_cast<int>(cinfo_.image_height);
    info_.width = transposes(orientation_) ? h : w;
    info_.height = transposes(orientation_) ? w : h;
  }

  Decoded decode(const DecodeRequest& request, Scratch& scratch) override {
    const int stored_w = static_cast<int>(cinfo_.image_width), stored_h = static_cast<int>(cinfo_.image_height);
    const Region stored = to_stored(request.region, orientation_, stored_w, stored_h);
    int min_w = request.min_width, min_h = request.min_height;
    if (transposes(orientation_)) std::swap(min_w, min_h);
    int denom = 1;
    if (min_w > 0 && min_h > 0) {
      for (int d : {8, 4, 2}) {
        if (stored.width >= int64_t{min_w} * d && stored.height >= int64_t{min_h} * d) {
          denom = d;
          break;
        }
      }
    }
    const bool cmyk = cinfo_.jpeg_color_space == JCS_CMYK || cinfo_.jpeg_color_space == JCS_YCCK;
    std::array<double, 4> covered{};  // What the view covers, in stored pixels.
    ImageView view = decode_stored(stored, denom, cmyk ? 4 : request.channels, scratch.decoded, covered);
    if (cmyk) {
      view = cmyk_to_rgb(view);
      if (request.channels == 1) view = rgb_to_gray(view, scratch.converted);
    }
    view = orient(view, orientation_, scratch.oriented);
    const auto shown = to_displayed(covered, orientation_, stored_w, stored_h);
    return {view, shown[0], shown[1], static_cast<double>(denom)};
  }

 private:
  [[noreturn]] void fail() { throw Error(ErrorKind::kDecode, std::string("JPEG: ") + err_.message); }

  // Decodes `stored` (stored coordinates) at 1/denom scale with `components`
  // output components (1 gray, 3 RGB, 4 CMYK as stored) into `buffer`, reading
  // only the rows of the region and (jpeg_crop_scanline) its iMCU columns.
  ImageView decode_stored(const Region& stored, int denom, int components, std::vector<uint8_t>& buffer,
                          std::array<double, 4>& covered) {
    if (setjmp(err_.jump)) fail();
    cinfo_.scale_num = 1;
    cinfo_.scale_denom = static_cast<unsigned int>(denom);
    cinfo_.out_color_space = components == 4 ? JCS_CMYK : (components == 1 ? JCS_GRAYSCALE : JCS_RGB);
    jpeg_start_decompress(&cinfo_);
    const auto scaled = [denom](int v, JDIMENSION limit) {
      return std::min(static_cast<JDIMENSION>((v + denom / 2) / denom), limit);
    };
    const JDIMENSION x0 = scaled(stored.x, cinfo_.output_width);
    const JDIMENSION x1 = std::max(scaled(stored.x + stored.width, cinfo_.output_width), x0 + 1);
    const JDIMENSION y0 = scaled(stored.y, cinfo_.output_height);
    const JDIMENSION y1 = std::max(scaled(stored.y + stored.height, cinfo_.output_height), y0 + 1);
    // Two extra columns on each side: at the edges of a cropped scanline the
    // chroma upsampler replicates the edge instead of using the next pixel.
    JDIMENSION x_offset = x0 >= 2 ? x0 - 2 : 0;
    JDIMENSION crop_width = std::min(x1 + 2, cinfo_.output_width) - x_offset;
    if (crop_width < cinfo_.output_width) jpeg_crop_scanline(&cinfo_, &x_offset, &crop_width);
    const size_t row_bytes = size_t{cinfo_.output_width} * static_cast<size_t>(cinfo_.output_components);
    grow_to(buffer, row_bytes * (y1 - y0));
    if (y0 > 0) jpeg_skip_scanlines(&cinfo_, y0);
    JSAMPROW rows[16];
    while (cinfo_.output_scanline < y1) {
      const JDIMENSION n = std::min<JDIMENSION>(16, y1 - cinfo_.output_scanline);
      for (JDIMENSION i = 0; i < n; ++i) rows[i] = buffer.data() + (cinfo_.output_scanline - y0 + i) * row_bytes;
      jpeg_read_scanlines(&cinfo_, rows, n);
    }
    // The rest of the image is not needed; abort keeps the object reusable for destroy.
    jpeg_abort_decompress(&cinfo_);
    // Scaled pixel i covers stored pixels [i * denom, (i + 1) * denom).
    covered = {static_cast<double>(x0) * denom, static_cast<double>(y0) * denom, static_cast<double>(x1 - x0) * denom,
               static_cast<double>(y1 - y0) * denom};
    ImageView view;
    view.data = buffer.data() + (x0 - x_offset) * static_cast<size_t>(cinfo_.output_components);
    view.height = static_cast<int>(y1 - y0);
    view.width = static_cast<int>(x1 - x0);
    view.channels = cinfo_.output_components;
    view.stride = static_cast<ptrdiff_t>(row_bytes);
    return view;
  }

  // In place: 4-channel rows become 3-channel rows (each output byte lies at or
  // before the input bytes it comes from).
  static ImageView cmyk_to_rgb(ImageView view) {
    auto* base = const_cast<uint8_t*>(view.data);
    for (int y = 0; y < view.height; ++y) {
      const uint8_t* in = base + y * view.stride;
      uint8_t* out = base + y * view.stride;
      for (int x = 0; x < view.width; ++x) {
        const uint8_t c = in[4 * x], m = in[4 * x + 1], ye = in[4 * x + 2], k = in[4 * x + 3];
        out[3 * x] = muldiv255(c, k);
        out[3 * x + 1] = muldiv255(m, k);
        out[3 * x + 2] = muldiv255(ye, k);
      }
    }
    view.channels = 3;
    return view;
  }

  jpeg_decompress_struct cinfo_;
  ErrorManager err_;
};

}  // namespace

std::unique_ptr<ImageDecoder> open_jpeg(std::span<const uint8_t> data, int64_t max_pixels) {
  auto decoder = std::make_unique<JpegDecoder>();
  decoder->open(data, max_pixels);
  return decoder;
}

}  // namespace conveyor::detail

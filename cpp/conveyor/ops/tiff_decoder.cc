#include "conveyor/ops/tiff_decoder.h"

#include <tiffio.h>

#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "conveyor/core/checked_size.h"
#include "conveyor/core/error.h"
#include "conveyor/ops/orientation.h"

namespace conveyor::detail {

namespace {

// The encoded bytes as a read-only, memory-mapped libtiff file.
struct MemoryFile {
  std::span<const uint8_t> data;
  uint64_t pos = 0;
};

tmsize_t read_proc(thandle_t handle, void* buffer, tmsize_t size) {
  auto* file = static_cast<MemoryFile*>(handle);
  if (size <= 0 || file->pos >= file->data.size()) return 0;
  const uint64_t n = std::min<uint64_t>(static_cast<uint64_t>(size), file->data.size() - file->pos);
  std::memcpy(buffer, file->data.data() + file->pos, n);
  file->pos += n;
  return static_cast<tmsize_t>(n);
}

tmsize_t write_proc(thandle_t, void*, tmsize_t) { return -1; }

toff_t seek_proc(thandle_t handle, toff_t offset, int whence) {
  auto* file = static_cast<MemoryFile*>(handle);
  uint64_t base = 0;
  if (whence == SEEK_CUR) base = file->pos;
  if (whence == SEEK_END) base = file->data.size();
  if (offset > UINT64_MAX / 2 || base > UINT64_MAX / 2) return static_cast<toff_t>(-1);
  file->pos = base + offset;
  return file->pos;
}

int close_proc(thandle_t) { return 0; }

toff_t size_proc(thandle_t handle) { return static_cast<MemoryFile*>(handle)->data.size(); }

int map_proc(thandle_t handle, void** base, toff_t* size) {
  auto* file = static_cast<MemoryFile*>(handle);
  *base = const_cast<uint8_t*>(file->data.data());
  *size = file->data.size();
  return 1;
}

void unmap_proc(thandle_t, void*, toff_t) {}

// libtiff's errors and warnings go to these per-file handlers (never to
// stderr): the first error becomes the exception's message, warnings are
// dropped. Returning 1 stops libtiff from calling its global handlers.
int on_error(TIFF*, void* user_data, const char* module, const char* fmt, va_list ap) {
  auto* message = static_cast<std::string*>(user_data);
  if (!message->empty()) return 1;
  char text[512];
  std::vsnprintf(text, sizeof(text), fmt, ap);
  *message = module != nullptr && *module != '\0' ? std::string(module) + ": " + text : std::string(text);
  return 1;
}

int on_warning(TIFF*, void*, const char*, const char*, va_list) { return 1; }

// PIL's CMYK -> RGB: R = (255 - K) - C * (255 - K) / 255, rounded as its MULDIV255.
inline uint8_t cmyk_channel(uint32_t c, uint32_t nk) {
  const uint32_t t = c * nk + 128;
  return static_cast<uint8_t>(nk - ((t + (t >> 8)) >> 8));
}

class TiffDecoder final : public ImageDecoder {
 public:
  TiffDecoder() = default;
  TiffDecoder(const TiffDecoder&) = delete;
  TiffDecoder& operator=(const TiffDecoder&) = delete;
  ~TiffDecoder() override {
    if (tif_ != nullptr) TIFFClose(tif_);
  }

  void open(std::span<const uint8_t> data, int64_t max_pixels) {
    file_.data = data;
    TIFFOpenOptions* options = TIFFOpenOptionsAlloc();
    if (options == nullptr) throw Error(ErrorKind::kInternal, "TIFF: out of memory");
    TIFFOpenOptionsSetErrorHandlerExtR(options, on_error, &message_);
    TIFFOpenOptionsSetWarningHandlerExtR(options, on_warning, nullptr);
    // Reads the header and the first directory (the first page).
    tif_ = TIFFClientOpenExt("TIFF", "r", &file_, read_proc, write_proc, seek_proc, close_proc, size_proc, map_proc,
                             unmap_proc, options);
    TIFFOpenOptionsFree(options);
    if (tif_ == nullptr) fail("invalid or truncated header");
    uint32_t width = 0, height = 0;
    if (!TIFFGetField(tif_, TIFFTAG_IMAGEWIDTH, &width) || !TIFFGetField(tif_, TIFFTAG_IMAGELENGTH, &height)) {
      fail("no image size");
    }
    check_pixel_limit(height, width, max_pixels, "TIFF");
    // TIFF sides are 32-bit unsigned; image sides are ints (a caller may raise max_pixels that far).
    if (width > INT32_MAX || height > INT32_MAX) {
      throw Error(ErrorKind::kTooLarge, "TIFF image of " + std::to_string(width) + "x" + std::to_string(height) +
                                            ": a side exceeds 2**31 - 1");
    }
    width_ = static_cast<int>(width);
    height_ = static_cast<int>(height);
    TIFFGetFieldDefaulted(tif_, TIFFTAG_BITSPERSAMPLE, &bits_);
    TIFFGetFieldDefaulted(tif_, TIFFTAG_SAMPLESPERPIXEL, &samples_);
    uint16_t format = SAMPLEFORMAT_UINT, planar = PLANARCONFIG_CONTIG, compression = COMPRESSION_NONE;
    uint16_t orientation = ORIENTATION_TOPLEFT;
    TIFFGetFieldDefaulted(tif_, TIFFTAG_SAMPLEFORMAT, &format);
    TIFFGetFieldDefaulted(tif_, TIFFTAG_PLANARCONFIG, &planar);
    TIFFGetFieldDefaulted(tif_, TIFFTAG_COMPRESSION, &compression);
    TIFFGetFieldDefaulted(tif_, TIFFTAG_ORIENTATION, &orientation);
    if (!TIFFGetField(tif_, TIFFTAG_PHOTOMETRIC, &photometric_)) {
      photometric_ = samples_ >= 3 ? PHOTOMETRIC_RGB : PHOTOMETRIC_MINISBLACK;
    }
    if (!TIFFIsCODECConfigured(compression)) fail("unsupported compression " + std::to_string(compression));
    if (photometric_ == PHOTOMETRIC_YCBCR && compression == COMPRESSION_JPEG) {
      // libtiff's JPEG codec converts YCbCr to RGB itself (as PIL asks it to).
      TIFFSetField(tif_, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB);
      photometric_ = PHOTOMETRIC_RGB;
    }
    // More samples per pixel than PIL reads would only make the raw buffer a
    // multiple of the pixel limit (a header may claim 65535).
    if (samples_ > 8) fail("unsupported " + std::to_string(samples_) + " samples per pixel (at most 8)");
    if (format != SAMPLEFORMAT_UINT) fail("unsupported sample format " + std::to_string(format) + " (unsigned only)");
    const bool gray = photometric_ == PHOTOMETRIC_MINISBLACK || photometric_ == PHOTOMETRIC_MINISWHITE;
    bool supported = false;
    if (gray) supported = samples_ >= 1 && (bits_ == 1 || bits_ == 2 || bits_ == 4 || bits_ == 8 || bits_ == 16);
    if (photometric_ == PHOTOMETRIC_PALETTE) supported = samples_ == 1 && bits_ >= 1 && bits_ <= 8 && (8 % bits_ == 0);
    if (photometric_ == PHOTOMETRIC_RGB) supported = samples_ >= 3 && (bits_ == 8 || bits_ == 16);
    if (photometric_ == PHOTOMETRIC_SEPARATED) {
      uint16_t inkset = INKSET_CMYK;
      TIFFGetFieldDefaulted(tif_, TIFFTAG_INKSET, &inkset);
      supported = inkset == INKSET_CMYK && samples_ >= 4 && (bits_ == 8 || bits_ == 16);
    }
    if (!supported) {
      fail("unsupported image type (photometric " + std::to_string(photometric_) + ", " + std::to_string(bits_) +
           "-bit, " + std::to_string(samples_) + " samples per pixel)");
    }
    if (photometric_ == PHOTOMETRIC_PALETTE) {
      uint16_t *r = nullptr, *g = nullptr, *b = nullptr;
      if (!TIFFGetField(tif_, TIFFTAG_COLORMAP, &r, &g, &b)) fail("palette image without a colormap");
      // PIL keeps the high byte of the 16-bit colormap entries.
      for (int i = 0; i < (1 << bits_); ++i) {
        palette_[3 * i] = static_cast<uint8_t>(r[i] >> 8);
        palette_[3 * i + 1] = static_cast<uint8_t>(g[i] >> 8);
        palette_[3 * i + 2] = static_cast<uint8_t>(b[i] >> 8);
      }
    }
    separate_ = planar == PLANARCONFIG_SEPARATE && samples_ > 1;
    // Associated (premultiplied) alpha after the colour samples: PIL divides it out.
    // (PIL reads no CMYK or palette image with alpha.)
    const int colour = photometric_ == PHOTOMETRIC_RGB ? 3 : 1;
    uint16_t extra_count = 0;
    uint16_t* extra = nullptr;
    if ((gray || photometric_ == PHOTOMETRIC_RGB) && samples_ > colour &&
        TIFFGetField(tif_, TIFFTAG_EXTRASAMPLES, &extra_count, &extra) && extra_count > 0 &&
        extra[0] == EXTRASAMPLE_ASSOCALPHA) {
      alpha_ = colour;
    }
    orientation_ = orientation >= 1 && orientation <= 8 ? orientation : 1;
    info_.format = ImageFormat::kTiff;
    info_.orientation = orientation_;
    info_.width = transposes(orientation_) ? height_ : width_;
    info_.height = transposes(orientation_) ? width_ : height_;
  }

  // Reads the whole first page (strips or tiles), then converts it.
  Decoded decode(const DecodeRequest& request, Scratch& scratch) override {
    const int planes = separate_ ? samples_ : 1;
    const int64_t plane_samples = separate_ ? 1 : samples_;
    const int64_t row_bits = int64_t{width_} * plane_samples * bits_;  // < 2^31 * 2^16 * 2^5: no overflow.
    const int64_t row_bytes = (row_bits + 7) / 8;
    if (TIFFScanlineSize64(tif_) != static_cast<uint64_t>(row_bytes)) fail("unsupported sample layout");
    const int64_t plane_bytes = checked_mul(row_bytes, height_, "TIFF image", ErrorKind::kTooLarge);
    scratch.decoded.resize(static_cast<size_t>(checked_mul(plane_bytes, planes, "TIFF image", ErrorKind::kTooLarge)));
    uint8_t* base = scratch.decoded.data();
    if (TIFFIsTiled(tif_)) {
      read_tiles(base, planes, plane_samples, row_bytes, plane_bytes, scratch.oriented);  // A tile at a time.
    } else {
      read_strips(base, planes, row_bytes, plane_bytes);
    }
    const int channels = request.channels;
    scratch.converted.resize(static_cast<size_t>(width_) * height_ * channels);
    convert(base, row_bytes, plane_bytes, channels, scratch.converted.data());
    const ImageView full{scratch.converted.data(), height_, width_, channels,
                         static_cast<ptrdiff_t>(width_) * channels};
    return oriented_region(full, orientation_, request, scratch);
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw Error(ErrorKind::kDecode, "TIFF: " + (message_.empty() ? what : what + " (" + message_ + ")"));
  }

  void read_strips(uint8_t* base, int planes, int64_t row_bytes, int64_t plane_bytes) {
    uint32_t rows_per_strip = 0;
    TIFFGetFieldDefaulted(tif_, TIFFTAG_ROWSPERSTRIP, &rows_per_strip);
    rows_per_strip = std::clamp<uint32_t>(rows_per_strip, 1, static_cast<uint32_t>(height_));
    for (int p = 0; p < planes; ++p) {
      for (uint32_t row = 0; row < static_cast<uint32_t>(height_); row += rows_per_strip) {
        const uint32_t rows = std::min<uint32_t>(rows_per_strip, static_cast<uint32_t>(height_) - row);
        const tmsize_t size = static_cast<tmsize_t>(rows * row_bytes);
        uint8_t* dst = base + p * plane_bytes + row * row_bytes;
        const tstrip_t strip = TIFFComputeStrip(tif_, row, static_cast<uint16_t>(p));
        if (TIFFReadEncodedStrip(tif_, strip, dst, size) != size)
          fail("corrupt or truncated strip " + std::to_string(strip));
      }
    }
  }

  void read_tiles(uint8_t* base, int planes, int64_t plane_samples, int64_t row_bytes, int64_t plane_bytes,
                  std::vector<uint8_t>& tile) {
    uint32_t tile_w = 0, tile_h = 0;
    TIFFGetField(tif_, TIFFTAG_TILEWIDTH, &tile_w);
    TIFFGetField(tif_, TIFFTAG_TILELENGTH, &tile_h);
    const uint64_t tile_size = TIFFTileSize64(tif_);
    const uint64_t tile_row = TIFFTileRowSize64(tif_);
    // A hostile header may declare tiles far larger than the image.
    if (tile_w == 0 || tile_h == 0 || tile_size == 0 || tile_size > (uint64_t{1} << 28) ||
        tile_row * tile_h > tile_size) {
      fail("invalid tile size " + std::to_string(tile_w) + "x" + std::to_string(tile_h));
    }
    tile.resize(tile_size);
    for (int p = 0; p < planes; ++p) {
      for (uint32_t ty = 0; ty < static_cast<uint32_t>(height_); ty += tile_h) {
        for (uint32_t tx = 0; tx < static_cast<uint32_t>(width_); tx += tile_w) {
          const ttile_t index = TIFFComputeTile(tif_, tx, ty, 0, static_cast<uint16_t>(p));
          if (TIFFReadEncodedTile(tif_, index, tile.data(), static_cast<tmsize_t>(tile_size)) !=
              static_cast<tmsize_t>(tile_size)) {
            fail("corrupt or truncated tile " + std::to_string(index));
          }
          const uint32_t rows = std::min<uint32_t>(tile_h, static_cast<uint32_t>(height_) - ty);
          const uint32_t cols = std::min<uint32_t>(tile_w, static_cast<uint32_t>(width_) - tx);
          // Tile widths are multiples of 16, so tile columns start on whole bytes.
          const uint64_t x_byte = uint64_t{tx} * plane_samples * bits_ / 8;
          const uint64_t n = (uint64_t{cols} * plane_samples * bits_ + 7) / 8;
          for (uint32_t r = 0; r < rows; ++r) {
            std::memcpy(base + p * plane_bytes + (ty + r) * row_bytes + x_byte, tile.data() + r * tile_row, n);
          }
        }
      }
    }
  }

  // Sample `c` of pixel `x` in row `y`, at its stored depth.
  uint32_t sample(const uint8_t* base, int64_t row_bytes, int64_t plane_bytes, int y, int x, int c) const {
    const uint8_t* row = base + y * row_bytes;
    int64_t i;
    if (separate_) {
      row += c * plane_bytes;
      i = x;
    } else {
      i = int64_t{x} * samples_ + c;
    }
    switch (bits_) {
      case 8:
        return row[i];
      case 16: {
        uint16_t v;
        std::memcpy(&v, row + 2 * i, 2);  // libtiff swapped it to host order.
        return v;
      }
      default: {
        const int64_t bit = i * bits_;
        return (row[bit / 8] >> (8 - bits_ - bit % 8)) & ((1u << bits_) - 1);
      }
    }
  }

  // The stored samples to 8-bit RGB (`channels` 3) or gray (1), as PIL's
  // convert("RGB") / convert("L"): 16-bit samples keep their high byte,
  // 1/2/4-bit gray is scaled to 0..255, extra samples (alpha) are dropped.
  void convert(const uint8_t* base, int64_t row_bytes, int64_t plane_bytes, int channels, uint8_t* out) const {
    const uint32_t max_value = (1u << bits_) - 1;
    const auto to8 = [this, max_value](uint32_t v) -> uint8_t {
      return static_cast<uint8_t>(bits_ == 16 ? v >> 8 : v * 255 / max_value);
    };
    uint8_t rgb[3];
    for (int y = 0; y < height_; ++y) {
      for (int x = 0; x < width_; ++x, out += channels) {
        const auto s = [&](int c) { return sample(base, row_bytes, plane_bytes, y, x, c); };
        switch (photometric_) {
          case PHOTOMETRIC_MINISBLACK:
          case PHOTOMETRIC_MINISWHITE: {
            uint32_t v = s(0);
            if (photometric_ == PHOTOMETRIC_MINISWHITE) v = max_value - v;
            uint8_t gray = to8(v);
            if (alpha_ > 0) unpremultiply(&gray, 1, to8(s(alpha_)));
            std::memset(out, gray, static_cast<size_t>(channels));
            continue;
          }
          case PHOTOMETRIC_PALETTE:
            std::memcpy(rgb, &palette_[3 * s(0)], 3);
            break;
          case PHOTOMETRIC_RGB:
            for (int c = 0; c < 3; ++c) rgb[c] = to8(s(c));
            if (alpha_ > 0) unpremultiply(rgb, 3, to8(s(alpha_)));
            break;
          default: {  // CMYK
            const uint32_t nk = 255 - to8(s(3));
            for (int c = 0; c < 3; ++c) rgb[c] = cmyk_channel(to8(s(c)), nk);
            break;
          }
        }
        if (channels == 3) {
          std::memcpy(out, rgb, 3);
        } else {
          out[0] = pil_luma(rgb[0], rgb[1], rgb[2]);
        }
      }
    }
  }

  // PIL's un-premultiplication: transparent pixels become black.
  static void unpremultiply(uint8_t* px, int n, uint32_t alpha) {
    if (alpha == 255) return;
    for (int c = 0; c < n; ++c)
      px[c] = alpha == 0 ? 0 : static_cast<uint8_t>(std::min<uint32_t>(255, 255 * px[c] / alpha));
  }

  MemoryFile file_;
  std::string message_;  // libtiff's first error.
  TIFF* tif_ = nullptr;
  int width_ = 0, height_ = 0;
  uint16_t bits_ = 1, samples_ = 1, photometric_ = PHOTOMETRIC_MINISBLACK;
  bool separate_ = false;
  int alpha_ = 0;  // Index of an associated alpha sample; 0 when none.
  uint8_t palette_[3 * 256] = {};
};

}  // namespace

std::unique_ptr<ImageDecoder> open_tiff(std::span<const uint8_t> data, int64_t max_pixels) {
  auto decoder = std::make_unique<TiffDecoder>();
  decoder->open(data, max_pixels);
  return decoder;
}

}  // namespace conveyor::detail

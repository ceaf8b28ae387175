#include "conveyor/ops/bmp_decoder.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "conveyor/core/checked_size.h"
#include "conveyor/core/error.h"
#include "conveyor/ops/orientation.h"

namespace conveyor::detail {

namespace {

// Read here, following PIL's BmpImagePlugin (the pixels torchvision's loader
// gives), rather than with a library: OpenCV's imgcodecs would bring a hundred
// packages to every machine, and stb_image (tried) reads palette entries past
// the file's palette from uninitialised memory, fills a truncated file with
// zeros without an error and rounds 16-bit colours unlike PIL. Every offset
// below is checked against the data's length before it is read.
uint32_t le32(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24); }
uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

enum Compression : uint32_t { kRaw = 0, kRle8 = 1, kRle4 = 2, kBitfields = 3 };

class BmpDecoder final : public ImageDecoder {
 public:
  void open(std::span<const uint8_t> data, int64_t max_pixels) {
    data_ = data;
    need(18, "file header");
    offset_ = le32(&data[10]);
    const uint32_t header_size = le32(&data[14]);
    int64_t width = 0, height = 0;
    size_t palette_entry = 4;
    if (header_size == 12) {
      need(14 + 12, "OS/2 header");
      width = le16(&data[18]);
      height = le16(&data[20]);
      bits_ = le16(&data[24]);
      palette_entry = 3;
    } else if (header_size == 40 || header_size == 52 || header_size == 56 || header_size == 64 || header_size == 108 ||
               header_size == 124) {
      need(14 + header_size, "header");
      width = static_cast<int32_t>(le32(&data[18]));
      const int32_t h = static_cast<int32_t>(le32(&data[22]));
      top_down_ = h < 0;
      height = top_down_ ? -static_cast<int64_t>(h) : h;
      bits_ = le16(&data[28]);
      compression_ = le32(&data[30]);
      colors_ = le32(&data[46]);
      if (compression_ == kBitfields) {
        // The masks follow a 40-byte header, or are part of a longer one.
        const size_t at = 14 + 40;
        need(at + 12, "bit field masks");
        masks_ = {le32(&data[at]), le32(&data[at + 4]), le32(&data[at + 8]),
                  header_size >= 56 ? le32(&data[at + 12]) : 0};
      }
    } else {
      fail("unsupported header size " + std::to_string(header_size));
    }
    check_pixel_limit(height, width, max_pixels, "BMP");
    width_ = static_cast<int>(width);
    height_ = static_cast<int>(height);
    check_format();
    // No pixel offset: the data follows the header (and the masks), as PIL reads it.
    if (offset_ == 0) offset_ = 14 + header_size + (compression_ == kBitfields && header_size == 40 ? 12 : 0);
    if (bits_ <= 8) read_palette(14 + header_size, palette_entry, header_size);
    if (compression_ == kRaw || compression_ == kBitfields) {
      stride_ = ((static_cast<size_t>(width_) * bits_ + 31) >> 3) & ~size_t{3};
      const size_t need_bytes =
          checked_mul(stride_, static_cast<size_t>(height_), "BMP data size", ErrorKind::kTooLarge);
      if (offset_ > data_.size() || data_.size() - offset_ < need_bytes) {
        fail("truncated data (" + std::to_string(offset_ > data_.size() ? 0 : data_.size() - offset_) + " of " +
             std::to_string(need_bytes) + " bytes)");
      }
    } else if (offset_ > data_.size()) {
      fail("pixel data offset " + std::to_string(offset_) + " is past the end of the file");
    }
    info_.format = ImageFormat::kBmp;
    info_.width = width_;
    info_.height = height_;
  }

  Decoded decode(const DecodeRequest& request, Scratch& scratch) override {
    const size_t row_bytes = static_cast<size_t>(width_) * 3;
    uint8_t* out = grow_to(scratch.decoded, row_bytes * height_);
    if (compression_ == kRle8 || compression_ == kRle4) {
      decode_rle(out, row_bytes, scratch.converted);
    } else {
      for (int y = 0; y < height_; ++y) {
        const uint8_t* row = data_.data() + offset_ + stride_ * static_cast<size_t>(y);
        decode_row(row, out + row_bytes * stored_row(y));
      }
    }
    ImageView full{out, height_, width_, 3, static_cast<ptrdiff_t>(row_bytes)};
    if (request.channels == 1) full = rgb_to_gray(full, scratch.converted);
    return oriented_region(full, 1, request, scratch);
  }

 private:
  [[noreturn]] static void fail(const std::string& what) { throw Error(ErrorKind::kDecode, "BMP: " + what); }

  void need(size_t bytes, const char* what) const {
    if (data_.size() < bytes) fail(std::string("truncated ") + what);
  }

  // Rows are stored bottom-up unless the height is negative.
  int stored_row(int y) const noexcept { return top_down_ ? y : height_ - 1 - y; }

  void check_format() {
    const bool palette = bits_ == 1 || bits_ == 4 || bits_ == 8;
    if (!palette && bits_ != 16 && bits_ != 24 && bits_ != 32) fail("unsupported bit depth " + std::to_string(bits_));
    if (compression_ == kRle8 || compression_ == kRle4) {
      if (!palette) fail("RLE compression with " + std::to_string(bits_) + " bits per pixel");
    } else if (compression_ == kBitfields) {
      // The layouts PIL reads; others are refused as PIL refuses them.
      const uint32_t r = masks_[0], g = masks_[1], b = masks_[2], a = masks_[3];
      auto is = [&](uint32_t mr, uint32_t mg, uint32_t mb) { return r == mr && g == mg && b == mb; };
      bool ok = false;
      if (bits_ == 16) ok = is(0xF800, 0x7E0, 0x1F) || is(0x7C00, 0x3E0, 0x1F);
      if (bits_ == 24) ok = is(0xFF0000, 0xFF00, 0xFF);
      if (bits_ == 32) {
        ok = is(0xFF0000, 0xFF00, 0xFF) || is(0xFF000000, 0xFF0000, 0xFF00) || is(0xFF000000, 0xFF00, 0xFF) ||
             is(0xFF, 0xFF00, 0xFF0000) || (r == 0 && g == 0 && b == 0 && a == 0);
        if (r == 0 && g == 0 && b == 0) masks_ = {0xFF0000, 0xFF00, 0xFF, 0};  // PIL reads these as BGRA.
      }
      if (!ok) fail("unsupported bit field layout");
    } else if (compression_ != kRaw) {
      fail("unsupported compression " + std::to_string(compression_) + " (JPEG or PNG inside BMP)");
    } else if (bits_ == 16) {
      masks_ = {0x7C00, 0x3E0, 0x1F, 0};
    } else if (bits_ == 32) {
      masks_ = {0xFF0000, 0xFF00, 0xFF, 0};
    }
  }

  // The colour table, as PIL reads it: `colors` entries (all 2^bits when the
  // header says 0) right after the header. A table that is the gray ramp makes
  // PIL read indices as gray levels (mode "L"): an index past the table is then
  // its own level, otherwise black.
  void read_palette(size_t at, size_t entry, uint32_t header_size) {
    const uint32_t colors = colors_ != 0 ? colors_ : (1u << bits_);
    if (colors > 65536) fail("palette of " + std::to_string(colors) + " colours");
    const size_t bytes = static_cast<size_t>(colors) * entry;
    if (at > data_.size() || data_.size() - at < bytes) fail("truncated palette");
    palette_.fill({0, 0, 0});
    bool gray = true;
    for (uint32_t i = 0; i < colors; ++i) {
      const uint8_t* p = data_.data() + at + i * entry;
      const uint8_t level = colors == 2 ? (i == 0 ? 0 : 255) : static_cast<uint8_t>(i);
      if (i < 256) palette_[i] = {p[2], p[1], p[0]};
      if (p[0] != level || p[1] != level || p[2] != level || i > 255) gray = false;
    }
    if (gray && colors > 2) {
      for (int i = 0; i < 256; ++i) palette_[i] = {uint8_t(i), uint8_t(i), uint8_t(i)};
    }
    // Files whose pixel offset leaves out the palette (PIL's correction).
    if (offset_ == 14 + header_size) offset_ += static_cast<uint32_t>(bytes);
  }

  void put_index(uint8_t* px, unsigned index) const noexcept {
    const auto& c = palette_[index & 255];
    px[0] = c[0];
    px[1] = c[1];
    px[2] = c[2];
  }

  // One stored row to RGB. 16-bit channels scale as PIL: v * 255 / max, floored.
  void decode_row(const uint8_t* in, uint8_t* out) const {
    switch (bits_) {
      case 1:
      case 4:
      case 8: {
        const int per_byte = 8 / bits_, mask = (1 << bits_) - 1;
        for (int x = 0; x < width_; ++x) {
          const int shift = 8 - bits_ * (x % per_byte + 1);
          put_index(out + 3 * x, (in[x / per_byte] >> shift) & mask);
        }
        break;
      }
      case 16: {
        const bool r6 = masks_[0] == 0xF800;
        for (int x = 0; x < width_; ++x, in += 2, out += 3) {
          const unsigned v = le16(in);
          out[0] = static_cast<uint8_t>(((v >> (r6 ? 11 : 10)) & 31) * 255 / 31);
          out[1] = static_cast<uint8_t>(r6 ? ((v >> 5) & 63) * 255 / 63 : ((v >> 5) & 31) * 255 / 31);
          out[2] = static_cast<uint8_t>((v & 31) * 255 / 31);
        }
        break;
      }
      case 24:
        for (int x = 0; x < width_; ++x, in += 3, out += 3) {
          out[0] = in[2];
          out[1] = in[1];
          out[2] = in[0];
        }
        break;
      default: {  // 32: each mask is one whole byte (check_format).
        const int rs = shift_of(masks_[0]), gs = shift_of(masks_[1]), bs = shift_of(masks_[2]);
        for (int x = 0; x < width_; ++x, in += 4, out += 3) {
          const uint32_t v = le32(in);
          out[0] = static_cast<uint8_t>(v >> rs);
          out[1] = static_cast<uint8_t>(v >> gs);
          out[2] = static_cast<uint8_t>(v >> bs);
        }
      }
    }
  }

  static int shift_of(uint32_t mask) noexcept {
    int s = 0;
    while (s < 24 && ((mask >> s) & 1) == 0) ++s;
    return s;
  }

  // RLE8/RLE4 into one index per pixel (rows in stored order, unset pixels
  // index 0), as PIL's BmpRleDecoder; then through the palette.
  void decode_rle(uint8_t* out, size_t row_bytes, std::vector<uint8_t>& indices) const {
    const bool rle4 = compression_ == kRle4;
    const size_t total = static_cast<size_t>(width_) * height_;
    indices.assign(total, 0);
    size_t n = 0, pos = offset_;
    size_t x = 0;
    const size_t w = static_cast<size_t>(width_);
    while (n < total) {
      if (pos + 2 > data_.size()) fail("truncated RLE data");
      size_t count = data_[pos];
      const uint8_t value = data_[pos + 1];
      pos += 2;
      if (count != 0) {  // A run.
        count = x + count > w ? (x < w ? w - x : 0) : count;
        count = std::min(count, total - n);
        for (size_t i = 0; i < count; ++i) indices[n++] = rle4 ? (i % 2 == 0 ? value >> 4 : value & 15) : value;
        x += count;
      } else if (value == 0) {  // End of line.
        n = (n + w - 1) / w * w;
        x = 0;
      } else if (value == 1) {  // End of bitmap.
        break;
      } else if (value == 2) {  // Delta: skip right, up.
        if (pos + 2 > data_.size()) fail("truncated RLE data");
        n = std::min(total, n + data_[pos] + static_cast<size_t>(data_[pos + 1]) * w);
        pos += 2;
        x = n % w;
      } else {  // Absolute: `value` literal pixels, padded to an even file offset.
        const size_t literal = std::min<size_t>(value, total - n);
        const size_t bytes = rle4 ? (literal + 1) / 2 : literal;
        if (pos + bytes > data_.size()) fail("truncated RLE data");
        for (size_t i = 0; i < literal; ++i) {
          indices[n++] = rle4 ? (i % 2 == 0 ? data_[pos + i / 2] >> 4 : data_[pos + i / 2] & 15) : data_[pos + i];
        }
        pos += bytes;
        x += value;
        if (pos % 2 != 0) ++pos;
      }
    }
    for (int y = 0; y < height_; ++y) {
      const uint8_t* in = indices.data() + w * y;
      uint8_t* o = out + row_bytes * stored_row(y);
      for (size_t i = 0; i < w; ++i) put_index(o + 3 * i, in[i]);
    }
  }

  std::span<const uint8_t> data_;
  uint32_t offset_ = 0;
  uint32_t compression_ = kRaw;
  uint32_t colors_ = 0;
  int bits_ = 0;
  int width_ = 0;
  int height_ = 0;
  bool top_down_ = false;
  size_t stride_ = 0;
  std::array<uint32_t, 4> masks_{};
  std::array<std::array<uint8_t, 3>, 256> palette_{};
};

}  // namespace

std::unique_ptr<ImageDecoder> open_bmp(std::span<const uint8_t> data, int64_t max_pixels) {
  auto decoder = std::make_unique<BmpDecoder>();
  decoder->open(data, max_pixels);
  return decoder;
}

}  // namespace conveyor::detail

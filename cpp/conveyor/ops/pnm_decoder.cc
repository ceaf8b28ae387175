#include "conveyor/ops/pnm_decoder.h"

#include <cmath>
#include <cstring>
#include <string>

#include "conveyor/core/checked_size.h"
#include "conveyor/core/error.h"
#include "conveyor/ops/orientation.h"

namespace conveyor::detail {

namespace {

// PNM is a text header and raw or decimal samples: no library adds anything
// over reading it here (stb_image reads only P5/P6 and does not rescale a
// maxval other than 255). The rules are PIL's (PpmImagePlugin), so that the
// pixels are those torchvision's loader gives.
class PnmDecoder final : public ImageDecoder {
 public:
  void open(std::span<const uint8_t> data, int64_t max_pixels) {
    data_ = data;
    kind_ = data[1] - '0';  // open_image_decoder checked "P1".."P6" and a space.
    pos_ = 2;
    const int64_t width = header_number("width");
    const int64_t height = header_number("height");
    check_pixel_limit(height, width, max_pixels, "PNM");
    if (kind_ != 1 && kind_ != 4) {
      maxval_ = header_number("maxval");
      if (maxval_ < 1 || maxval_ > 65535) fail("maxval " + std::to_string(maxval_) + " is not in 1..65535");
    }
    // One whitespace character ends the header (read with the last number).
    width_ = static_cast<int>(width);
    height_ = static_cast<int>(height);
    if (raw()) {
      const int64_t row = kind_ == 4 ? (width + 7) / 8 : width * channels() * (maxval_ > 255 ? 2 : 1);
      const int64_t need = checked_mul(row, height, "PNM data size", ErrorKind::kTooLarge);
      const int64_t have = static_cast<int64_t>(data_.size() - pos_);
      if (have < need) {
        fail("truncated data (" + std::to_string(have) + " of " + std::to_string(need) + " bytes)");
      }
    }
    info_.format = ImageFormat::kPnm;
    info_.width = width_;
    info_.height = height_;
  }

  Decoded decode(const DecodeRequest& request, Scratch& scratch) override {
    const size_t pixels = static_cast<size_t>(width_) * height_;
    uint8_t* out = grow_to(scratch.decoded, pixels * 3);
    if (kind_ == 1 || kind_ == 4) {
      decode_bits(out);
    } else {
      const int c = channels();
      const size_t samples = pixels * c;
      // PIL: round(value / maxval * 255) in double precision, half to even
      // (Python's round), values above maxval clipped in raw data; a table
      // gives the same for every 8-bit value.
      uint8_t table[256];
      const bool use_table = maxval_ <= 255;
      if (use_table) {
        for (int v = 0; v <= maxval_; ++v) table[v] = scale(v);
      }
      for (size_t i = 0; i < samples; ++i) {
        int64_t v = 0;
        if (!raw()) {
          v = plain_sample();
        } else if (maxval_ > 255) {
          v = (data_[pos_ + 2 * i] << 8) | data_[pos_ + 2 * i + 1];
        } else {
          v = data_[pos_ + i];
        }
        const uint8_t value = use_table && v <= maxval_ ? table[v] : scale(v);
        if (c == 3) {
          out[i] = value;
        } else {
          out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = value;
        }
      }
    }
    ImageView full{out, height_, width_, 3, static_cast<ptrdiff_t>(width_) * 3};
    if (request.channels == 1) full = rgb_to_gray(full, scratch.converted);
    return oriented_region(full, 1, request, scratch);
  }

 private:
  bool raw() const noexcept { return kind_ >= 4; }
  int channels() const noexcept { return kind_ == 3 || kind_ == 6 ? 3 : 1; }

  [[noreturn]] static void fail(const std::string& what) { throw Error(ErrorKind::kDecode, "PNM: " + what); }

  uint8_t scale(int64_t v) const {
    if (v > maxval_) {
      // PIL refuses such a value in decimal data and clips it in raw data.
      if (!raw()) fail("sample " + std::to_string(v) + " exceeds maxval " + std::to_string(maxval_));
      return 255;
    }
    if (maxval_ == 255) return static_cast<uint8_t>(v);
    return static_cast<uint8_t>(std::nearbyint(static_cast<double>(v) / static_cast<double>(maxval_) * 255.0));
  }

  bool space(uint8_t c) const noexcept {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  }

  // Skips whitespace and '#' comments (to the end of the line).
  void skip_space_and_comments() {
    while (pos_ < data_.size()) {
      if (space(data_[pos_])) {
        ++pos_;
      } else if (data_[pos_] == '#') {
        while (pos_ < data_.size() && data_[pos_] != '\n' && data_[pos_] != '\r') ++pos_;
      } else {
        break;
      }
    }
  }

  // A decimal number of the header and the one whitespace character after it.
  int64_t header_number(const char* what) {
    skip_space_and_comments();
    const size_t start = pos_;
    int64_t value = 0;
    while (pos_ < data_.size() && data_[pos_] >= '0' && data_[pos_] <= '9') {
      if (pos_ - start >= 10) fail(std::string(what) + " has more than 10 digits");
      value = value * 10 + (data_[pos_++] - '0');
    }
    if (pos_ == start) {
      fail(pos_ >= data_.size() ? std::string("truncated header (no ") + what + ")"
                                : std::string("invalid header: expected the ") + what + " as a decimal number");
    }
    if (pos_ >= data_.size()) fail(std::string("truncated header (after the ") + what + ")");
    if (!space(data_[pos_])) fail(std::string("invalid header: no whitespace after the ") + what);
    ++pos_;
    return value;
  }

  // The next decimal sample of P2/P3 data.
  int64_t plain_sample() {
    skip_space_and_comments();
    const size_t start = pos_;
    int64_t value = 0;
    while (pos_ < data_.size() && data_[pos_] >= '0' && data_[pos_] <= '9') {
      if (pos_ - start >= 10) fail("a sample has more than 10 digits");
      value = value * 10 + (data_[pos_++] - '0');
    }
    if (pos_ == start) {
      fail(pos_ >= data_.size() ? "truncated data" : "invalid character in decimal data");
    }
    return value;
  }

  // P1 (a '0' or '1' per pixel, whitespace optional) and P4 (8 pixels a byte,
  // rows padded to a byte): 1 is black.
  void decode_bits(uint8_t* out) {
    const size_t row_bytes = (static_cast<size_t>(width_) + 7) / 8;
    for (int y = 0; y < height_; ++y) {
      for (int x = 0; x < width_; ++x) {
        bool black = false;
        if (kind_ == 4) {
          black = (data_[pos_ + y * row_bytes + (x >> 3)] >> (7 - (x & 7))) & 1;
        } else {
          skip_space_and_comments();
          if (pos_ >= data_.size()) fail("truncated data");
          if (data_[pos_] != '0' && data_[pos_] != '1') fail("invalid character in bitmap data");
          black = data_[pos_++] == '1';
        }
        uint8_t* px = out + (static_cast<size_t>(y) * width_ + x) * 3;
        px[0] = px[1] = px[2] = black ? 0 : 255;
      }
    }
  }

  std::span<const uint8_t> data_;
  size_t pos_ = 0;
  int kind_ = 0;
  int64_t maxval_ = 1;
  int width_ = 0;
  int height_ = 0;
};

}  // namespace

std::unique_ptr<ImageDecoder> open_pnm(std::span<const uint8_t> data, int64_t max_pixels) {
  auto decoder = std::make_unique<PnmDecoder>();
  decoder->open(data, max_pixels);
  return decoder;
}

}  // namespace conveyor::detail

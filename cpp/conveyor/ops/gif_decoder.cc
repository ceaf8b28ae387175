#include "conveyor/ops/gif_decoder.h"

#include <gif_lib.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "conveyor/core/error.h"
#include "conveyor/ops/orientation.h"

namespace conveyor::detail {

namespace {

constexpr int kGraphicsControl = 0xF9;

// giflib reads through this callback: a cursor over the encoded bytes.
struct Reader {
  std::span<const uint8_t> data;
  size_t pos = 0;
};

int read_bytes(GifFileType* gif, GifByteType* out, int length) {
  auto* reader = static_cast<Reader*>(gif->UserData);
  const size_t n = std::min(static_cast<size_t>(std::max(length, 0)), reader->data.size() - reader->pos);
  std::memcpy(out, reader->data.data() + reader->pos, n);
  reader->pos += n;
  return static_cast<int>(n);
}

// The first frame as PIL's GifImagePlugin gives it: a canvas of the logical
// screen (grown to hold the frame if it sticks out) filled with the frame's
// transparent index, else index 0; the frame's indices written over its
// rectangle (transparent ones too); then every index through the frame's
// colour table (its own, else the global one). An index past the table is
// black; a table that is the gray ramp (or none) gives the index as gray.
class GifDecoder final : public ImageDecoder {
 public:
  GifDecoder() = default;
  GifDecoder(const GifDecoder&) = delete;
  GifDecoder& operator=(const GifDecoder&) = delete;
  ~GifDecoder() override {
    int ignored = 0;
    if (gif_ != nullptr) DGifCloseFile(gif_, &ignored);
  }

  void open(std::span<const uint8_t> data, int64_t max_pixels) {
    reader_.data = data;
    int code = 0;
    gif_ = DGifOpen(&reader_, read_bytes, &code);
    if (gif_ == nullptr) fail(code);
    // Records up to the first image: a graphics control extension before it
    // gives its transparent index.
    for (;;) {
      GifRecordType record = UNDEFINED_RECORD_TYPE;
      check(DGifGetRecordType(gif_, &record));
      if (record == IMAGE_DESC_RECORD_TYPE) break;
      if (record == TERMINATE_RECORD_TYPE) throw Error(ErrorKind::kDecode, "GIF: no image");
      if (record != EXTENSION_RECORD_TYPE) throw Error(ErrorKind::kDecode, "GIF: corrupt record");
      int ext_code = 0;
      GifByteType* block = nullptr;
      check(DGifGetExtension(gif_, &ext_code, &block));
      if (ext_code == kGraphicsControl && block != nullptr && block[0] >= 4 && (block[1] & 1) != 0) {
        transparent_ = block[4];
      }
      while (block != nullptr) check(DGifGetExtensionNext(gif_, &block));
    }
    check(DGifGetImageDesc(gif_));
    const GifImageDesc& frame = gif_->Image;
    if (frame.Width <= 0 || frame.Height <= 0) throw Error(ErrorKind::kDecode, "GIF: empty frame");
    const int64_t width = std::max<int64_t>(gif_->SWidth, int64_t{frame.Left} + frame.Width);
    const int64_t height = std::max<int64_t>(gif_->SHeight, int64_t{frame.Top} + frame.Height);
    check_pixel_limit(height, width, max_pixels, "GIF");
    width_ = static_cast<int>(width);
    height_ = static_cast<int>(height);
    set_palette(frame.ColorMap != nullptr ? frame.ColorMap : gif_->SColorMap);
    info_.format = ImageFormat::kGif;
    info_.width = width_;
    info_.height = height_;
  }

  Decoded decode(const DecodeRequest& request, Scratch& scratch) override {
    const GifImageDesc& frame = gif_->Image;
    const size_t w = static_cast<size_t>(width_);
    std::vector<uint8_t>& indices = scratch.converted;
    indices.assign(w * height_, static_cast<uint8_t>(transparent_ >= 0 ? transparent_ : 0));
    // Interlaced frames store rows 0, 8, 16, ..., then 4, 12, ..., 2, 6, ..., 1, 3, ...
    static constexpr int kStart[] = {0, 4, 2, 1}, kStep[] = {8, 8, 4, 2};
    const int passes = frame.Interlace ? 4 : 1;
    for (int pass = 0; pass < passes; ++pass) {
      const int step = frame.Interlace ? kStep[pass] : 1;
      for (int y = frame.Interlace ? kStart[pass] : 0; y < frame.Height; y += step) {
        uint8_t* row = indices.data() + (static_cast<size_t>(frame.Top) + y) * w + frame.Left;
        check(DGifGetLine(gif_, row, frame.Width));
      }
    }
    const size_t row_bytes = w * 3;
    uint8_t* out = grow_to(scratch.decoded, row_bytes * height_);
    for (size_t i = 0; i < indices.size(); ++i) std::memcpy(out + 3 * i, palette_[indices[i]].data(), 3);
    ImageView full{out, height_, width_, 3, static_cast<ptrdiff_t>(row_bytes)};
    if (request.channels == 1) full = rgb_to_gray(full, scratch.converted);
    return oriented_region(full, 1, request, scratch);
  }

 private:
  [[noreturn]] static void fail(int code) {
    if (code == D_GIF_ERR_READ_FAILED) throw Error(ErrorKind::kDecode, "GIF: truncated data");
    const char* what = GifErrorString(code);
    throw Error(ErrorKind::kDecode, std::string("GIF: ") + (what != nullptr ? what : "corrupt data"));
  }

  void check(int status) const {
    if (status == GIF_ERROR) fail(gif_->Error);
  }

  void set_palette(const ColorMapObject* map) {
    for (int i = 0; i < 256; ++i) palette_[i] = {uint8_t(i), uint8_t(i), uint8_t(i)};
    if (map == nullptr) return;
    const int count = std::clamp(map->ColorCount, 0, 256);
    bool ramp = true;
    for (int i = 0; i < count; ++i) {
      const GifColorType& c = map->Colors[i];
      ramp = ramp && c.Red == i && c.Green == i && c.Blue == i;
    }
    if (ramp) return;
    for (int i = 0; i < 256; ++i) {
      palette_[i] = {0, 0, 0};
      if (i < count) palette_[i] = {map->Colors[i].Red, map->Colors[i].Green, map->Colors[i].Blue};
    }
  }

  Reader reader_;
  GifFileType* gif_ = nullptr;
  int transparent_ = -1;
  int width_ = 0;
  int height_ = 0;
  std::array<std::array<uint8_t, 3>, 256> palette_{};
};

}  // namespace

std::unique_ptr<ImageDecoder> open_gif(std::span<const uint8_t> data, int64_t max_pixels) {
  auto decoder = std::make_unique<GifDecoder>();
  decoder->open(data, max_pixels);
  return decoder;
}

}  // namespace conveyor::detail

#pragma once

#include <array>
#include <string_view>

namespace conveyor {

/// The image formats the decoders (ops/image_decode.h) read, as lower-case
/// file extensions without the dot, in order of preference. The one list
/// behind ImageFolder's extensions (Python's IMG_EXTENSIONS), the image member
/// of a tar sample and what `conveyor pack` packs, so that no listed file is
/// one the decoder refuses. The set is torchvision's IMG_EXTENSIONS, so that
/// ImageFolder lists the same files; GIF (not in it) is decoded wherever its
/// bytes arrive.
inline constexpr std::array<std::string_view, 9> kImageExtensions = {"jpg",  "jpeg", "png", "webp", "tif",
                                                                     "tiff", "bmp",  "ppm", "pgm"};

/// True when `extension` (lower-case, without the dot) is in kImageExtensions.
constexpr bool is_image_extension(std::string_view extension) noexcept {
  for (std::string_view e : kImageExtensions) {
    if (e == extension) return true;
  }
  return false;
}

}  // namespace conveyor

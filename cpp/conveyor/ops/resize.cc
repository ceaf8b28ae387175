#include "conveyor/ops/resize.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

namespace conveyor {

namespace {

// Largest shrink the tent filter handles directly; beyond it an integer box
// reduction comes first.
constexpr double kMaxTentScale = 8.0;
// OpenCV's remap (behind warpAffine) needs both images under SHRT_MAX pixels
// a side; a box wider than this is box-reduced first as well.
constexpr int kMaxWarpSide = 32000;

cv::Mat as_mat(const ImageView& v) {
  return cv::Mat(v.height, v.width, CV_8UC(v.channels), const_cast<uint8_t*>(v.data), static_cast<size_t>(v.stride));
}

// PIL's bilinear antialiasing kernel for a shrink by `s` > 1: a triangle of
// radius `s` source pixels, here centred on each source pixel (the bilinear
// sampling that follows places it at the exact output position).
cv::Mat tent_kernel(double s) {
  const int r = s > 1.0 ? static_cast<int>(std::ceil(s)) - 1 : 0;
  cv::Mat kernel(2 * r + 1, 1, CV_32F);
  double sum = 0;
  for (int k = -r; k <= r; ++k) {
    const double w = s > 1.0 ? 1.0 - std::abs(k) / s : 1.0;
    kernel.at<float>(k + r) = static_cast<float>(w);
    sum += w;
  }
  kernel /= sum;
  return kernel;
}

}  // namespace

void use_single_threaded_opencv() {
  static std::once_flag once;
  std::call_once(once, [] { cv::setNumThreads(0); });
}

void resize_image(const ImageView& src, const BoxF& box, uint8_t* dst, int dst_height, int dst_width,
                  ptrdiff_t dst_stride, bool antialias, std::vector<uint8_t>& scratch) {
  use_single_threaded_opencv();
  const double sx = (box.x1 - box.x0) / dst_width, sy = (box.y1 - box.y0) / dst_height;
  // Cells to average per axis first: strong antialiased shrinks, and boxes
  // too large for warpAffine.
  const auto cells = [&](double scale, double extent) {
    int k = antialias && scale > kMaxTentScale ? static_cast<int>(scale / 4) : 1;
    return std::max(k, static_cast<int>(std::ceil((extent + 8) / kMaxWarpSide)));
  };
  const int kx = cells(sx, box.x1 - box.x0), ky = cells(sy, box.y1 - box.y0);
  if (kx > 1 || ky > 1) {
    // The tent costs ~2s taps per source pixel and axis: a strong shrink (a
    // 10000 x 1 strip to 1 x 1, a large PNG to 64 px) would take seconds. An
    // exact box average by an integer factor first (INTER_AREA, one pass)
    // leaves a shrink of 4-8 for the tent; the result stays within the PIL
    // parity tolerance (docs/design/resize.md).
    // Whole kx x ky cells covering the box and a margin of two cells.
    int x0 = std::max(static_cast<int>(std::floor(box.x0)) - 2 * kx, 0);
    int y0 = std::max(static_cast<int>(std::floor(box.y0)) - 2 * ky, 0);
    int x1 = std::min(static_cast<int>(std::ceil(box.x1)) + 2 * kx, src.width);
    int y1 = std::min(static_cast<int>(std::ceil(box.y1)) + 2 * ky, src.height);
    x0 = std::max(x0 - (kx - (x1 - x0) % kx) % kx, 0);
    y0 = std::max(y0 - (ky - (y1 - y0) % ky) % ky, 0);
    x1 = x0 + std::max((x1 - x0) / kx, 1) * kx;
    y1 = y0 + std::max((y1 - y0) / ky, 1) * ky;
    if (x1 <= src.width && y1 <= src.height) {
      cv::Mat reduced;
      cv::resize(as_mat(src)(cv::Rect(x0, y0, x1 - x0, y1 - y0)), reduced, cv::Size((x1 - x0) / kx, (y1 - y0) / ky), 0,
                 0, cv::INTER_AREA);
      const ImageView view{reduced.data, reduced.rows, reduced.cols, src.channels,
                           static_cast<ptrdiff_t>(reduced.step)};
      const BoxF in_reduced{(box.x0 - x0) / kx, (box.y0 - y0) / ky, (box.x1 - x0) / kx, (box.y1 - y0) / ky};
      resize_image(view, in_reduced, dst, dst_height, dst_width, dst_stride, antialias, scratch);
      return;
    }
  }
  cv::Mat in = as_mat(src);
  double ox = box.x0, oy = box.y0;  // Box origin in `in`.
  if (antialias && (sx > 1.0 || sy > 1.0)) {
    // Smooth only the source rows and columns the samples read (box plus the
    // kernel radius and one interpolation pixel); neighbours outside that
    // window but inside `src` are used, beyond `src` edges are replicated.
    const int rx = static_cast<int>(std::ceil(std::max(sx, 1.0))), ry = static_cast<int>(std::ceil(std::max(sy, 1.0)));
    const int x0 = std::clamp(static_cast<int>(std::floor(box.x0)) - rx - 1, 0, src.width - 1);
    const int x1 = std::clamp(static_cast<int>(std::ceil(box.x1)) + rx + 1, x0 + 1, src.width);
    const int y0 = std::clamp(static_cast<int>(std::floor(box.y0)) - ry - 1, 0, src.height - 1);
    const int y1 = std::clamp(static_cast<int>(std::ceil(box.y1)) + ry + 1, y0 + 1, src.height);
    const cv::Mat window = in(cv::Rect(x0, y0, x1 - x0, y1 - y0));
    scratch.resize(static_cast<size_t>(x1 - x0) * (y1 - y0) * src.channels);
    cv::Mat smooth(y1 - y0, x1 - x0, CV_8UC(src.channels), scratch.data());
    if (sx <= 2.0 && sy <= 2.0) {
      // Three taps {a, 1, a} at most: that is a 3-tap Gaussian with
      // exp(-1 / (2 sigma^2)) = a, and OpenCV's fixed-point GaussianBlur is
      // ~25% faster than the float sepFilter2D.
      auto sigma = [](double s) { return s > 1.0 ? std::sqrt(-1.0 / (2.0 * std::log(1.0 - 1.0 / s))) : 0.0; };
      const cv::Size ksize(sx > 1.0 ? 3 : 1, sy > 1.0 ? 3 : 1);
      cv::GaussianBlur(window, smooth, ksize, sigma(sx), sigma(sy) > 0 ? sigma(sy) : 1e-3, cv::BORDER_REPLICATE);
    } else {
      cv::sepFilter2D(window, smooth, -1, tent_kernel(sx), tent_kernel(sy), cv::Point(-1, -1), 0, cv::BORDER_REPLICATE);
    }
    in = smooth;
    ox -= x0;
    oy -= y0;
  }
  // Output pixel centre x + 0.5 maps to source centre ox + (x + 0.5) * sx (minus
  // 0.5 for pixel-index coordinates), as in PIL and torchvision.
  cv::Mat out(dst_height, dst_width, CV_8UC(src.channels), dst, static_cast<size_t>(dst_stride));
  const auto whole = [](double v) { return std::abs(v - std::round(v)) < 1e-9; };
  if (whole(ox) && whole(oy) && whole(box.x1 - box.x0) && whole(box.y1 - box.y0)) {
    // A box of whole pixels: cv::resize's INTER_LINEAR uses that same mapping
    // and is about twice as fast as warpAffine (separable, no per-pixel maps).
    const cv::Rect rect(static_cast<int>(std::lround(ox)), static_cast<int>(std::lround(oy)),
                        static_cast<int>(std::lround(box.x1 - box.x0)), static_cast<int>(std::lround(box.y1 - box.y0)));
    if ((rect & cv::Rect(0, 0, in.cols, in.rows)) == rect) {
      cv::resize(in(rect), out, out.size(), 0, 0, cv::INTER_LINEAR);
      return;
    }
  }
  // Only the box and the pixels bilinear sampling reaches beside it: the
  // rest of a large source must not reach warpAffine (size limit, cost).
  const int wx0 = std::clamp(static_cast<int>(std::floor(ox)) - 2, 0, in.cols - 1);
  const int wy0 = std::clamp(static_cast<int>(std::floor(oy)) - 2, 0, in.rows - 1);
  const int wx1 = std::clamp(static_cast<int>(std::ceil(ox + (box.x1 - box.x0))) + 2, wx0 + 1, in.cols);
  const int wy1 = std::clamp(static_cast<int>(std::ceil(oy + (box.y1 - box.y0))) + 2, wy0 + 1, in.rows);
  in = in(cv::Rect(wx0, wy0, wx1 - wx0, wy1 - wy0));
  ox -= wx0;
  oy -= wy0;
  const cv::Matx23d to_source(sx, 0, ox + 0.5 * sx - 0.5, 0, sy, oy + 0.5 * sy - 0.5);
  cv::warpAffine(in, out, to_source, out.size(), cv::INTER_LINEAR | cv::WARP_INVERSE_MAP, cv::BORDER_REPLICATE);
}

}  // namespace conveyor

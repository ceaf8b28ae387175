#include "conveyor/ops/resize.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

namespace conveyor {

namespace {

cv::Mat as_mat(const ImageView& v) {
  return cv::Mat(v.height, v.width, CV_8UC(v.channels), const_cast<uint8_t*>(v.data), static_cast<size_t>(v.stride));
}

int filter_for(int src, int dst, bool antialias) { return antialias && dst < src ? cv::INTER_AREA : cv::INTER_LINEAR; }

// A box of width `s` pixels centred on a pixel, sampled per pixel (each tap is
// the overlap of its pixel with the box), normalized. INTER_AREA shrinking by
// `s` is a box of width `s`; convolving first with this box makes the whole a
// triangle ("tent") of radius `s`: exactly PIL's antialiased bilinear filter.
cv::Mat box_kernel(double s) {
  const int r = s > 1.0 ? static_cast<int>(std::ceil(s / 2 - 0.5)) : 0;
  cv::Mat kernel(2 * r + 1, 1, CV_32F);
  double sum = 0;
  for (int k = -r; k <= r; ++k) {
    const double w = s > 1.0 ? std::max(0.0, std::min(k + 0.5, s / 2) - std::max(k - 0.5, -s / 2)) : 1.0;
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

void resize_image(const ImageView& src, uint8_t* dst, int dst_height, int dst_width, ptrdiff_t dst_stride,
                  bool antialias, std::vector<uint8_t>& tmp, std::vector<uint8_t>& prefiltered) {
  use_single_threaded_opencv();
  cv::Mat out(dst_height, dst_width, CV_8UC(src.channels), dst, static_cast<size_t>(dst_stride));
  const int fx = filter_for(src.width, dst_width, antialias);
  const int fy = filter_for(src.height, dst_height, antialias);
  cv::Mat in = as_mat(src);
  if (fx == cv::INTER_AREA || fy == cv::INTER_AREA) {
    // Prefilter the shrinking axes (see box_kernel), within the view only
    // (BORDER_ISOLATED: PIL crops first, then resizes).
    const double sx = fx == cv::INTER_AREA ? static_cast<double>(src.width) / dst_width : 1.0;
    const double sy = fy == cv::INTER_AREA ? static_cast<double>(src.height) / dst_height : 1.0;
    prefiltered.resize(static_cast<size_t>(src.height) * src.width * src.channels);
    cv::Mat smooth(src.height, src.width, CV_8UC(src.channels), prefiltered.data());
    cv::sepFilter2D(in, smooth, -1, box_kernel(sx), box_kernel(sy), cv::Point(-1, -1), 0,
                    cv::BORDER_REPLICATE | cv::BORDER_ISOLATED);
    in = smooth;
  }
  if (fx == fy) {
    cv::resize(in, out, out.size(), 0, 0, fx);
    return;
  }
  // One axis shrinks, the other grows: INTER_AREA would not antialias the
  // shrinking axis properly, so shrink it first, then grow the other.
  const bool width_first = fx == cv::INTER_AREA;
  const int mid_h = width_first ? src.height : dst_height;
  const int mid_w = width_first ? dst_width : src.width;
  tmp.resize(static_cast<size_t>(mid_h) * mid_w * src.channels);
  cv::Mat mid(mid_h, mid_w, CV_8UC(src.channels), tmp.data());
  cv::resize(in, mid, mid.size(), 0, 0, cv::INTER_AREA);
  cv::resize(mid, out, out.size(), 0, 0, cv::INTER_LINEAR);
}

}  // namespace conveyor

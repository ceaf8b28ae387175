#include "conveyor/ops/resize.h"

#include <mutex>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

namespace conveyor {

namespace {

cv::Mat as_mat(const ImageView& v) {
  return cv::Mat(v.height, v.width, CV_8UC(v.channels), const_cast<uint8_t*>(v.data), static_cast<size_t>(v.stride));
}

int filter_for(int src, int dst, bool antialias) { return antialias && dst < src ? cv::INTER_AREA : cv::INTER_LINEAR; }

}  // namespace

void use_single_threaded_opencv() {
  static std::once_flag once;
  std::call_once(once, [] { cv::setNumThreads(0); });
}

void resize_image(const ImageView& src, uint8_t* dst, int dst_height, int dst_width, ptrdiff_t dst_stride,
                  bool antialias, std::vector<uint8_t>& tmp) {
  use_single_threaded_opencv();
  const cv::Mat in = as_mat(src);
  cv::Mat out(dst_height, dst_width, CV_8UC(src.channels), dst, static_cast<size_t>(dst_stride));
  const int fx = filter_for(src.width, dst_width, antialias);
  const int fy = filter_for(src.height, dst_height, antialias);
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

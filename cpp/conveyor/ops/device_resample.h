// The resample of a decoded image into one batch slot, pixel by pixel, as
// the GPU runs it. One source, compiled twice: by the host compiler (the
// reference the tests compare with ImagePipeline, and the CPU fallback's
// check) and at run time by NVRTC for the device (cuda/device_image_decoder.cc
// embeds this file's text). So it uses only built-in types and the math
// functions both compilers know (NVRTC has them without <cmath>), and the
// device's includer defines CONVEYOR_DEVICE_FUNCTION.
#pragma once

#ifndef __CUDACC_RTC__
#include <cmath>
#endif

#ifndef CONVEYOR_DEVICE_FUNCTION
#define CONVEYOR_DEVICE_FUNCTION inline
#endif

/// What the device needs to know of one sample of a batch: where its decoded
/// pixels are and where its output comes from in them. Plain data, the same
/// layout on the host and the device (8-byte fields first).
struct DeviceSample {
  unsigned long long pixels;                   ///< Decoded RGB, interleaved (a device address on the GPU).
  long long pitch;                             ///< Bytes per decoded row.
  double box_x0, box_y0, box_x1, box_y1;       ///< The source box the covered rectangle resamples.
  int bound_x0, bound_y0, bound_x1, bound_y1;  ///< The source pixels the resample may read.
  int dx0, dy0, rect_w, rect_h;                ///< The covered output rectangle.
  int covered;                                 ///< Whether any output pixel comes from the image.
  int flip, vflip;                             ///< Mirror the output left-right, top-bottom.
  int on_device;                               ///< 0: finished on the host (copied, not resampled).
  int antialias;                               ///< 0: plain bilinear when shrinking.
  unsigned char fill[4];                       ///< The padding's RGB.
};

/// The RGB value of output pixel (gx, gy) of the group's output (before the
/// flips) into rgb[3]: PIL's antialiased bilinear resample of the box (a tent
/// widened by the scale when shrinking), horizontal pass rounded to 8 bits,
/// then vertical, as ImagePipeline's resample does; the fill outside the
/// covered rectangle.
CONVEYOR_DEVICE_FUNCTION void device_resample_pixel(const DeviceSample& s, int gx, int gy, unsigned char* rgb) {
  const int rx = gx - s.dx0, ry = gy - s.dy0;
  if (!s.covered || rx < 0 || ry < 0 || rx >= s.rect_w || ry >= s.rect_h) {
    rgb[0] = s.fill[0];
    rgb[1] = s.fill[1];
    rgb[2] = s.fill[2];
    return;
  }
  // Coordinates from the bound's origin, as the resample of the crop made
  // before the resizes sees them.
  const double scale_x = (s.box_x1 - s.box_x0) / s.rect_w, scale_y = (s.box_y1 - s.box_y0) / s.rect_h;
  const double widen_x = (s.antialias && scale_x > 1.0) ? scale_x : 1.0;
  const double widen_y = (s.antialias && scale_y > 1.0) ? scale_y : 1.0;
  const double center_x = s.box_x0 - s.bound_x0 + (rx + 0.5) * scale_x;
  const double center_y = s.box_y0 - s.bound_y0 + (ry + 0.5) * scale_y;
  const int width = s.bound_x1 - s.bound_x0, height = s.bound_y1 - s.bound_y0;
  int x0 = static_cast<int>(center_x - widen_x + 0.5), x1 = static_cast<int>(center_x + widen_x + 0.5);
  int y0 = static_cast<int>(center_y - widen_y + 0.5), y1 = static_cast<int>(center_y + widen_y + 0.5);
  if (x0 < 0) x0 = 0;
  if (y0 < 0) y0 = 0;
  if (x1 > width) x1 = width;
  if (y1 > height) y1 = height;
  double total_x = 0, total_y = 0;
  for (int x = x0; x < x1; ++x) {
    const double w = 1.0 - fabs((x - center_x + 0.5) / widen_x);
    total_x += w > 0 ? w : 0;
  }
  for (int y = y0; y < y1; ++y) {
    const double w = 1.0 - fabs((y - center_y + 0.5) / widen_y);
    total_y += w > 0 ? w : 0;
  }
  if (total_x <= 0) total_x = 1;
  if (total_y <= 0) total_y = 1;
  double sum[3] = {0, 0, 0};
  const unsigned char* base = reinterpret_cast<const unsigned char*>(s.pixels);
  for (int y = y0; y < y1; ++y) {
    double wy = 1.0 - fabs((y - center_y + 0.5) / widen_y);
    if (wy <= 0) continue;
    wy /= total_y;
    const unsigned char* row = base + (s.bound_y0 + y) * s.pitch + (s.bound_x0 + x0) * 3;
    double h[3] = {0, 0, 0};
    for (int x = x0; x < x1; ++x, row += 3) {
      const double wx = 1.0 - fabs((x - center_x + 0.5) / widen_x);
      if (wx <= 0) continue;
      h[0] += wx * row[0];
      h[1] += wx * row[1];
      h[2] += wx * row[2];
    }
    for (int c = 0; c < 3; ++c) {
      // The horizontal pass's 8-bit intermediate.
      double v = floor(h[c] / total_x + 0.5);
      v = v < 0 ? 0 : (v > 255 ? 255 : v);
      sum[c] += wy * v;
    }
  }
  for (int c = 0; c < 3; ++c) {
    const double v = floor(sum[c] + 0.5);
    rgb[c] = static_cast<unsigned char>(v < 0 ? 0 : (v > 255 ? 255 : v));
  }
}

/// Writes output pixel (ox, oy) of sample `n` into the batch `out`: the flips,
/// the resample, then each channel's value through its table (`tables`:
/// 3 x 256 values of `element` bytes each, the output dtype's bytes of what
/// the pointwise steps make of each 8-bit value), in CHW (`chw`) or HWC.
CONVEYOR_DEVICE_FUNCTION void device_write_pixel(const DeviceSample& s, int n, int ox, int oy, int out_h, int out_w,
                                                 int element, int chw, const unsigned char* tables,
                                                 unsigned char* out) {
  const int gx = s.flip ? out_w - 1 - ox : ox;
  const int gy = s.vflip ? out_h - 1 - oy : oy;
  unsigned char rgb[3];
  device_resample_pixel(s, gx, gy, rgb);
  const long long plane = static_cast<long long>(out_h) * out_w;
  unsigned char* sample = out + static_cast<long long>(n) * plane * 3 * element;
  for (int c = 0; c < 3; ++c) {
    const long long at = chw ? (c * plane + static_cast<long long>(oy) * out_w + ox)
                             : ((static_cast<long long>(oy) * out_w + ox) * 3 + c);
    const unsigned char* value = tables + (c * 256 + rgb[c]) * element;
    for (int b = 0; b < element; ++b) sample[at * element + b] = value[b];
  }
}

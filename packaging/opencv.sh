#!/usr/bin/env bash
# Builds the two OpenCV modules conveyor calls (core, imgproc) as static
# libraries under $1 (default build/opencv), from Debian bookworm's source of
# OpenCV 4.6.0: the version Debian's libopencv-imgproc-dev ships, so every
# build computes what the tests were written against. Nothing else of OpenCV
# is built: no GUI, OpenGL, OpenCL, LAPACK, TBB or codecs, so nothing drags a
# display stack or BLAS into the extension, and the wheel needs no OpenCV
# library of the system (docs/design/decisions.md, "The wheel").
#
# The tarball comes from Debian's package registry once per machine (checked
# against its SHA-256) and is kept under build/; the build takes ~2.5 min on 2 cores.
set -euo pipefail

prefix=${1:-build/opencv}
version=4.6.0
tarball=opencv_${version}+dfsg.orig.tar.xz
url=http://deb.debian.org/debian/pool/main/o/opencv/${tarball}
sha256=40a59ba7e5c18a43652de0a08733c9843a39bba619b1f3e26a5fac4a6f041423
work=build/opencv-src

if [ -f "$prefix/lib/cmake/opencv4/OpenCVConfig.cmake" ]; then exit 0; fi
mkdir -p "$work"
if ! echo "$sha256  $work/$tarball" | sha256sum --check --status 2>/dev/null; then
  echo "Downloading OpenCV $version's source from Debian (${url})"
  curl --fail --silent --show-error --location --retry 3 -o "$work/$tarball.part" "$url"
  echo "$sha256  $work/$tarball.part" | sha256sum --check --status ||
    { echo "opencv.sh: $url does not have the expected SHA-256 ($sha256)" >&2; exit 1; }
  mv "$work/$tarball.part" "$work/$tarball"
fi
rm -rf "$work/opencv-$version" "$work/build"
tar -xf "$work/$tarball" -C "$work"

echo "Building OpenCV $version core+imgproc (static) into $prefix"
# CPU options as Debian's package has them (baseline SSE2, run-time dispatch
# up to AVX-512), so the kernels chosen on a machine are the ones the system
# library would choose.
cmake -S "$work/opencv-$version" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$(realpath -m "$prefix")" -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
  -DBUILD_LIST=core,imgproc -DBUILD_SHARED_LIBS=OFF -DCPU_BASELINE=SSE2 -DCPU_BASELINE_DISABLE=SSE3 \
  -DBUILD_TESTS=OFF -DBUILD_PERF_TESTS=OFF -DBUILD_EXAMPLES=OFF -DBUILD_DOCS=OFF -DBUILD_opencv_apps=OFF \
  -DBUILD_JAVA=OFF -DBUILD_opencv_python3=OFF -DBUILD_ZLIB=OFF -DBUILD_ITT=OFF -DOPENCV_GENERATE_PKGCONFIG=OFF \
  -DWITH_IPP=OFF -DWITH_ITT=OFF -DWITH_OPENCL=OFF -DWITH_OPENGL=OFF -DWITH_TBB=OFF -DWITH_OPENMP=OFF \
  -DWITH_LAPACK=OFF -DWITH_EIGEN=OFF -DWITH_VA=OFF -DWITH_VA_INTEL=OFF -DWITH_CUDA=OFF -DWITH_PROTOBUF=OFF \
  -DWITH_ADE=OFF -DWITH_QUIRC=OFF -DWITH_OPENJPEG=OFF -DWITH_JASPER=OFF -DWITH_OPENEXR=OFF -DWITH_JPEG=OFF \
  -DWITH_PNG=OFF -DWITH_TIFF=OFF -DWITH_WEBP=OFF -DWITH_IMGCODEC_HDR=OFF -DWITH_GTK=OFF -DWITH_QT=OFF \
  -DWITH_VTK=OFF -DWITH_FFMPEG=OFF -DWITH_GSTREAMER=OFF -DWITH_V4L=OFF -DWITH_1394=OFF -DWITH_GDAL=OFF \
  -DWITH_GDCM=OFF -DWITH_ZLIB=ON -Wno-dev >"$work/configure.log" 2>&1 ||
  { tail -n 30 "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" -j "${JOBS:-$(nproc)}" >"$work/build.log" 2>&1 ||
  { tail -n 30 "$work/build.log" >&2; exit 1; }
cmake --install "$work/build" >/dev/null
rm -rf "$work/opencv-$version" "$work/build"

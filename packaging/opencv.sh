#!/usr/bin/env bash
# Builds the two OpenCV modules conveyor calls (core, imgproc) as static
# libraries under $1 (default build/opencv), from the source of OpenCV 4.6.0
# that Debian bookworm packages (its +dfsg orig tarball; Debian's patches to
# it touch only packaging and other modules), the version Debian's
# libopencv-imgproc-dev ships, so every build computes what the tests were
# written against. Nothing else of OpenCV is built: no GUI, OpenGL, OpenCL,
# LAPACK, TBB or codecs, so nothing drags a display stack or BLAS into the
# extension, and the wheel needs no OpenCV library of the system
# (docs/design/decisions.md, "The wheel").
#
# The tarball comes from Debian's package registry once per machine (checked
# against its SHA-256) and is kept under build/; the build takes ~2.5 min on
# 2 cores. The prefix records the script that built it: an edited script
# builds again.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
prefix=$(realpath -m "${1:-$repo/build/opencv}")
version=4.6.0
tarball=opencv_${version}+dfsg.orig.tar.xz
pool=pool/main/o/opencv/${tarball}
# Debian's mirror; once bookworm leaves it, the snapshot archive keeps the file.
urls=("http://deb.debian.org/debian/${pool}" "http://snapshot.debian.org/archive/debian/20250520T000000Z/${pool}")
sha256=40a59ba7e5c18a43652de0a08733c9843a39bba619b1f3e26a5fac4a6f041423
work=$repo/build/opencv-src

if cmp -s "$0" "$prefix/built-by-opencv.sh" 2>/dev/null; then
  touch "$prefix/lib/cmake/opencv4/OpenCVConfig.cmake"  # Up to date: newer than this script for make.
  exit 0
fi
mkdir -p "$work"
if ! echo "$sha256  $work/$tarball" | sha256sum --check --status 2>/dev/null; then
  for url in "${urls[@]}"; do
    echo "Downloading OpenCV $version's source from Debian ($url)"
    if curl --fail --silent --show-error --location --retry 3 -o "$work/$tarball.part" "$url" &&
      echo "$sha256  $work/$tarball.part" | sha256sum --check --status; then
      mv "$work/$tarball.part" "$work/$tarball"
      break
    fi
  done
  [ -f "$work/$tarball" ] || { echo "opencv.sh: no copy of $tarball with SHA-256 $sha256 could be fetched" >&2; exit 1; }
fi
rm -rf "$work/opencv-$version" "$work/build" "$prefix.new"
tar -xf "$work/$tarball" -C "$work"

echo "Building OpenCV $version core+imgproc (static) into $prefix"
# CPU options as Debian's package has them (baseline SSE2, run-time dispatch
# up to AVX-512), so the kernels chosen on a machine are the ones the system
# library would choose.
cmake -S "$work/opencv-$version" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$prefix.new" -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
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
cp "$0" "$prefix.new/built-by-opencv.sh"
# Whole or not at all: an interrupted build leaves no prefix that looks done.
rm -rf "$prefix"
mv "$prefix.new" "$prefix"
rm -rf "$work/opencv-$version" "$work/build"

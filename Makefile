# conveyor: the two commands are `make demo` and `make test`. Both install what
# is missing (Debian packages, .venv), build, and are quiet when up to date.
SHELL := /bin/bash
.DEFAULT_GOAL := demo

VENV := .venv
PY := $(VENV)/bin/python
STAMPS := .stamps
BUILD := build/dev
JOBS ?= $(shell nproc)
DEMO_DATA := demo-data
DEMO_IMAGES ?= 2000

APT_PACKAGES := build-essential pkg-config libturbojpeg0-dev libjpeg62-turbo-dev libspng-dev libwebp-dev libtiff-dev libgif-dev libopencv-imgproc-dev \
	libgtest-dev libbenchmark-dev nlohmann-json3-dev zlib1g-dev libcurl4-openssl-dev nginx libnginx-mod-http-echo clang clang-format libclang-rt-14-dev cmake ninja-build curl debootstrap debian-archive-keyring ccache
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test test-background test-fast prepare setup build wheel wheel-root wheel-check gpu-check gpu-deps cpp-test py-test parity-test asan asan-build tsan tsan-build asan-python fuzz fuzz-build fuzz-smoke stress lint format bench-cpp bench-peers clean

# --- set-up -------------------------------------------------------------------
$(STAMPS)/apt: Makefile
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "Installing Debian packages: $$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/venv: requirements-dev.txt | $(STAMPS)/apt
	@[ -x $(PY) ] || python3 -m venv $(VENV)
	@echo "Installing Python packages into $(VENV)"
	@# (grep: pip -q still prints a warning per unusable index location configured on some machines)
	@$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt 2>&1 | grep -v 'is ignored: it is neither'; exit $${PIPESTATUS[0]}
	@# (a .pth file of older Makefiles: the package is now installed editable, below)
	@rm -f $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/conveyor-dev.pth
	@touch $@

# OpenCV core+imgproc, static, built once per machine from Debian's source
# (packaging/opencv.sh): every build below and the wheel link it.
OPENCV := build/opencv
OPENCV_DIR := $(CURDIR)/$(OPENCV)/lib/cmake/opencv4
$(OPENCV_DIR)/OpenCVConfig.cmake: packaging/opencv.sh | $(STAMPS)/apt
	@JOBS=$(JOBS) packaging/opencv.sh $(OPENCV)

setup: $(STAMPS)/apt $(STAMPS)/venv $(OPENCV_DIR)/OpenCVConfig.cmake

# --- build ----------------------------------------------------------------------
# The gcc trees (build/dev and the wheel's) are built through scikit-build-core
# with warnings as errors (pyproject.toml turns them off for users' builds) and
# ccache: the wheel's tree then compiles nothing build/dev has compiled (same
# sources, same flags).
export CCACHE_DIR := $(CURDIR)/build/ccache
export CCACHE_MAXSIZE := 2G
# The test suites' precompiled headers (CMakeLists.txt) are cacheable only so.
export CCACHE_SLOPPINESS := pch_defines,time_macros
SKBUILD_FLAGS := -Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache -Ccmake.define.CONVEYOR_WERROR=ON

# .venv gets the package as a user's venv would: `pip install -e .`. Its CMake
# tree is build/dev, with the tests and benchmarks, and the extension lands
# beside the Python sources (an editable build), so `make build` (ninja) is
# all a change of C++ needs afterwards.
$(BUILD)/build.ninja: CMakeLists.txt pyproject.toml Makefile $(STAMPS)/venv $(OPENCV_DIR)/OpenCVConfig.cmake
	@echo "Building, and installing conveyor into $(VENV) (pip install -e .)"
	@CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(PY) -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
	  -e . -Cbuild-dir=$(BUILD) -Ceditable.rebuild=false $(SKBUILD_FLAGS) -Ccmake.define.CONVEYOR_BUILD_TESTS=ON \
	  -Ccmake.define.CONVEYOR_BUILD_BENCHMARKS=ON -Ccmake.define.OpenCV_DIR=$(OPENCV_DIR) \
	  >$(BUILD).log 2>&1 || { tail -n 40 $(BUILD).log; exit 1; }
	@touch $@

build: $(BUILD)/build.ninja
	@cmake --build $(BUILD) -j $(JOBS) | grep -v '^ninja: no work to do' || true; exit $${PIPESTATUS[0]}

# --- the two commands -------------------------------------------------------------
demo: build
	@$(PY) -m conveyor make-dataset $(DEMO_DATA) --images $(DEMO_IMAGES) --quiet-if-present
	@$(PY) -m conveyor bench all --data $(DEMO_DATA) --json bench-results/demo.json --plot bench-results/demo.png

# `make test` is test-fast, asan, tsan, fuzz-smoke and wheel-check, ordered
# to keep both cores busy: the Python suite waits on sleeps, child processes
# and servers about half its time, so the sanitizer trees and the wheel build
# beside it at the lowest priority (nice 19), then the fuzzers' short run and
# the wheel's check (test-background; its log: build/test-background.log,
# printed but for the build lines). The tests that measure CPU time or
# scheduling delay (marker measures_cpu) and the sanitized C++ suites run
# after it, on an otherwise idle machine. The background runs in a session
# of its own (setsid, so that one kill ends it all), and Linux's scheduler
# weighs each session as one process (autogroups): a plain nice 19 in it would
# still take half the cores, so the session's own weight is set to nice 19.
TEST_BACKGROUND_LOG := build/test-background.log
test: prepare
	@setsid bash -c '{ echo 19 >/proc/self/autogroup; } 2>/dev/null; exec nice -n 19 "$$@"' background \
	  $(MAKE) -s --no-print-directory test-background >$(TEST_BACKGROUND_LOG) 2>&1 & background=$$!; \
	trap 'kill -- -$$background 2>/dev/null' EXIT; \
	$(MAKE) -s --no-print-directory cpp-test parity-test && \
	  $(MAKE) -s --no-print-directory py-test PYTEST_ARGS='-m "not measures_cpu"'; rc=$$?; \
	[ $$rc -eq 0 ] || exit $$rc; \
	wait $$background; rc=$$?; grep -v '^\[[0-9]*/[0-9]*\] ' $(TEST_BACKGROUND_LOG) | tail -n 60; \
	[ $$rc -eq 0 ] || { echo "(the whole log: $(TEST_BACKGROUND_LOG))"; exit 1; }
	@$(MAKE) -s --no-print-directory py-test PYTEST_ARGS='-m measures_cpu'
	@$(MAKE) -s --no-print-directory asan tsan
	$(if $(SUDO),@$(PY) packaging/wheel_check.py $(WHEEL_DIR)/dist)

# Its fuzzers may wait for a core behind the tests: 60 s per input, not 20,
# before one counts as a hang. The wheel's check runs here as root; through
# sudo (which may ask for a password) it runs in the foreground, above.
test-background: setup
	@$(MAKE) -s --no-print-directory asan-build tsan-build wheel
	@$(MAKE) -s --no-print-directory fuzz-smoke FUZZ_TIMEOUT=60
	$(if $(SUDO),,@$(PY) packaging/wheel_check.py $(WHEEL_DIR)/dist)

# The set-up steps that wait on the disk and the network more than on the
# CPU (the parity venv, the wheel's Debian root) run beside OpenCV's build and
# the development build.
prepare:
	@$(MAKE) -s --no-print-directory -j3 -Otarget $(OPENCV_DIR)/OpenCVConfig.cmake $(STAMPS)/parity-venv wheel-root build

test-fast: cpp-test py-test parity-test

# ctest's whole output goes to <build>/ctest.log; the summary is printed, and
# when a test fails, the output of every failing test (--output-on-failure)
# with the list of failures: everything but the lines of tests that passed.
define run_ctest
	@$(2) ctest --test-dir $(1) --output-on-failure -j $(JOBS) >$(1)/ctest.log 2>&1; rc=$$?; \
	if [ $$rc -eq 0 ]; then tail -n 3 $(1)/ctest.log; \
	else grep -Ev '^ *Start +[0-9]+: |^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* Passed' $(1)/ctest.log; \
	  echo "(the whole log: $(1)/ctest.log)"; fi; exit $$rc
endef

cpp-test: build
	$(call run_ctest,$(BUILD))

# PYTEST_ARGS: more pytest arguments (`make test` selects by marker).
PYTEST_ARGS ?=
py-test: build
	@$(PY) -m pytest -q tests --ignore=tests/parity $(PYTEST_ARGS)

# --- the wheel (packaging/) -------------------------------------------------------------
# `make wheel`: the sdist, then the wheel built from the source tree with the
# static OpenCV and repaired by auditwheel, which vendors every library the
# extension links beyond the manylinux set (build/wheel/dist). The build tree
# is kept (build/wheel/tree), so a rebuild compiles only what changed.
# `make wheel-check` installs that wheel on a bare Debian root and runs a
# loader job there (packaging/wheel_check.py; needs root, as debootstrap and
# chroot do).
WHEEL_DIR := build/wheel
wheel: setup
	@rm -rf $(WHEEL_DIR)/dist $(WHEEL_DIR)/raw
	@$(PY) -m build --no-isolation --sdist --outdir $(WHEEL_DIR)/dist . >$(WHEEL_DIR).log 2>&1 || { tail -n 30 $(WHEEL_DIR).log; exit 1; }
	@CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(PY) -m build --no-isolation --wheel --outdir $(WHEEL_DIR)/raw \
	  -Cbuild-dir=$(WHEEL_DIR)/tree $(SKBUILD_FLAGS) -Ccmake.define.OpenCV_DIR=$(OPENCV_DIR) . >>$(WHEEL_DIR).log 2>&1 \
	  || { tail -n 30 $(WHEEL_DIR).log; exit 1; }
	@PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m auditwheel repair --wheel-dir $(WHEEL_DIR)/dist $(WHEEL_DIR)/raw/*.whl >>$(WHEEL_DIR).log 2>&1 \
	  || { tail -n 30 $(WHEEL_DIR).log; exit 1; }
	@ls -l $(WHEEL_DIR)/dist | tail -n +2

wheel-root: $(STAMPS)/venv
	@$(PY) packaging/wheel_check.py --make-root

wheel-check: wheel build wheel-root
	@$(PY) packaging/wheel_check.py $(WHEEL_DIR)/dist

# --- parity: tests/parity against real torchvision ----------------------------------
# In their own venv (.venv-tv): PyPI's torchvision 0.29.1 needs torch 2.14.1, which
# conflicts with .venv's CPU torch. The extension does not link torch, so the same
# build imports there (python/ on its path).
PARITY_VENV := .venv-tv
PARITY_PY := $(PARITY_VENV)/bin/python

$(STAMPS)/parity-venv: requirements-parity.txt | $(STAMPS)/apt
	@[ -x $(PARITY_PY) ] || python3 -m venv $(PARITY_VENV)
	@echo "Installing torch 2.14.1 + torchvision 0.29.1 into $(PARITY_VENV) (the parity tests' reference)"
	@$(PARITY_PY) -m pip install -q --disable-pip-version-check -r requirements-parity.txt 2>&1 | grep -v 'is ignored: it is neither'; exit $${PIPESTATUS[0]}
	@echo "$(CURDIR)/python" > $$($(PARITY_PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/conveyor-dev.pth
	@touch $@

parity-test: build $(STAMPS)/parity-venv
	@PYTHONPATH=$(CURDIR)/python $(PARITY_PY) -m pytest -q tests/parity

# --- sanitizers: the C++ test suites under ASan+UBSan and under TSan ---------------
# Both trees are built with clang (half the time gcc takes for a sanitized
# build; the dev build stays gcc's, so both compilers check the code). One
# ASan+UBSan tree serves the C++ suites and the fuzzers (cpp/fuzz): the
# library is built once with both instrumentations. The TSan tree builds only
# the suites of the layers that run threads (core: pools and queues; io: the
# read queue and remote reads; pipeline: the loader, which runs the ops
# layer's pipelines on many threads); the ops suite is single-threaded.
ASAN_BUILD := build/asan
TSAN_BUILD := build/tsan
TSAN_TEST_LAYERS := core;io;pipeline

# $(1): the tree, $(2): its CMake options. A tree an older Makefile configured
# with gcc starts afresh (CMake keeps the compiler of an existing cache).
# -O1 with line tables only, as the sanitizers' documentation advises: reports
# still name file:line, and the trees compile about 20% faster than at -O2 -g.
define clang_tree
	@grep -qs 'CMAKE_CXX_COMPILER:[A-Z]*=.*clang' $(1)/CMakeCache.txt || rm -rf $(1)
	@CXX=clang++ CC=clang cmake -S . -B $(1) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" -DCONVEYOR_BUILD_PYTHON=OFF \
	  -DCONVEYOR_BUILD_TESTS=ON -DOpenCV_DIR=$(OPENCV_DIR) $(2) >/dev/null
	@cmake --build $(1) -j $(JOBS) | grep -v '^ninja: no work to do' || true; exit $${PIPESTATUS[0]}
endef

asan-build: setup
	$(call clang_tree,$(ASAN_BUILD),-DCONVEYOR_SANITIZE=address -DCONVEYOR_BUILD_FUZZERS=ON)

asan: asan-build
	$(call run_ctest,$(ASAN_BUILD),ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)

tsan-build: setup
	$(call clang_tree,$(TSAN_BUILD),-DCONVEYOR_SANITIZE=thread "-DCONVEYOR_TEST_LAYERS=$(TSAN_TEST_LAYERS)")

tsan: tsan-build
	$(call run_ctest,$(TSAN_BUILD),TSAN_OPTIONS=halt_on_error=1)

# The Python tests of bad input and shutdown against an extension built with
# ASan+UBSan (gcc's runtime preloaded into the venv's Python; leak detection off:
# CPython itself does not free everything at exit). The package is assembled in
# build/asan-python/pkg from links to python/conveyor and the instrumented module,
# and imported in a venv of its own (build/asan-python/venv): .venv's editable
# install would import the development build's module whatever the path says.
# That venv's .pth puts the package first, then .venv's packages (numpy,
# pytest), whose own .pth files (the editable install's among them) it does
# not run.
ASAN_PY := build/asan-python
ASAN_VENV := $(ASAN_PY)/venv
asan-python: setup
	@cmake -S . -B $(ASAN_PY) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCONVEYOR_BUILD_TESTS=OFF \
	  -DCONVEYOR_BUILD_PYTHON=ON -DCONVEYOR_SANITIZE=address -DPython_EXECUTABLE=$(CURDIR)/$(PY) \
	  -DOpenCV_DIR=$(OPENCV_DIR) -DCONVEYOR_PYTHON_OUTPUT_DIR=$(CURDIR)/$(ASAN_PY)/pkg/conveyor >/dev/null
	@cmake --build $(ASAN_PY) -j $(JOBS) --target _conveyor | grep -v '^ninja: no work to do' || true; exit $${PIPESTATUS[0]}
	@for f in python/conveyor/*; do case $$f in *.so) ;; *) ln -sfn $(CURDIR)/$$f $(ASAN_PY)/pkg/conveyor/;; esac; done
	@[ -x $(ASAN_VENV)/bin/python ] || $(PY) -m venv $(ASAN_VENV)
	@printf '%s\n' $(CURDIR)/$(ASAN_PY)/pkg $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
	  > $$($(ASAN_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/conveyor-asan.pth
	@LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  CONVEYOR_UNDER_ASAN=1 $(ASAN_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/test_bad_input.py tests/test_shutdown.py

# --- fuzzing: libFuzzer targets (cpp/fuzz) with ASan+UBSan, clang only ------------------
# `make fuzz` runs each target for FUZZ_SECONDS on seeds from make_corpus.py plus
# what earlier runs found (build/fuzz-work); crash inputs land in
# build/fuzz-artifacts. Every file of tests/fuzz-regressions/<target>/ is re-run
# first: each is an input that once crashed. The targets are built in the ASan tree.
FUZZ_SECONDS ?= 60
FUZZ_BUILD := $(ASAN_BUILD)
FUZZERS := image_decode_fuzzer image_pipeline_fuzzer tar_shards_fuzzer idx_fuzzer coco_fuzzer image_function_fuzzer \
	s3_reply_fuzzer shard_index_fuzzer
FUZZ_SEED ?=
FUZZ_TIMEOUT ?= 20
FUZZ_FLAGS := -rss_limit_mb=2048 -timeout=$(FUZZ_TIMEOUT) -max_len=65536 -print_final_stats=1 $(FUZZ_SEED)

fuzz-build: asan-build
	@$(PY) cpp/fuzz/make_corpus.py build/fuzz-corpus

fuzz: fuzz-build
	@mkdir -p build/fuzz-artifacts
	@$(MAKE) -s --no-print-directory -j$(JOBS) -Otarget $(addprefix fuzz-target-,$(FUZZERS))

# One target (each libFuzzer process is single-threaded: `make fuzz` runs
# $(JOBS) of them at once).
fuzz-target-%:
	@mkdir -p build/fuzz-work/$*
	@if ls tests/fuzz-regressions/$*/* >/dev/null 2>&1; then \
	  echo "$*: regression inputs"; \
	  $(FUZZ_BUILD)/$* $(FUZZ_FLAGS) tests/fuzz-regressions/$*/* 2>build/fuzz-artifacts/$*-regressions.log \
	    || { tail -n 40 build/fuzz-artifacts/$*-regressions.log; exit 1; }; \
	fi
	@echo "$*: fuzzing for $(FUZZ_SECONDS) s"
	@$(FUZZ_BUILD)/$* $(FUZZ_FLAGS) -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=build/fuzz-artifacts/$*- \
	  build/fuzz-work/$* build/fuzz-corpus/$* 2>build/fuzz-artifacts/$*.log \
	  || { tail -n 60 build/fuzz-artifacts/$*.log; exit 1; }
	@grep -E '^stat::number_of_executed_units|^Done' build/fuzz-artifacts/$*.log | tr '\n' ' '; echo

# The short run of `make test` (each target for 10 s), with a fixed seed so that
# CI explores the same inputs each time: new findings come from `make fuzz`,
# not from a random CI failure.
fuzz-smoke: asan-build
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=10 FUZZ_SEED=-seed=1

# --- peers: conveyor bench throughput --peers ------------------------------------------
# Its own venv (.venv-peers; .venv is never touched): real torchvision with the
# torch it needs, NVIDIA DALI (CPU pipelines), SPDL (Debian's FFmpeg 5.1 libraries)
# and FFCV where it builds (OpenCV headers, pkg-config). A peer that cannot be
# installed leaves its reason in $(PEERS_VENV)/conveyor-not-installable/NAME, which
# the benchmark prints in its table instead of dropping the peer. Only this target
# installs them (several GB): not `make test`, not `make demo`.
PEERS_VENV := .venv-peers
PEERS_PY := $(PEERS_VENV)/bin/python
PEERS_APT := libavutil57 libavcodec59 libavformat59 libavfilter8 libavdevice59 libswscale6 libswresample4 \
	libopencv-dev pkg-config
PEERS_ARGS ?=

$(STAMPS)/peers-apt: Makefile | $(STAMPS)/apt
	@missing=$$(for p in $(PEERS_APT); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "Installing Debian packages for the peers: $$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@touch $@

$(STAMPS)/peers-venv: requirements-peers.txt $(STAMPS)/peers-apt
	@[ -x $(PEERS_PY) ] || python3 -m venv $(PEERS_VENV)
	@echo "Installing the peers into $(PEERS_VENV) (several GB the first time)"
	@$(PEERS_PY) -m pip install -q --disable-pip-version-check -r requirements-peers.txt 2>&1 | grep -v 'is ignored: it is neither'; exit $${PIPESTATUS[0]}
	@rm -rf $(PEERS_VENV)/conveyor-not-installable && mkdir -p $(PEERS_VENV)/conveyor-not-installable
	@# FFCV builds from source against OpenCV and libjpeg-turbo: a failure is recorded, not fatal.
	@if ! $(PEERS_PY) -m pip install -q --disable-pip-version-check --no-build-isolation ffcv==1.0.2 \
	    >$(PEERS_VENV)/ffcv-install.log 2>&1; then \
	  reason=$$(grep -E -m1 'error:|Error:|ERROR:' $(PEERS_VENV)/ffcv-install.log | cut -c1-200); \
	  echo "pip install ffcv==1.0.2 failed: $${reason:-see $(PEERS_VENV)/ffcv-install.log}" \
	    > $(PEERS_VENV)/conveyor-not-installable/FFCV; \
	  echo "FFCV not installable: $$(cat $(PEERS_VENV)/conveyor-not-installable/FFCV)"; \
	elif ! $(PEERS_PY) -c 'import ffcv.loader, ffcv.writer' >>$(PEERS_VENV)/ffcv-install.log 2>&1; then \
	  echo "ffcv==1.0.2 installed but does not import: $$(tail -n 1 $(PEERS_VENV)/ffcv-install.log | cut -c1-200)" \
	    > $(PEERS_VENV)/conveyor-not-installable/FFCV; \
	  $(PEERS_PY) -m pip uninstall -q -y ffcv >/dev/null 2>&1; \
	  echo "FFCV not installable: $$(cat $(PEERS_VENV)/conveyor-not-installable/FFCV)"; \
	fi
	@# conveyor from the source tree, as in .venv: the extension does not link torch.
	@echo "$(CURDIR)/python" > $$($(PEERS_PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/conveyor-dev.pth
	@touch $@

bench-peers: build $(STAMPS)/peers-venv
	@$(PY) -m conveyor make-dataset $(DEMO_DATA) --images $(DEMO_IMAGES) --quiet-if-present
	@$(PEERS_PY) -m conveyor bench throughput --peers --data $(DEMO_DATA) \
	  --json bench-results/peers.json --plot bench-results/peers.png $(PEERS_ARGS)

# --- the GPU device check (bench/gpu_check.py) ---------------------------------------
# `make gpu-deps` gathers here what a GPU machine without our Debian libraries
# and without network needs to build conveyor: the .deb files of our libraries
# and of the libraries they load, libcurl's included (unpacked there under a
# prefix in /tmp, never into /; only those the machine lacks are loaded), and
# the wheels of pure-Python dependencies. On that machine, carrying build/gpu-deps:
#   python3 bench/gpu_check.py --deps build/gpu-deps --out "$$OUT"
# `make gpu-check` runs the same check here, without a GPU: the CUDA tests
# that need none, the GPU benchmarks in --smoke mode on the CPU, and says what
# it skipped (tests/test_gpu_check.py runs it in `make test`).
GPU_DEBS := libturbojpeg0-dev libturbojpeg0 libjpeg62-turbo-dev libjpeg62-turbo libspng-dev libspng0 \
	libwebp-dev libwebp7 libwebpdemux2 libwebpmux3 libtiff-dev libtiff6 libtiffxx6 libdeflate-dev libdeflate0 \
	libjbig-dev libjbig0 liblerc-dev liblerc4 liblzma-dev liblzma5 libzstd-dev libzstd1 libgif-dev libgif7 \
	libopencv-core-dev libopencv-core406 libopencv-imgproc-dev libopencv-imgproc406 libtbb12 libblas3 liblapack3 \
	libgfortran5 libquadmath0 libx11-6 libxau6 libxcb1 libxdmcp6 libbsd0 libmd0 libglvnd0 libglx0 \
	nlohmann-json3-dev zlib1g-dev zlib1g libcurl4-openssl-dev libcurl4 pkgconf pkgconf-bin libpkgconf3 \
	libnghttp2-14 libidn2-0 librtmp1 libssh2-1 libpsl5 libssl3 libgssapi-krb5-2 libldap-2.5-0 libbrotli1 \
	libunistring2 libgnutls30 libhogweed6 libnettle8 libgmp10 libkrb5-3 libk5crypto3 libcom-err2 libkrb5support0 \
	libsasl2-2 libsasl2-modules-db libdb5.3 libp11-kit0 libtasn1-6 libkeyutils1 libffi8
gpu-deps: $(STAMPS)/venv
	@mkdir -p build/gpu-deps
	@cd build/gpu-deps && { apt-get download $(GPU_DEBS) >/dev/null 2>&1 || \
	  { $(SUDO) apt-get update -qq && apt-get download $(GPU_DEBS) >/dev/null 2>&1; }; }
	@$(PY) -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d build/gpu-deps \
	  "$$(grep -o 'braceexpand[^"]*' pyproject.toml)" 2>&1 | grep -v 'is ignored: it is neither'; exit $${PIPESTATUS[0]}
	@echo "build/gpu-deps: $$(ls build/gpu-deps | wc -l) files, $$(du -sh build/gpu-deps | cut -f1)"

gpu-check: build
	@$(PY) bench/gpu_check.py --out build/gpu-check

# --- flaky tests: the suites again and again on a busy machine ---------------------------
# `make stress` runs the C++ suites STRESS_RUNS times under ASan and under TSan
# (ctest -j$(JOBS)) and the Python suite STRESS_PY_RUNS times, each beside a CPU
# burner (one busy process per core), as CI's machine can be. A test that fails
# in one run of many depends on timing or on other processes: fix it. The logs
# of failing runs stay in build/stress/.
STRESS_RUNS ?= 20
STRESS_PY_RUNS ?= 5
stress: asan tsan build
	@mkdir -p build/stress; \
	burners=""; for i in $$(seq $(JOBS)); do (while :; do :; done) & burners="$$burners $$!"; done; \
	trap "kill $$burners" EXIT; failed=0; \
	for tree in asan tsan; do for i in $$(seq $(STRESS_RUNS)); do \
	  log=build/stress/$$tree-$$i.log; \
	  if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 TSAN_OPTIONS=halt_on_error=1 \
	     ctest --test-dir build/$$tree --output-on-failure -j $(JOBS) >$$log 2>&1; then rm $$log; \
	  else failed=1; echo "$$tree run $$i:"; grep -E '^ +[0-9]+ - ' $$log; fi; \
	done; echo "$$tree: $(STRESS_RUNS) runs"; done; \
	for i in $$(seq $(STRESS_PY_RUNS)); do log=build/stress/python-$$i.log; \
	  if $(PY) -m pytest -q -p no:cacheprovider tests --ignore=tests/parity >$$log 2>&1; then rm $$log; \
	  else failed=1; echo "python run $$i:"; grep -E '^(FAILED|ERROR)' $$log; fi; \
	done; echo "python: $(STRESS_PY_RUNS) runs"; exit $$failed

# --- developer helpers ---------------------------------------------------------------
lint: setup
	@$(VENV)/bin/ruff check python tests bench examples packaging
	@clang-format --dry-run -Werror $$(git ls-files 'cpp/*.cc' 'cpp/*.h')

format: setup
	@clang-format -i $$(git ls-files 'cpp/*.cc' 'cpp/*.h')
	@$(VENV)/bin/ruff format python tests bench examples packaging

bench-cpp: build
	@cmake --build $(BUILD) -j $(JOBS) --target benchmarks | grep -v '^ninja: no work to do' || true; exit $${PIPESTATUS[0]}
	@for b in $(BUILD)/*_benchmark; do $$b --benchmark_min_time=2; done

clean:
	$(SUDO) rm -rf --one-file-system build/wheel-root build/wheel-root.new  # made by debootstrap as root
	rm -rf build $(STAMPS) python/conveyor/_conveyor*.so

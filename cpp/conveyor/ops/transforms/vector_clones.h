#pragma once

// CONVEYOR_VECTOR_CLONES, put before a function definition: GCC compiles the
// function twice, for AVX2 and for the baseline x86-64 (SSE2), and the loader
// picks one for the CPU (target_clones, an ifunc). For the colour kernels'
// loops the compiler vectorises: AVX2 doubles the width and loads
// interleaved RGB with byte shuffles SSE2 lacks. FMA is not enabled, so no
// multiply-add is contracted: each float32 / double operation is the same
// IEEE operation in either clone, and the results are the same bit for bit.
// Elsewhere (another compiler, architecture or system) it is empty, and
// under ThreadSanitizer too: GCC instruments the clone resolver, which the
// dynamic loader runs before the sanitizer's runtime is up (a crash at
// start-up).
//
// CONVEYOR_FMA_CLONES: the same, with x86-64-v3 (AVX2 + FMA) for the first
// clone, for loops whose arithmetic is a fused multiply-add (torch's
// `x.add_(y, alpha=a)`): there std::fma becomes one vector instruction,
// while the baseline clone calls the C library's fma, which is also
// correctly rounded, so both give the same bits. No other a * b + c is
// fused: the build sets -ffp-contract=off (CMakeLists.txt).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(__SANITIZE_THREAD__)
#define CONVEYOR_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#define CONVEYOR_FMA_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define CONVEYOR_VECTOR_CLONES
#define CONVEYOR_FMA_CLONES
#endif

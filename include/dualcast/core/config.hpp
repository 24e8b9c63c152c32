// dualcast/core/config.hpp: the one place that knows about host/device compilation.
#pragma once

#define DUALCAST_VERSION_MAJOR 0
#define DUALCAST_VERSION_MINOR 1
#define DUALCAST_VERSION_PATCH 0
// The inline namespace of dualcast's __global__ functions (backend/cuda/launch.cuh); changes with
// every version whose kernels change.
#define DUALCAST_KERNEL_ABI kernels_v0_1_0

#if defined(__CUDACC__)
#define DUALCAST_HOST __host__
#define DUALCAST_DEVICE __device__
#define DUALCAST_HD __host__ __device__
#define DUALCAST_FORCEINLINE __forceinline__
#else
#define DUALCAST_HOST
#define DUALCAST_DEVICE
#define DUALCAST_HD
#if defined(__GNUC__) || defined(__clang__)
#define DUALCAST_FORCEINLINE inline __attribute__((always_inline))
#else
#define DUALCAST_FORCEINLINE inline
#endif
#endif

// The math functions on dual numbers: always inlined with GCC, whose `flatten` in the CPU
// backend's loop left them as calls (160-byte duals through memory) where a translation unit used
// them in several kernels. Not forced with clang (the sanitizer and tidy builds), which keeps its
// own inlining choices there.
#if defined(__CUDACC__) || !defined(__clang__)
#define DUALCAST_MATH_INLINE DUALCAST_FORCEINLINE
#else
#define DUALCAST_MATH_INLINE
#endif

// Inlines everything a function calls (the CPU backend's inner loop over a kernel's lambda), so
// the dual-number arithmetic of one element stays in registers.
#if !defined(__CUDACC__) && (defined(__GNUC__) || defined(__clang__))
#define DUALCAST_FLATTEN __attribute__((flatten))
#else
#define DUALCAST_FLATTEN
#endif

// A piece of a kernel's evaluation compiled as a function of its own on the host: the chunks of a
// kernel with more active inputs than one dual carries. The backend's loop would otherwise inline
// every chunk into one huge function, which takes the compiler superlinearly longer; each chunk
// is heavy enough that the call costs nothing measurable. Inlined on the device.
#if !defined(__CUDACC__) && (defined(__GNUC__) || defined(__clang__))
#define DUALCAST_SEPARATE [[gnu::noinline, gnu::flatten]]
#else
#define DUALCAST_SEPARATE
#endif

// Keeps a rarely taken branch a branch: the zero-wins recomputation of a scalar dual's partials
// (numbers/dual.hpp), which GCC otherwise turned into selects computed at every step (three times
// the instructions of nested duals' arithmetic, and no vectorization of their partials). An empty
// volatile asm statement is never executed speculatively (and is skipped in constant evaluation,
// where asm may not run). Not under nvcc: on the device predication is the cheap way.
#if !defined(__CUDACC__) && (defined(__GNUC__) || defined(__clang__))
#define DUALCAST_KEEP_BRANCH()                                                                     \
  do {                                                                                             \
    if (!__builtin_is_constant_evaluated())                                                        \
      asm volatile("");                                                                            \
  } while (false)
#else
#define DUALCAST_KEEP_BRANCH()
#endif

// True while compiling device code (the device pass of nvcc).
#if defined(__CUDA_ARCH__)
#define DUALCAST_DEVICE_PASS 1
#else
#define DUALCAST_DEVICE_PASS 0
#endif

// SIMD batches (gcc/clang vector extensions) are used by the CPU backend only when the
// host compiler sees them directly; under nvcc the CPU backend evaluates one element at a time.
#if !defined(__CUDACC__) && (defined(__GNUC__) || defined(__clang__))
#define DUALCAST_HAS_SIMD 1
#else
#define DUALCAST_HAS_SIMD 0
#endif

// dualcast/core/compiled.hpp: the optional compiled component (src/compiled_*.cpp, the CMake target
// dualcast::compiled). A translation unit that links it is compiled with DUALCAST_COMPILED; the
// headers then declare the float / double instantiations of their heavy non-inline function
// templates (those templated on the element type only: checks, matmul plumbing, optimizer-free
// tensor operations) `extern template`, so that each translation unit no longer compiles them
// again: the library's one object file holds them. Without the definition (the default) nothing
// changes: the library stays headers only.
//
// A header lists its instantiations once, with DUALCAST_INSTANTIATE in front and the element type
// as T, inside DUALCAST_EACH_FLOAT_TYPE's expansion:
//
//   #define DUALCAST_X(T) DUALCAST_INSTANTIATE tensor<T> f<T>(tensor<T> const &);
//   DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
//   #undef DUALCAST_X
//
// DUALCAST_INSTANTIATE is `extern template` for consumers and `template` in src/compiled_*.cpp
// (which define DUALCAST_BUILDING_COMPILED), so the declarations and the definitions cannot
// drift apart. nvcc translation units keep the headers-only path (their tensors run on another
// backend, in another inline namespace).
#pragma once

#if (defined(DUALCAST_COMPILED) || defined(DUALCAST_BUILDING_COMPILED)) && !defined(__CUDACC__)
#define DUALCAST_USE_COMPILED 1
#if defined(DUALCAST_BUILDING_COMPILED)
#define DUALCAST_INSTANTIATE template
#else
#define DUALCAST_INSTANTIATE extern template
#endif
#if defined(DUALCAST_BUILDING_COMPILED) && defined(DUALCAST_COMPILED_TYPE)
// src/compiled_float.cpp and src/compiled_double.cpp: one element type each (two objects that a
// parallel build compiles side by side)
#define DUALCAST_EACH_FLOAT_TYPE(X) X(DUALCAST_COMPILED_TYPE)
#if defined(DUALCAST_COMPILED_FLOAT)
#define DUALCAST_IF_FLOAT(X) X(float)
#else
#define DUALCAST_IF_FLOAT(X)
#endif
#else
#define DUALCAST_EACH_FLOAT_TYPE(X) X(float) X(double)
#define DUALCAST_IF_FLOAT(X) X(float)
#endif
#else
#define DUALCAST_USE_COMPILED 0
#define DUALCAST_EACH_FLOAT_TYPE(X)
#define DUALCAST_IF_FLOAT(X)
#endif
// Instantiations per operand count (the CPU passes of backend/cpu/map.hpp): X(T, inputs, outputs)
// for 0-5 inputs and 1-5 outputs, the counts of the lazy expressions' and small kernels' calls
// (the ready cells' wider calls are compiled with the cells). An 8 x 8 grid took the component's
// float object from 35 to 63 s of CPU, and its pairs beyond these were the cells' own.
#define DUALCAST_ROW_COUNTS_(X, T, NI) X(T, NI, 1) X(T, NI, 2) X(T, NI, 3) X(T, NI, 4) X(T, NI, 5)
#define DUALCAST_EACH_ROW_COUNT(X, T)                                                              \
  DUALCAST_ROW_COUNTS_(X, T, 0)                                                                    \
  DUALCAST_ROW_COUNTS_(X, T, 1)                                                                    \
  DUALCAST_ROW_COUNTS_(X, T, 2)                                                                    \
  DUALCAST_ROW_COUNTS_(X, T, 3) DUALCAST_ROW_COUNTS_(X, T, 4) DUALCAST_ROW_COUNTS_(X, T, 5)

// The compiled component's code must be built for the same SIMD width as the program using it:
// the kernels it instantiates pick their batch width from the target's flags, so a component built
// without AVX2 would run an AVX2 program's checks and reductions on narrower vectors (slower, and
// nothing would say so). Each consumer translation unit therefore references the symbol the
// component defines for its own width; a mismatch fails at link time, naming the width.
#if DUALCAST_USE_COMPILED
#if defined(__AVX512F__)
#define DUALCAST_COMPILED_SIMD dualcast_compiled_simd_avx512
#elif defined(__AVX2__)
#define DUALCAST_COMPILED_SIMD dualcast_compiled_simd_avx2
#elif defined(__AVX__)
#define DUALCAST_COMPILED_SIMD dualcast_compiled_simd_avx
#else
#define DUALCAST_COMPILED_SIMD dualcast_compiled_simd_baseline
#endif
extern "C" int const DUALCAST_COMPILED_SIMD;
#if !defined(DUALCAST_BUILDING_COMPILED)
namespace dualcast::detail {
// Emitted in every consumer object (used), so that the link needs the component's symbol.
[[gnu::used]] static int const *const compiled_simd_check = &DUALCAST_COMPILED_SIMD;
} // namespace dualcast::detail
#endif
#endif

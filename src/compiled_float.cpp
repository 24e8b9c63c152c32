// The optional compiled component of dualcast (CMake target dualcast::compiled), float part: the
// instantiations that the headers declare `extern template` where DUALCAST_COMPILED is defined
// (dualcast/core/compiled.hpp), compiled once here instead of in every translation unit of the
// program (src/compiled_double.cpp: the double ones). Built from source with the consuming
// project's compiler and flags, never prebuilt: its kernels must use the program's SIMD width,
// which the link checks (the symbol below).
#define DUALCAST_BUILDING_COMPILED 1
#define DUALCAST_COMPILED_TYPE float
#define DUALCAST_COMPILED_FLOAT 1 // (the float-only instantiations: 16-bit passes)

#include <dualcast/autodiff.hpp>

// The headers' lists of instantiations are expanded with DUALCAST_INSTANTIATE = `template` above.

extern "C" int const DUALCAST_COMPILED_SIMD = 1;

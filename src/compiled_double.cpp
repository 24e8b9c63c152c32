// The optional compiled component of dualcast (CMake target dualcast::compiled), double part (see
// src/compiled_float.cpp).
#define DUALCAST_BUILDING_COMPILED 1
#define DUALCAST_COMPILED_TYPE double

#include <dualcast/autodiff.hpp>

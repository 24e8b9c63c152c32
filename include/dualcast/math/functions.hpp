// dualcast/math/functions.hpp: every elementwise math function, on float, double, SIMD batches and
// duals.
#pragma once

#include <dualcast/math/branch.hpp>
#include <dualcast/math/detail/std_functions.hpp>
#include <dualcast/math/dual.hpp>
#include <dualcast/math/scalar.hpp>
#include <dualcast/math/sparse_dual.hpp>
#if DUALCAST_HAS_SIMD
#include <dualcast/math/simd.hpp>
#endif

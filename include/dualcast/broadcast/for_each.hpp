// dualcast/broadcast/for_each.hpp: f(i) for i in [0, n) on an executor's device -- the loop a
// custom tape operation (tape/custom_op.hpp) or any non-elementwise kernel is written with, once
// for every backend.
//
//   struct row_sum {                       // a function object: nvcc runs it on the GPU too
//     float const *x; float *y; dualcast::index_t n;
//     DUALCAST_HD void operator()(dualcast::index_t r) const { ... y[r] = sum of row r ... }
//   };
//   dualcast::for_each(ex, rows, row_sum{x, y, n}, n);   // `n`: the work of one index
//
// On the CPU the indices are split over the executor's threads in contiguous chunks once there is
// enough work (`cost` estimates one index's work); on CUDA one thread runs each index. f must be
// trivially copyable, and must not depend on the order in which indices run.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/backend/seam.hpp>

#include <type_traits>

namespace dualcast {

template <class Ex, class F> void for_each(Ex const &ex, index_t n, F const &f, index_t cost = 1) {
  static_assert(is_executor_v<Ex>, "dualcast::for_each: the first argument is an executor "
                                   "(dualcast::cpu, or dualcast::cuda in .cu files)");
  static_assert(std::is_trivially_copyable_v<F>,
                "dualcast::for_each: the function object must be trivially copyable (capture "
                "pointers and values, not references or containers)");
  backend_for_each(detail::hook{}, ex, n, cost, f);
}

} // namespace dualcast

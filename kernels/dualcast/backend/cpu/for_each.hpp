// dualcast/backend/cpu/for_each.hpp: f(i) for i in [0, n) on the CPU, OpenMP threads over
// contiguous chunks once there is enough work; and row operations, each row on one thread.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/backend/cpu/executor.hpp>

namespace dualcast::detail::cpu_backend {

// Loops cheaper than this many units of `cost` run on the calling thread: starting the OpenMP
// team costs more than they do.
inline constexpr index_t for_each_parallel_work = index_t(1) << 15;

template <class F> void for_each(cpu const &ex, index_t n, index_t cost, F const &f) {
#if defined(_OPENMP)
  if (n * cost > for_each_parallel_work && ex.thread_count() > 1) {
#pragma omp parallel for schedule(static) num_threads(ex.thread_count())
    for (index_t i = 0; i < n; ++i)
      f(i);
    return;
  }
#else
  (void)ex, (void)cost;
#endif
  for (index_t i = 0; i < n; ++i)
    f(i);
}

// The lanes of a row operation on the CPU: one lane per row (the row runs sequentially on one
// thread), so a reduction over the lanes is the lane's own value.
struct serial_lanes {
  static constexpr int lane() { return 0; }
  static constexpr int count() { return 1; }
  template <class T, class Op> T reduce(T x, Op const &) const { return x; }
  template <class T, class Op> T scan(T x, Op const &) const { return x; }
  // (see cuda_backend::warp_lanes)
  static constexpr unsigned group_of(index_t) { return 1u; }
  template <class T> T broadcast(T x, int) const { return x; }
  static constexpr void sync() {}
};

// f(r, lanes) for every row r in [0, rows), rows over the threads.
template <class F> void for_each_row(cpu const &ex, index_t rows, index_t cost, F const &f) {
  struct one_row {
    F const *f;
    void operator()(index_t r) const { (*f)(r, serial_lanes{}); }
  };
  for_each(ex, rows, cost, one_row{&f});
}

} // namespace dualcast::detail::cpu_backend

// dualcast/backend/cpu.hpp: the CPU backend: the executor dualcast::cpu and its hooks (the list
// is in backend/seam.hpp): fused passes over OpenMP threads and SIMD batches, the broadcast
// reduction, scratch memory and index loops. The matrix product hook is in backend/cpu/blas.hpp.
#pragma once

#include <dualcast/backend/cpu/executor.hpp>
#include <dualcast/backend/cpu/for_each.hpp>
#include <dualcast/backend/cpu/map.hpp>
#include <dualcast/backend/cpu/reduce.hpp>
#include <dualcast/backend/seam.hpp>
#include <dualcast/core/errors.hpp>

#include <memory>
#include <new>
#include <string>

namespace dualcast {
template <> struct executor_traits<cpu> { static constexpr bool is_executor = true; };
} // namespace dualcast

namespace dualcast::detail {

template <bool Simd, class T, int NI, int NO, class Op>
void backend_map(hook, cpu const &ex, map_params<T, NI, NO> const &p, Op const &op) {
  cpu_backend::map<Simd>(ex, p, op);
}

template <class T, class S>
void backend_reduce(hook, cpu const &ex, shape const &s, S const *src, view<T> dst,
                    bool accumulate) {
  cpu_backend::reduce_broadcast(ex, s, src, dst, accumulate);
}

template <class T> std::unique_ptr<T[]> backend_buffer(hook, cpu const &, index_t n) {
  try {
    return std::unique_ptr<T[]>(new T[static_cast<std::size_t>(n)]);
  } catch (std::bad_alloc const &) {
    throw allocation_error("dualcast: cannot allocate " + std::to_string(n * index_t(sizeof(T))) +
                           " bytes of host memory");
  }
}

template <class F> void backend_for_each(hook, cpu const &ex, index_t n, index_t cost, F const &f) {
  cpu_backend::for_each(ex, n, cost, f);
}

template <class F>
void backend_for_each_row(hook, cpu const &ex, index_t rows, index_t cost, F const &f) {
  cpu_backend::for_each_row(ex, rows, cost, f);
}

// The CPU runs its own scans and sorts its rows by bin itself (ops/scan.hpp,
// ops/reduce_by_index.hpp): nothing done here.
template <class T>
bool backend_scan_sum(hook, cpu const &, T const *, T *, index_t, index_t, bool, bool) {
  return false;
}
inline bool backend_sort_by_bin(hook, cpu const &, index_t const *, index_t, index_t, index_t *,
                                index_t *) {
  return false;
}
template <class T>
bool backend_histogram_plus(hook, cpu const &, T const *, index_t const *, index_t, index_t, T *) {
  return false;
}

} // namespace dualcast::detail

// dualcast/backend/cpu.hpp: the CPU backend's entry points for the front end (broadcast.hpp).
// Each backend provides the same three hooks, found by argument-dependent lookup on the
// executor type: backend_map (one fused pass), backend_reduce (the adjoint of broadcasting) and
// backend_buffer (scratch memory).
#pragma once

#include <dualcast/backend/cpu/executor.hpp>
#include <dualcast/backend/cpu/map.hpp>
#include <dualcast/backend/cpu/reduce.hpp>
#include <dualcast/errors.hpp>

#include <memory>
#include <new>
#include <string>

namespace dualcast::detail {

struct hook {}; // makes the hooks below visible to argument-dependent lookup

template <bool Simd, class T, int NI, int NO, class Op>
void backend_map(hook, cpu const &ex, map_params<T, NI, NO> const &p, Op const &op) {
  cpu_backend::map<Simd>(ex, p, op);
}

template <class T>
void backend_reduce(hook, cpu const &ex, shape const &s, T const *src, view<T> dst,
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

} // namespace dualcast::detail

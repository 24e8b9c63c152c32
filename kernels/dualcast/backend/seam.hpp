// dualcast/backend/seam.hpp: what a backend provides -- the one header through which the front
// end (broadcast/broadcast.hpp, the tape's operations) reaches execution.
//
// A backend is an executor type (dualcast::cpu, dualcast::cuda) plus free functions in namespace
// dualcast::detail, each taking the tag `hook` first so that argument-dependent lookup finds them
// at the call's instantiation, whichever backend headers were included before it. The front end
// calls only these hooks; each backend defines all of them in its entry header
// (backend/cpu.hpp, backend/cuda.cuh), implemented under backend/cpu/ and backend/cuda/:
//
//   backend_map<Simd>(hook, ex, map_params<T, NI, NO> const&, op)
//       one fused pass: op(in, out) at every element of the iteration space (element operations
//       of kernel/detail/element_ops.hpp; Simd: the op may be called on SIMD batches)
//   backend_reduce(hook, ex, shape s, S const* src, view<T> dst, bool accumulate)
//       dst [+]= src (contiguous, shape s) summed over the dimensions along which dst broadcasts:
//       the adjoint of broadcasting (S = T, or bfloat16 / half read in 16 bits, summed in float)
//   backend_buffer<T>(hook, ex, index_t n) -> an owning pointer to n elements of scratch memory
//   backend_for_each(hook, ex, index_t n, index_t cost, f)
//       f(i) for i in [0, n); f is a function object with a DUALCAST_HD call operator (row-wise
//       tape operations: softmax rows, max / min groups, gather lines); `cost` estimates one
//       call's work, so that small loops stay on one thread
//   backend_for_each_row(hook, ex, index_t rows, index_t cost, f)
//       f(r, lanes) for every row r: a row operation (softmax rows, max / min groups) whose
//       loops over the row's elements run j = lanes.lane(), + lanes.count(), ... and combine the
//       lanes' partial results with lanes.reduce(x, op) (op commutative and associative; every
//       lane receives the result); lanes.group_of(key) (the mask of lanes holding the same key),
//       lanes.broadcast(x, k) (lane k's x) and lanes.sync() (memory order among the lanes) let a
//       scatter combine colliding writes. Every lane runs the same trips of any loop containing
//       these calls. The CPU runs each row on one thread (one lane: its loops are the sequential
//       ones, a group is the lane itself), CUDA one warp per row (32 lanes, a fixed shuffle tree)
//   backend_scan_sum(hook, ex, T const* src, T* dst, index_t rows, index_t n, bool exclusive,
//                    bool reverse) -> bool
//       dst = the prefix sums of `rows` contiguous rows of n elements each (exclusive: shifted by
//       one, 0 first; reverse: from the row's end) where the executor runs them as a device-wide
//       primitive (CUDA: cuda_primitives::scan == cub); false: nothing done, the caller's own
//       passes run (the CPU always)
//   backend_sort_by_bin(hook, ex, index_t const* idx, index_t n, index_t bins, index_t* start,
//                       index_t* order) -> bool
//       the rows by bin where the executor sorts on its device (CUDA: sorted_histogram == cub):
//       order[start[b] .. start[b + 1]) bin b's rows in increasing position, rows outside
//       [0, bins) after start[bins]; false: nothing done (the caller sorts on the host)
//   backend_histogram_plus(hook, ex, T const* values, index_t const* idx, index_t n,
//                          index_t bins, T* y) -> bool
//       y[b] = the sum of the values of the rows with idx == b, in some fixed order, where the
//       executor has a sorting histogram (CUDA: sorted_histogram == cub); false: nothing done
//   backend_gemm(hook, ex, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc)   (blas headers)
//       row-major C = op(A) op(B) + beta C
//   backend_gemm_batched(hook, ex, ta, tb, m, n, k, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
//                        batch)                                              (blas headers)
//       C_i = op(A_i) op(B_i) + beta C_i for i < batch, X_i = x + i * sx (sa or sb 0: a shared
//       operand; the C_i never overlap): cuBLAS's strided-batched gemm, a loop on the CPU
//
// and each backend provides a memory_resource for its devices (backend/device.hpp).
//
// Results of every hook are deterministic: they do not depend on the number of threads (one
// exception, chosen by the user: CUB's floating-point scan, backend_scan_sum).
#pragma once

#include <dualcast/backend/device.hpp>
#include <dualcast/backend/map_params.hpp>
#include <dualcast/core/config.hpp>

#include <type_traits>

namespace dualcast {

// What the front end may ask of an executor type; a backend specialises it for its executor.
template <class Ex> struct executor_traits { static constexpr bool is_executor = false; };
template <class Ex>
inline constexpr bool is_executor_v = executor_traits<std::remove_cvref_t<Ex>>::is_executor;

namespace detail {
struct hook {}; // makes the backends' hooks visible to argument-dependent lookup
} // namespace detail

} // namespace dualcast

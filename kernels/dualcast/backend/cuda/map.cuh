// dualcast/backend/cuda/map.cuh: runs an element operation (detail/element_ops.hpp) over a
// broadcast iteration space on a GPU: one __global__ kernel per fused call, grid-stride loop.
//
// When every operand is contiguous and 16-byte aligned, each thread moves 16 bytes per operand
// (float4 / double2 loads and stores, coalesced across the warp); otherwise element offsets come
// from the collapsed shape and strides.
#pragma once

#include <dualcast/backend/cuda/check.cuh>
#include <dualcast/backend/cuda/executor.cuh>
#include <dualcast/backend/cuda/launch.cuh>
#include <dualcast/backend/map_params.hpp>

#include <cstdint>
#include <type_traits>

namespace dualcast::detail::cuda_backend {
inline namespace DUALCAST_KERNEL_ABI {
DUALCAST_KERNELS_BEGIN

template <class T> struct vec16;
template <> struct vec16<float> {
  using type = float4;
  static constexpr int lanes = 4;
};
template <> struct vec16<double> {
  using type = double2;
  static constexpr int lanes = 2;
};

template <class T, int NI, int NO, class Op>
DUALCAST_GLOBAL void __launch_bounds__(max_block)
    map_strided(map_params<T, NI, NO> p, index_t total, Op op) {
  T in[NI > 0 ? NI : 1], out[NO];
  for (index_t e = index_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += index_t(gridDim.x) * blockDim.x) {
    index_t in_off[NI > 0 ? NI : 1] = {}, out_off[NO] = {};
    index_t rem = e;
    for (int d = p.rank - 1; d >= 0; --d) {
      index_t i = rem % p.ext[d];
      rem /= p.ext[d];
      for (int k = 0; k < NI; ++k)
        in_off[k] += i * p.in[k].stride[d];
      for (int k = 0; k < NO; ++k)
        out_off[k] += i * p.out[k].stride[d];
    }
    for (int k = 0; k < NI; ++k)
      in[k] = p.in[k].ptr[in_off[k]];
    op(static_cast<T const *>(in), out);
    for (int k = 0; k < NO; ++k) {
      T *o = p.out[k].ptr + out_off[k];
      *o = p.add[k] ? *o + out[k] : out[k];
    }
  }
}

template <class T, int NI, int NO, class Op>
DUALCAST_GLOBAL void __launch_bounds__(max_block)
    map_contiguous(map_params<T, NI, NO> p, index_t total, Op op) {
  // 16-byte loads put `lanes` copies of the element operation into one iteration; with many
  // operands their live values exceed the registers (ptxas spilled with 11 operands in double),
  // so wide operations load one element at a time.
  constexpr bool wide = NI + NO > 8;
  using V = std::conditional_t<wide, T, typename vec16<T>::type>;
  constexpr int lanes = wide ? 1 : vec16<T>::lanes;
  T in[NI > 0 ? NI : 1], out[NO];
  if constexpr (wide) {
    // One element per iteration, written as the vector loop below was before its partial last
    // vector (lanes = 1): simpler forms of this loop made ptxas 13 spill 8 bytes for the D-LSTM
    // cell's values in double (11 inputs, 2 outputs) on sm_90.
    const index_t vectors = total;
#pragma unroll 1
    for (index_t v = index_t(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors;
         v += index_t(gridDim.x) * blockDim.x) {
      V vin[NI > 0 ? NI : 1], vout[NO];
      for (int k = 0; k < NI; ++k)
        vin[k] = reinterpret_cast<V const *>(p.in[k].ptr)[v];
      for (int k = 0; k < NI; ++k)
        in[k] = reinterpret_cast<T const *>(&vin[k])[0];
      op(static_cast<T const *>(in), out);
      for (int k = 0; k < NO; ++k)
        reinterpret_cast<T *>(&vout[k])[0] = out[k];
      for (int k = 0; k < NO; ++k) {
        V *o = reinterpret_cast<V *>(p.out[k].ptr) + v;
        if (p.add[k]) {
          V old = *o;
          reinterpret_cast<T *>(&vout[k])[0] =
              reinterpret_cast<T const *>(&old)[0] + reinterpret_cast<T const *>(&vout[k])[0];
        }
        *o = vout[k];
      }
    }
    for (index_t e = vectors + index_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
         e += index_t(gridDim.x) * blockDim.x) {
      for (int k = 0; k < NI; ++k)
        in[k] = p.in[k].ptr[e];
      op(static_cast<T const *>(in), out);
      for (int k = 0; k < NO; ++k) {
        T *o = p.out[k].ptr + e;
        *o = p.add[k] ? *o + out[k] : out[k];
      }
    }
  } else {
    // The last vector may be partial (total % lanes elements): it is loaded and stored element by
    // element, its missing lanes computed on zeros and dropped. One loop, so the operation is
    // inlined `lanes` times, not `lanes` + 1: with a separate loop for the remainder ptxas (13, its
    // default register heuristics) spilled 8-16 bytes around CUDA's double exp and atan2.
    const index_t vectors = (total + lanes - 1) / lanes;
    // Not unrolled: for tiny bodies (a negation's value and constant partial) NVVM unrolled this
    // grid-stride loop 4x and ptxas for sm_80 then spilled 28 bytes with 32 registers in use.
#pragma unroll 1
    for (index_t v = index_t(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors;
         v += index_t(gridDim.x) * blockDim.x) {
      const bool whole = (v + 1) * lanes <= total;
      const int present = whole ? lanes : int(total - v * lanes);
      V vin[NI > 0 ? NI : 1], vout[NO];
      for (int k = 0; k < NI; ++k) {
        if (whole) {
          vin[k] = reinterpret_cast<V const *>(p.in[k].ptr)[v];
        } else {
          for (int l = 0; l < lanes; ++l)
            reinterpret_cast<T *>(&vin[k])[l] = l < present ? p.in[k].ptr[v * lanes + l] : T(0);
        }
      }
      auto one_lane = [&](int l) {
        for (int k = 0; k < NI; ++k)
          in[k] = reinterpret_cast<T const *>(&vin[k])[l];
        op(static_cast<T const *>(in), out);
        for (int k = 0; k < NO; ++k)
          reinterpret_cast<T *>(&vout[k])[l] = out[k];
      };
      // Four float lanes stay a loop: unrolled, the HM-LSTM update's values kernel (three branches
      // inlined per lane) spilled 8 bytes on sm_80 with 40 registers in use. Two double lanes are
      // unrolled: as a loop, the lane index into a double2 made ptxas spill (lazy trees of 5
      // inputs and 2 outputs in tests/cuda/tape_cases_gpu.cu). scripts/cuda-resources: no spills.
      if constexpr (lanes == 4) {
#pragma unroll 1
        for (int l = 0; l < lanes; ++l)
          one_lane(l);
      } else {
#pragma unroll
        for (int l = 0; l < lanes; ++l)
          one_lane(l);
      }
      for (int k = 0; k < NO; ++k) {
        if (whole) {
          V *o = reinterpret_cast<V *>(p.out[k].ptr) + v;
          if (p.add[k]) {
            V old = *o;
            for (int l = 0; l < lanes; ++l)
              reinterpret_cast<T *>(&vout[k])[l] =
                  reinterpret_cast<T const *>(&old)[l] + reinterpret_cast<T const *>(&vout[k])[l];
          }
          *o = vout[k];
        } else {
          for (int l = 0; l < present; ++l) {
            T *o = p.out[k].ptr + v * lanes + l;
            T const r = reinterpret_cast<T const *>(&vout[k])[l];
            *o = p.add[k] ? *o + r : r;
          }
        }
      }
    }
  }
}

template <class T, int NI, int NO, class Op>
void map(cuda const &ex, map_params<T, NI, NO> p, Op const &op) {
  static_assert(sizeof(map_params<T, NI, NO>) + sizeof(Op) < 4000,
                "dualcast: too many array operands for one CUDA kernel (parameters exceed 4 KiB)");
  static_assert(std::is_trivially_copyable_v<Op>,
                "dualcast: kernel state must be trivially copyable");
  require_device();
  if (!ex.operands_on_device) { // views: where their memory is, is known only to CUDA
    for (int k = 0; k < NI; ++k)
      require_device_pointer(p.in[k].ptr, "dualcast (CUDA)", k);
    for (int k = 0; k < NO; ++k)
      require_device_pointer(p.out[k].ptr, "dualcast (CUDA)", NI + k);
  }
  const index_t total = collapse_dims(p);
  if (total == 0)
    return;
  bool contiguous = p.rank == 1;
  for (int k = 0; k < NI && contiguous; ++k)
    contiguous = p.in[k].stride[0] == 1 && reinterpret_cast<std::uintptr_t>(p.in[k].ptr) % 16 == 0;
  for (int k = 0; k < NO && contiguous; ++k)
    contiguous =
        p.out[k].stride[0] == 1 && reinterpret_cast<std::uintptr_t>(p.out[k].ptr) % 16 == 0;
  const int block = block_for(ex);
  if (contiguous)
    map_contiguous<<<grid_for(total / vec16<T>::lanes + 1, block), block, 0, ex.stream>>>(p, total,
                                                                                          op);
  else
    map_strided<<<grid_for(total, block), block, 0, ex.stream>>>(p, total, op);
  check(cudaGetLastError(), "launching a dualcast kernel");
}

DUALCAST_KERNELS_END
} // namespace DUALCAST_KERNEL_ABI
} // namespace dualcast::detail::cuda_backend

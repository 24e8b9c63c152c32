// dualcast/backend/cuda/map.cuh: runs an element operation (kernel/detail/element_ops.hpp) over a
// broadcast iteration space on a GPU: one __global__ kernel per fused call, grid-stride loop.
//
// When every operand is contiguous and 16-byte aligned, each thread moves 16 bytes per operand
// (float4 / double2 loads and stores, coalesced across the warp); otherwise element offsets come
// from the collapsed shape and strides. A float pass over contiguous bfloat16 / half operands
// (8-byte aligned) takes the same four elements of each: 8 bytes of a 16-bit operand, widened to
// a float4 on load and rounded back on store.
#pragma once

#include <dualcast/backend/cuda/check.cuh>
#include <dualcast/backend/cuda/executor.cuh>
#include <dualcast/backend/cuda/launch.cuh>
#include <dualcast/backend/map_params.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/numbers/float16.hpp>

#include <cstdint>
#include <string>
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

// Lane l of a 16-byte vector. float4's lanes are read and written through its named components:
// indexed as an array with a run-time lane (the four-lane loop below is not unrolled), the vector
// went to local memory, and on an H200 the LSTM cell's values kernel (5 inputs, 2 outputs) wrote
// 477 MB to DRAM for 134 MB of outputs (ncu) at 60 % of the copy bandwidth. Selects stay in
// registers. double2's two lanes are unrolled (constant indices) and keep the array form, whose
// code ptxas compiled without spills (the selects made it spill 8-16 bytes in double kernels).
DUALCAST_DEVICE DUALCAST_FORCEINLINE float lane_of(float4 const &v, int l) {
  return l == 0 ? v.x : l == 1 ? v.y : l == 2 ? v.z : v.w;
}
DUALCAST_DEVICE DUALCAST_FORCEINLINE void set_lane(float4 &v, int l, float x) {
  v.x = l == 0 ? x : v.x;
  v.y = l == 1 ? x : v.y;
  v.z = l == 2 ? x : v.z;
  v.w = l == 3 ? x : v.w;
}
template <class V> DUALCAST_DEVICE DUALCAST_FORCEINLINE auto lane_of(V const &v, int l) {
  using T = std::conditional_t<std::is_same_v<V, double2>, double, V>;
  return reinterpret_cast<T const *>(&v)[l];
}
template <class V, class T> DUALCAST_DEVICE DUALCAST_FORCEINLINE void set_lane(V &v, int l, T x) {
  reinterpret_cast<T *>(&v)[l] = x;
}

// What the strided kernels do per element: dimension d's index i added to every operand's offset;
// the inputs loaded at their offsets, the operation applied, the outputs stored (or added) at
// theirs.
template <class T, int NI, int NO>
DUALCAST_DEVICE DUALCAST_FORCEINLINE void add_index(map_params<T, NI, NO> const &p, int d,
                                                    index_t i, index_t *in_off, index_t *out_off) {
  for (int k = 0; k < NI; ++k)
    in_off[k] += i * p.in[k].stride[d];
  for (int k = 0; k < NO; ++k)
    out_off[k] += i * p.out[k].stride[d];
}
// An element of operand o at offset off, widened from bfloat16 / half where o is stored so (float
// passes only: backend/map_params.hpp), and a result stored there, rounded once. The portable
// conversions of numbers/float16.hpp: bit for bit the CPU's (NaN payloads included), a few integer
// operations beside a memory-bound load.
// Kernels of more operands than this compile without the 16-bit branches, and their calls with
// 16-bit arrays are refused: beside many operands the branches pushed the per-operand offsets out
// of registers (the D-LSTM's 11-input, 24-output partials kernel got a 288-byte stack frame).
inline constexpr int max_float16_operands = 20;
template <class T, int NI, int NO>
inline constexpr bool converts_float16 = std::is_same_v<T, float> &&NI + NO <= max_float16_operands;

template <bool Convert, class T>
DUALCAST_DEVICE DUALCAST_FORCEINLINE T load_element(operand<T const> const &o, index_t off) {
  if constexpr (Convert) {
    if (o.st != element_storage::native) {
      std::uint16_t const b = reinterpret_cast<std::uint16_t const *>(o.ptr)[off];
      return o.st == element_storage::bfloat16 ? float_of_bfloat16(b) : float_of_half(b);
    }
  }
  return o.ptr[off];
}
template <bool Convert, class T>
DUALCAST_DEVICE DUALCAST_FORCEINLINE void store_element(operand<T> const &o, index_t off, bool add,
                                                        T x) {
  if constexpr (Convert) {
    if (o.st != element_storage::native) {
      std::uint16_t *b = reinterpret_cast<std::uint16_t *>(o.ptr) + off;
      bool const bf = o.st == element_storage::bfloat16;
      if (add)
        x += bf ? float_of_bfloat16(*b) : float_of_half(*b);
      *b = bf ? bfloat16_bits_of(x) : half_bits_of(x);
      return;
    }
  }
  T *e = o.ptr + off;
  *e = add ? *e + x : x;
}
template <class T, int NI, int NO, class Op>
DUALCAST_DEVICE DUALCAST_FORCEINLINE void
map_element(map_params<T, NI, NO> const &p, index_t const *in_off, index_t const *out_off, Op &op) {
  T in[NI > 0 ? NI : 1], out[NO];
  for (int k = 0; k < NI; ++k)
    in[k] = load_element<converts_float16<T, NI, NO>>(p.in[k], in_off[k]);
  op(static_cast<T const *>(in), out);
  for (int k = 0; k < NO; ++k)
    store_element<converts_float16<T, NI, NO>>(p.out[k], out_off[k], p.add[k], out[k]);
}

template <class T, int NI, int NO, class Op>
DUALCAST_GLOBAL void __launch_bounds__(max_block)
    map_strided(map_params<T, NI, NO> p, index_t total, Op op) {
  for (index_t e = index_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += index_t(gridDim.x) * blockDim.x) {
    index_t in_off[NI > 0 ? NI : 1] = {}, out_off[NO] = {};
    index_t rem = e;
    for (int d = p.rank - 1; d >= 0; --d) {
      index_t i = rem % p.ext[d];
      rem /= p.ext[d];
      add_index(p, d, i, in_off, out_off);
    }
    map_element(p, in_off, out_off, op);
  }
}

// The offsets of element (r, c) of map_rows: the outermost index needs no division (r < its
// extent times the others'), so a 2-D layout divides nothing.
template <class T, int NI, int NO>
DUALCAST_DEVICE DUALCAST_FORCEINLINE void row_element_offsets(map_params<T, NI, NO> const &p,
                                                              index_t r, index_t c, index_t *in_off,
                                                              index_t *out_off) {
  const int last = p.rank - 1;
  add_index(p, last, c, in_off, out_off);
  index_t rem = r;
  for (int d = last - 1; d >= 0; --d) {
    index_t i = d == 0 ? rem : rem % p.ext[d];
    rem = d == 0 ? 0 : rem / p.ext[d];
    add_index(p, d, i, in_off, out_off);
  }
}
// One side's offsets of element (r, c) (Outputs: p.out's, else p.in's), the same sums.
template <bool Outputs, class T, int NI, int NO>
DUALCAST_DEVICE DUALCAST_FORCEINLINE void row_side_offsets(map_params<T, NI, NO> const &p,
                                                           index_t r, index_t c, index_t *off) {
  constexpr int n = Outputs ? NO : NI;
  const int last = p.rank - 1;
  auto stride = [&](int k, int d) { return Outputs ? p.out[k].stride[d] : p.in[k].stride[d]; };
  for (int k = 0; k < n; ++k)
    off[k] = c * stride(k, last);
  index_t rem = r;
  for (int d = last - 1; d >= 0; --d) {
    index_t i = d == 0 ? rem : rem % p.ext[d];
    rem = d == 0 ? 0 : rem / p.ext[d];
    for (int k = 0; k < n; ++k)
      off[k] += i * stride(k, d);
  }
}

// value_and_vjp's kernels in double of more than 12 operands compute the outputs' offsets after
// the operation instead of keeping them live across it: the LSTM update's (7 inputs, 7 outputs)
// otherwise spilled 36 bytes on sm_90 (80 registers, a 16-byte stack); now 78 registers, no
// spill. So do VJPs in double over a subset of the arrays (vjp_op::of_subset): the LSTM cell's
// over its gates or without its first gate (7 x 4, the PyTorch operator's CUDA half) spilled 20
// bytes on sm_90 (64 registers, an 8-byte stack); now 60, no spill. Elsewhere the late form
// spilled where the early one, as CI builds it, does not (nvcc 13, sm_90: the exact-arithmetic
// partials 2 x 9, 40 bytes; the LSTM VJP over all 5 arrays, 7 x 5, 8 bytes; the GRU cell's
// partials 7 x 8, 8 bytes), so every other kernel, float ones included, keeps its code.
template <class Op> constexpr bool op_with_values() {
  if constexpr (requires { Op::with_values; })
    return Op::with_values;
  else
    return false;
}
template <class Op> constexpr bool op_of_subset() {
  if constexpr (requires { Op::of_subset; })
    return Op::of_subset;
  else
    return false;
}
template <class T, int NI, int NO, class Op>
inline constexpr bool rows_late_outputs = std::is_same_v<T, double> &&
                                          ((NI + NO > 12 && op_with_values<Op>()) ||
                                           op_of_subset<Op>());

// Strided and broadcast layouts whose last (collapsed) dimension is long -- a row or column mask
// against a matrix, a bias over a batch: a block takes one row at a time, computes the row's
// offsets once, and its threads walk the row's columns. map_strided above instead divides each
// element's index by every extent (64-bit divisions, a dozen operands' offsets): the HM-LSTM
// update with 1 x n masks ran there at 26 % of an H200's DRAM bandwidth (ncu).
template <class T, int NI, int NO, class Op>
DUALCAST_GLOBAL void __launch_bounds__(max_block)
    map_rows(map_params<T, NI, NO> p, index_t rows, Op op) {
  const index_t cols = p.ext[p.rank - 1];
  for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) {
      // Offsets recomputed per element rather than kept per row: a dozen 64-bit row offsets live
      // across the operation made ptxas spill.
      if constexpr (rows_late_outputs<T, NI, NO, Op>) {
        T in[NI > 0 ? NI : 1], out[NO];
        {
          index_t in_off[NI > 0 ? NI : 1];
          row_side_offsets<false>(p, r, c, in_off);
          for (int k = 0; k < NI; ++k)
            in[k] = p.in[k].ptr[in_off[k]];
        }
        op(static_cast<T const *>(in), out);
        index_t out_off[NO];
        row_side_offsets<true>(p, r, c, out_off);
        for (int k = 0; k < NO; ++k)
          store_element<false>(p.out[k], out_off[k], p.add[k], out[k]);
      } else {
        index_t in_off[NI > 0 ? NI : 1] = {}, out_off[NO] = {};
        row_element_offsets(p, r, c, in_off, out_off);
        map_element(p, in_off, out_off, op);
      }
    }
  }
}

// Four contiguous 16-bit elements (one 8-byte load, element 0 in the low half of x) widened into a
// float4, and a float4 rounded into four: the portable conversions above, per lane.
DUALCAST_DEVICE DUALCAST_FORCEINLINE float4 widen4(element_storage st, uint2 b) {
  bool const bf = st == element_storage::bfloat16;
  auto w = [bf](std::uint32_t h) {
    return bf ? float_of_bfloat16(std::uint16_t(h)) : float_of_half(std::uint16_t(h));
  };
  return make_float4(w(b.x & 0xffffu), w(b.x >> 16), w(b.y & 0xffffu), w(b.y >> 16));
}
DUALCAST_DEVICE DUALCAST_FORCEINLINE uint2 narrow4(element_storage st, float4 v) {
  bool const bf = st == element_storage::bfloat16;
  auto n = [bf](float x) -> std::uint32_t { return bf ? bfloat16_bits_of(x) : half_bits_of(x); };
  return make_uint2(n(v.x) | n(v.y) << 16, n(v.z) | n(v.w) << 16);
}
// The contiguous kernel's whole vectors of operand o (vector v: elements 4v .. 4v + 3), in 16 bits
// where o is so stored (Float16: a float pass with such operands).
template <bool Float16, class V, class T>
DUALCAST_DEVICE DUALCAST_FORCEINLINE V load_vector(operand<T const> const &o, index_t v) {
  if constexpr (Float16)
    if (o.st != element_storage::native)
      return widen4(o.st, reinterpret_cast<uint2 const *>(o.ptr)[v]);
  return reinterpret_cast<V const *>(o.ptr)[v];
}
template <bool Float16, class V, class T>
DUALCAST_DEVICE DUALCAST_FORCEINLINE void store_vector(operand<T> const &o, index_t v, bool add,
                                                       V x) {
  if constexpr (Float16) {
    if (o.st != element_storage::native) {
      uint2 *b = reinterpret_cast<uint2 *>(o.ptr) + v;
      if (add) {
        float4 const old = widen4(o.st, *b);
        x.x += old.x, x.y += old.y, x.z += old.z, x.w += old.w;
      }
      *b = narrow4(o.st, x);
      return;
    }
  }
  V *e = reinterpret_cast<V *>(o.ptr) + v;
  if (add) {
    V const old = *e;
    for (int l = 0; l < vec16<T>::lanes; ++l)
      set_lane(x, l, lane_of(old, l) + lane_of(x, l));
  }
  *e = x;
}

template <bool Float16 = false, class T, int NI, int NO, class Op>
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
        in[k] = lane_of(vin[k], 0);
      op(static_cast<T const *>(in), out);
      for (int k = 0; k < NO; ++k)
        set_lane(vout[k], 0, out[k]);
      for (int k = 0; k < NO; ++k) {
        V *o = reinterpret_cast<V *>(p.out[k].ptr) + v;
        if (p.add[k]) {
          V old = *o;
          set_lane(vout[k], 0, lane_of(old, 0) + lane_of(vout[k], 0));
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
      // The native kernels' loads and stores are the code they had before 16-bit operands (any
      // other form made ptxas spill double kernels of tests/cuda/tape_cases_gpu.cu); the 16-bit
      // kernels' loops over operands are unrolled (rolled, vin / vout went to a 112-byte stack
      // frame in the LSTM cell's values kernel).
      if constexpr (!Float16) {
        for (int k = 0; k < NI; ++k) {
          if (whole) {
            vin[k] = reinterpret_cast<V const *>(p.in[k].ptr)[v];
          } else {
            for (int l = 0; l < lanes; ++l)
              set_lane(vin[k], l, l < present ? p.in[k].ptr[v * lanes + l] : T(0));
          }
        }
      } else {
#pragma unroll
        for (int k = 0; k < NI; ++k) {
          if (whole) {
            vin[k] = load_vector<Float16, V>(p.in[k], v);
          } else {
            for (int l = 0; l < lanes; ++l)
              set_lane(vin[k], l,
                       l < present ? load_element<Float16>(p.in[k], v * lanes + l) : T(0));
          }
        }
      }
      auto one_lane = [&](int l) {
        for (int k = 0; k < NI; ++k)
          in[k] = lane_of(vin[k], l);
        op(static_cast<T const *>(in), out);
        for (int k = 0; k < NO; ++k)
          set_lane(vout[k], l, out[k]);
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
      if constexpr (!Float16) {
        for (int k = 0; k < NO; ++k) {
          if (whole) {
            V *o = reinterpret_cast<V *>(p.out[k].ptr) + v;
            if (p.add[k]) {
              V old = *o;
              for (int l = 0; l < lanes; ++l)
                set_lane(vout[k], l, lane_of(old, l) + lane_of(vout[k], l));
            }
            *o = vout[k];
          } else {
            for (int l = 0; l < present; ++l) {
              T *o = p.out[k].ptr + v * lanes + l;
              T const r = lane_of(vout[k], l);
              *o = p.add[k] ? *o + r : r;
            }
          }
        }
      } else {
#pragma unroll
        for (int k = 0; k < NO; ++k) {
          if (whole) {
            store_vector<Float16>(p.out[k], v, p.add[k], vout[k]);
          } else {
            for (int l = 0; l < present; ++l)
              store_element<Float16>(p.out[k], v * lanes + l, p.add[k], lane_of(vout[k], l));
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
  bool const float16 = has_float16(p);
  if (float16 && !converts_float16<T, NI, NO>)
    throw dtype_error("dualcast: a CUDA call with bfloat16 / half arrays takes at most " +
                      std::to_string(max_float16_operands) +
                      " arrays and partial arrays (this one " + std::to_string(NI + NO) +
                      "); use float arrays for it");
  // 16-bit operands take the vector path in float passes of at most 8 arrays (wider ones load
  // one element at a time anyway: element by element below).
  constexpr bool vector16 = converts_float16<T, NI, NO> && NI + NO <= 8;
  bool contiguous = p.rank == 1 && (!float16 || vector16);
  // (16 bytes of a native operand, 8 of a 16-bit one: four elements)
  auto aligned = [](auto const &o) {
    return reinterpret_cast<std::uintptr_t>(o.ptr) % (o.st == element_storage::native ? 16 : 8) ==
           0;
  };
  for (int k = 0; k < NI && contiguous; ++k)
    contiguous = p.in[k].stride[0] == 1 && aligned(p.in[k]);
  for (int k = 0; k < NO && contiguous; ++k)
    contiguous = p.out[k].stride[0] == 1 && aligned(p.out[k]);
  const int block = block_for(ex);
  const index_t cols = p.ext[p.rank - 1];
  const unsigned vgrid = grid_for(total / vec16<T>::lanes + 1, block);
  if (contiguous && !float16) {
    map_contiguous<<<vgrid, block, 0, ex.stream>>>(p, total, op);
  } else if (contiguous) {
    if constexpr (vector16)
      map_contiguous<true><<<vgrid, block, 0, ex.stream>>>(p, total, op);
  } else if (p.rank > 1 && cols >= 64) { // rows of at least two warps: one block per row
    const index_t rows = total / cols;
    const int row_block = cols < block ? int((cols + 31) / 32 * 32) : block;
    map_rows<<<grid_for(rows * row_block, row_block), row_block, 0, ex.stream>>>(p, rows, op);
  } else {
    map_strided<<<grid_for(total, block), block, 0, ex.stream>>>(p, total, op);
  }
  check(cudaGetLastError(), "launching a dualcast kernel");
}

DUALCAST_KERNELS_END
} // namespace DUALCAST_KERNEL_ABI
} // namespace dualcast::detail::cuda_backend

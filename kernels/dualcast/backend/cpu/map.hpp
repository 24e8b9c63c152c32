// dualcast/backend/cpu/map.hpp: runs an element operation (kernel/detail/element_ops.hpp) over a
// broadcast iteration space on the CPU: OpenMP threads over fixed blocks, SIMD batches inside.
//
// The iteration space is cut into blocks whose boundaries do not depend on the thread count, and
// every element is computed by the same instructions wherever it lies (strided operands and a
// partial last batch are packed into whole contiguous batches), so results are identical for any
// number of threads.
#pragma once

#include <dualcast/backend/cpu/convert.hpp>
#include <dualcast/backend/cpu/executor.hpp>
#include <dualcast/backend/map_params.hpp>
#include <dualcast/core/compiled.hpp>
#include <dualcast/numbers/dual.hpp>
#include <dualcast/numbers/simd.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

namespace dualcast::detail::cpu_backend {

// Elements per block of work: big enough to amortise index arithmetic, small enough to balance.
inline constexpr index_t block_elements = 8192;
// Below this many elements a call runs on the calling thread: from two blocks on, the threads
// share them. (At 16384 floats, 2 threads, an AMD Zen 4: x + y 1.46 -> 1.1 us, the LSTM cell's
// value_and_vjp 34 -> 17.6 us, against 4 blocks before; waking the team costs less than a block.)
inline constexpr index_t parallel_threshold = 2 * block_elements;

template <class T, bool Simd> struct lanes {
#if DUALCAST_HAS_SIMD
  static constexpr int width = Simd ? native_width<T> : 1;
  using type = std::conditional_t<Simd, batch<T, width>, T>;
#else
  static constexpr int width = 1;
  using type = T;
#endif
};

// Elements per lane value: the batch width, or 1 for a plain number.
template <class L> inline constexpr int lane_count = 1;
#if DUALCAST_HAS_SIMD
template <class T, int W> inline constexpr int lane_count<batch<T, W>> = W;
#endif

template <class L, class T> inline L load_lanes(T const *p, index_t stride, int n) {
#if DUALCAST_HAS_SIMD
  if constexpr (is_batch_v<L>) {
    constexpr int W = L::size;
    if (n == W && stride == 1)
      return L::load(p);
    if (stride == 0)
      return L(*p);
    L r;
    for (int i = 0; i < W; ++i)
      r.v[i] = p[std::min(i, n - 1) * stride]; // pad with the last element
    return r;
  } else
#endif
  {
    (void)n;
    (void)stride;
    return *p;
  }
}

template <class L, class T> inline void store_lanes(L const &x, T *p, index_t stride, int n) {
#if DUALCAST_HAS_SIMD
  if constexpr (is_batch_v<L>) {
    if (n == L::size && stride == 1)
      return x.store(p);
    for (int i = 0; i < n; ++i)
      p[i * stride] = x.v[i];
  } else
#endif
  {
    (void)n;
    (void)stride;
    *p = x;
  }
}

// Evaluates op on one batch, once per distinct path its lanes take through the kernel's branches
// (detail::lane_paths, numbers/simd.hpp; the caller has made them active with every lane running):
// the first evaluation follows the lanes whose first disagreeing condition holds, each later one
// the lanes split off, and the results are blended lane by lane. Batches whose lanes agree (the
// usual case) cost one evaluation and one check. The operation is called from one place only, so
// the kernel's body is inlined here once.
// (`done` is read only after the first evaluation wrote it; GCC cannot see that through the loop.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
template <class L, class Op>
DUALCAST_FORCEINLINE void eval_batch(Op const &op, L const *in, L *out,
                                     [[maybe_unused]] detail::lane_paths &paths) {
#if DUALCAST_HAS_SIMD
  if constexpr (is_batch_v<L>) {
    using M = decltype(L{} < L{});
    constexpr int NO = Op::num_out;
    L done[NO]; // the lanes of the paths evaluated so far (their own results, garbage elsewhere)
    bool first = true;
    for (;;) {
      op(in, out); // (always into `out`: it stays in registers)
      if (first && paths.n_pending == 0) [[likely]]
        return;
      if (!first) {
        M m = M::from_bits(paths.lanes);
        for (int k = 0; k < NO; ++k)
          out[k] = L{m.v ? out[k].v : done[k].v};
      }
      if (paths.n_pending == 0) {
        paths.lanes = M::all_bits;
        return;
      }
      for (int k = 0; k < NO; ++k)
        done[k] = out[k];
      paths.lanes = paths.pending[--paths.n_pending];
      first = false;
    }
  }
#endif
  op(in, out);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// ---- 16-bit operands in registers -------------------------------------------------------------
// A batch of W contiguous elements of 16-bit storage s at p widened to float in registers
// (bfloat16: a 16-bit shift; half: F16C where the target has it), and a float batch rounded into
// s on store: the same bits as the row conversions of backend/cpu/convert.hpp and
// numbers/float16.hpp (round to nearest even, NaN kept and made quiet).
#if DUALCAST_HAS_SIMD
// (vector types of W lanes in a class template: GCC drops vector_size from a typedef in a
// function template. The 16-bit operands are only 2-byte aligned: they are read and written by
// memcpy, one unaligned vector move; a vector type with aligned(2) got an aligned move at -O0.)
template <int W> struct vec16 {
  typedef std::uint16_t u16_t __attribute__((vector_size(2 * W)));
  typedef std::uint32_t u32_t __attribute__((vector_size(4 * W)));
};
template <class L> DUALCAST_FORCEINLINE L widen_lanes(element_storage s, void const *p) {
  constexpr int W = L::size;
  using vec_t = typename L::vec_t;
  using u16_t = typename vec16<W>::u16_t;
  using u32_t = typename vec16<W>::u32_t;
  u16_t b;
  std::memcpy(&b, p, sizeof b);
#if defined(__AVX2__)
  if constexpr (W == 8)
    if (s == element_storage::bfloat16)
      return L{__builtin_bit_cast(vec_t, float_of_bfloat16_8(__builtin_bit_cast(__m128i, b)))};
#endif
#if defined(__AVX512F__)
  // (One widening of the 16 lanes: GCC lowers the generic form below in two 8-lane halves. The
  // zero-masking forms, every lane selected: see below.)
  if constexpr (W == 16)
    if (s == element_storage::bfloat16)
      return L{__builtin_bit_cast(
          vec_t,
          _mm512_maskz_slli_epi32(
              __mmask16(0xffff),
              _mm512_maskz_cvtepu16_epi32(__mmask16(0xffff), __builtin_bit_cast(__m256i, b)), 16))};
#endif
  if (s == element_storage::bfloat16)
    return L{__builtin_bit_cast(vec_t, __builtin_convertvector(b, u32_t) << 16)};
#if defined(__F16C__)
  if constexpr (W == 8)
    return L{__builtin_bit_cast(vec_t, _mm256_cvtph_ps(__builtin_bit_cast(__m128i, b)))};
#endif
#if defined(__AVX512F__)
  // The zero-masking forms with every lane selected (here and in narrow_lanes): the same
  // instruction as _mm512_cvtph_ps / _mm512_cvtps_ph, whose _mm512_undefined_* trips g++ 12's
  // -Wmaybe-uninitialized.
  if constexpr (W == 16)
    return L{__builtin_bit_cast(
        vec_t, _mm512_maskz_cvtph_ps(__mmask16(0xffff), __builtin_bit_cast(__m256i, b)))};
#endif
  L r;
  for (int i = 0; i < W; ++i)
    r.v[i] = float_of_half(b[i]);
  return r;
}
template <class L> DUALCAST_FORCEINLINE void narrow_lanes(element_storage s, L const &x, void *p) {
  constexpr int W = L::size;
  using u16_t = typename vec16<W>::u16_t;
  using u32_t = typename vec16<W>::u32_t;
  u16_t b;
#if defined(DUALCAST_HAS_BF16_CONVERT)
  if constexpr (W == 16)
    if (s == element_storage::bfloat16) {
      __m256i bits;
      if (bfloat16_bits_of_16(__builtin_bit_cast(__m512, x.v), bits)) {
        b = __builtin_bit_cast(u16_t, bits);
        std::memcpy(p, &b, sizeof b);
        return;
      }
    }
#endif
#if defined(__AVX2__)
  if constexpr (W == 8)
    if (s == element_storage::bfloat16) {
      b = __builtin_bit_cast(u16_t, bfloat16_bits_of_8(__builtin_bit_cast(__m256, x.v)));
      std::memcpy(p, &b, sizeof b);
      return;
    }
#endif
  if (s == element_storage::bfloat16) {
    // bfloat16_bits_of on W lanes (as bfloat16_bits_of_8, backend/cpu/convert.hpp)
    u32_t const u = __builtin_bit_cast(u32_t, x.v);
    u32_t const rounded = u + 0x7fffu + ((u >> 16) & 1u);
    u32_t const r = (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u) : rounded;
    b = __builtin_convertvector(r >> 16, u16_t);
  } else {
#if defined(__F16C__)
    if constexpr (W == 8) {
      b = __builtin_bit_cast(u16_t, _mm256_cvtps_ph(__builtin_bit_cast(__m256, x.v),
                                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      std::memcpy(p, &b, sizeof b);
      return;
    }
#endif
#if defined(__AVX512F__)
    if constexpr (W == 16) {
      b = __builtin_bit_cast(
          u16_t, _mm512_maskz_cvtps_ph(__mmask16(0xffff), __builtin_bit_cast(__m512, x.v),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      std::memcpy(p, &b, sizeof b);
      return;
    }
#endif
    for (int i = 0; i < W; ++i)
      b[i] = half_bits_of(x.v[i]);
  }
  std::memcpy(p, &b, sizeof b);
}
#endif

// The batch of element i of an operand stored as s whose first element is at p (the address of a
// 16-bit element when s is not native), and the store of x there: what run_batches does for a
// float batch L when its operands' storages are given.
// (converted in registers: float SIMD batches, lane_count > 1)
template <class L, class T>
inline constexpr bool converts_16bit = lane_count<L> > 1 && std::is_same_v<T, float>;
template <class L, class T>
DUALCAST_FORCEINLINE L load_stored([[maybe_unused]] element_storage s, T const *p, index_t i) {
#if DUALCAST_HAS_SIMD
  if constexpr (converts_16bit<L, T>)
    if (s != element_storage::native)
      return widen_lanes<L>(s, reinterpret_cast<std::uint16_t const *>(p) + i);
#endif
  return load_lanes<L>(p + i, 1, lane_count<L>);
}
template <class L, class T>
DUALCAST_FORCEINLINE void store_stored([[maybe_unused]] element_storage s, L const &x, T *p,
                                       index_t i) {
#if DUALCAST_HAS_SIMD
  if constexpr (converts_16bit<L, T>)
    if (s != element_storage::native)
      return narrow_lanes(s, x, reinterpret_cast<std::uint16_t *>(p) + i);
#endif
  store_lanes(x, p + i, 1, lane_count<L>);
}

// An element operation with a slow path for batches whose first repaired_outputs results came out
// inf or NaN in some lanes (the VJP's zero-wins rule: kernel/detail/element_ops.hpp,
// vjp_op::repair), run after a row's batches rather than tested in the batch loop.
template <class Op>
concept repairs_batches = requires {
  Op::repaired_outputs;
};

// After the batch loop: each batch whose results to repair hold an inf or NaN, its inputs read
// again (run_row keeps them intact: such an operation's results are never written over its
// inputs), op.repair on them, and those results stored again. Out of line: the batch loop keeps
// nothing for it.
template <class L, class T, class Op>
[[gnu::noinline]] void repair_batches(Op const &f, T const *const *ip, index_t const *mask,
                                      T *const *out, element_storage const *ist,
                                      element_storage const *ost, index_t n) {
  constexpr int NI = Op::num_in, NO = Op::num_out, R = Op::repaired_outputs;
  constexpr int W = lane_count<L>;
  bool const native = ist == nullptr;
  auto load_in = [&](int k, index_t i) {
    return native ? load_lanes<L>(ip[k] + (i & mask[k]), 1, W)
                  : load_stored<L>(ist[k], ip[k], i & mask[k]);
  };
  auto load_out = [&](int k, index_t i) {
    return native ? load_lanes<L>(out[k] + i, 1, W) : load_stored<L>(ost[k], out[k], i);
  };
  for (index_t i = 0; i + W <= n; i += W) {
    // One test of the results' sum (an inf or NaN in any result makes it one; a sum that only
    // overflowed costs op.repair, which finds no lane).
    L sum = load_out(0, i);
    for (int k = 1; k < R; ++k)
      sum = sum + load_out(k, i);
    if (all_finite(sum)) [[likely]]
      continue;
    L in_l[NI > 0 ? NI : 1], out_l[NO];
    for (int k = 0; k < NI; ++k)
      in_l[k] = load_in(k, i);
    for (int k = 0; k < NO; ++k)
      out_l[k] = load_out(k, i);
    f.repair(in_l, out_l);
    for (int k = 0; k < R; ++k) {
      if (native)
        store_lanes(out_l[k], out[k] + i, 1, W);
      else
        store_stored(ost[k], out_l[k], out[k], i);
    }
  }
}

// n elements (a multiple of the batch width) of operands that are contiguous: plain vector loads
// and stores, the kernel's body inlined (flattened) into the loop. Input k's batch at i is read at
// in[k] + (i & in_mask[k]): a mask of all ones for a contiguous input, 0 for a broadcast one (one
// value, its first batch filled with it), so broadcast inputs need neither a packing pass nor an
// instantiation of their own. The element operation comes as a pointer (op_ptr, an Op): this loop
// is the only part of a pass compiled per element operation; the rest (run_row, map_collapsed,
// its OpenMP region) is compiled once per element type and operand count and reaches it through
// a function pointer, called once per row or chunk of 64 elements (batch_loop below).
//
// st, when not null, gives each operand's storage (the inputs', then the outputs'): over float
// lanes an operand stored in 16 bits (its pointer then the address of its first 16-bit element)
// is widened in registers on load and rounded from its register on store. It is the same loop,
// the storage a test per batch that goes the same way every time: a second loop per kernel for
// 16-bit operands made GCC 12 stop inlining the kernel into the float loops (issue 37's note).
template <class L, class T, class Op>
DUALCAST_FLATTEN void run_batches(void const *op_ptr, T const *const *in, index_t const *in_mask,
                                  T *const *out, element_storage const *st, index_t n) {
  Op const &f = *static_cast<Op const *>(op_ptr);
  constexpr int NI = Op::num_in, NO = Op::num_out;
  constexpr int W = lane_count<L>;
  // The staging area is larger than the operands need: GCC inlines a large kernel body only
  // while the caller's stack frame grows by less than --param large-stack-frame-growth (1000 %),
  // and the flattened lambda must be inlined here for the dual arithmetic to stay in registers.
  L stage[(NI > 0 ? NI : 1) + NO + 32];
  L *in_l = stage, *out_l = stage + (NI > 0 ? NI : 1);
  detail::lane_paths &paths = detail::current_lane_paths();
#if DUALCAST_HAS_SIMD
  if constexpr (is_batch_v<L>) {
    paths.active = true;
    paths.lanes = decltype(L{} < L{})::all_bits;
    paths.n_pending = 0;
  }
#endif
  // The caller's pointers and masks copied to locals: the batches' stores (may_alias vectors)
  // could otherwise overwrite them for all the compiler knows, and it reloads them per batch.
  T const *ip[NI > 0 ? NI : 1];
  index_t mask[NI > 0 ? NI : 1];
  T *op_out[NO];
  for (int k = 0; k < NI; ++k)
    ip[k] = in[k], mask[k] = in_mask[k];
  for (int k = 0; k < NO; ++k)
    op_out[k] = out[k];
  bool const native = st == nullptr;
  element_storage ist[NI > 0 ? NI : 1] = {}, ost[NO] = {};
  if (!native) {
    for (int k = 0; k < NI; ++k)
      ist[k] = st[k];
    for (int k = 0; k < NO; ++k)
      ost[k] = st[NI + k];
  }
  // (the kernel is called from one place only: a second call site is a second inlined copy)
  constexpr bool convert = converts_16bit<L, T>;
  for (index_t i = 0; i + W <= n; i += W) {
    if (convert && !native) {
      for (int k = 0; k < NI; ++k)
        in_l[k] = load_stored<L>(ist[k], ip[k], i & mask[k]);
    } else {
      for (int k = 0; k < NI; ++k)
        in_l[k] = load_lanes<L>(ip[k] + (i & mask[k]), 1, W);
    }
    eval_batch(f, in_l, out_l, paths);
    if (convert && !native) {
      for (int k = 0; k < NO; ++k)
        store_stored(ost[k], out_l[k], op_out[k], i);
    } else {
      for (int k = 0; k < NO; ++k)
        store_lanes(out_l[k], op_out[k] + i, 1, W);
    }
  }
  paths.active = false;
  if constexpr (repairs_batches<Op> && W > 1) // (a SIMD batch)
    repair_batches<L>(f, ip, mask, op_out, native ? nullptr : ist, native ? nullptr : ost, n);
}

// An element operation as the passes below see it: its batch loop and the operation; keeps_inputs:
// it reads its inputs again after the batch loop (repair_batches), so its results go through a
// buffer where one would be written over an input (the same elements: check_aliasing lets only
// those meet).
template <class T> struct batch_loop {
  void (*run)(void const *op, T const *const *in, index_t const *in_mask, T *const *out,
              element_storage const *st, index_t n);
  void const *op;
  bool keeps_inputs = false;
};
// Whether a result written in place (contiguous, not added to: the others go through out_buf
// anyway) starts at an input's first element (for keeps_inputs: results meet inputs only as the
// same elements, so at the same first address). Branch-free compares of addresses: a D-LSTM
// node's VJP has 13 inputs and 11 results, 8 of them added to parameters' gradients.
template <int NI, int NO, class P, class Q>
bool writes_over_inputs(P const *const *in, Q const *const *out, index_t const *out_stride,
                        bool const *add) {
  int met = 0;
  for (int k = 0; k < NO; ++k) {
    if (out_stride[k] != 1 || add[k])
      continue;
    auto const o = reinterpret_cast<std::uintptr_t>(out[k]);
    for (int j = 0; j < NI; ++j)
      met |= int(reinterpret_cast<std::uintptr_t>(in[j]) == o);
  }
  return met != 0;
}

// f(st) with the stride st as a compile-time constant for the small strides of the parts of dual
// arrays (a tape over duals reads the value and each partial of dual<T, K> elements in place:
// stride K + 1, ops/fused/dual_node.hpp), so that the packing loops vectorize; else as it is.
template <class F> DUALCAST_FORCEINLINE void strided_rows(index_t st, F const &f) {
  switch (st) {
  case 1:
    f(std::integral_constant<index_t, 1>{});
    break;
  case 2:
    f(std::integral_constant<index_t, 2>{});
    break;
  case 3:
    f(std::integral_constant<index_t, 3>{});
    break;
  case 5:
    f(std::integral_constant<index_t, 5>{});
    break;
  default:
    f(st);
  }
}

// Elements per packed chunk of a row that is strided (or of a row's partial last batch).
inline constexpr index_t pack_elements = 64;

#if DUALCAST_HAS_SIMD
// Lanes i[0], i[1], ... of the 2W lanes of a then b.
template <int... i, class T, int W>
inline batch<T, W> pick_lanes(batch<T, W> const &a, batch<T, W> const &b) {
  return batch<T, W>(__builtin_shufflevector(a.v, b.v, i...));
}
// Every second number from src, W of them: the even lanes of two loads. The last batch of a run
// (last) loads its second half one number earlier, so that it reads nothing past the run's last
// element, and takes that half's odd lanes.
template <class L, class T, std::size_t... i>
inline L every_second(T const *src, bool last, std::index_sequence<i...>) {
  constexpr int W = lane_count<L>;
  L const a = L::load(src);
  if (last)
    return pick_lanes<(int(i) < W / 2 ? 2 * int(i) : 2 * int(i) + 1)...>(a, L::load(src + W - 1));
  return pick_lanes<2 * int(i)...>(a, L::load(src + W));
}
#endif

// The contiguous loops of pack_row and unpack_row in functions of their own with restrict
// parameters, because a lambda's captured pointers are not restrict: the add loop of unpack_row ran
// on scalars (the D-LSTM node's VJP adds 8 rows of 14 to its weights' gradients). Only there: with
// restrict GCC 12 also vectorised the stride-2 loops (a tape over duals' parts), with shuffles
// that cost more than the scalar loop (the small MLP's H v +3 % instructions).
template <class T> inline void copy_run(T *__restrict dst, T const *__restrict src, index_t m) {
  for (index_t j = 0; j < m; ++j)
    dst[j] = src[j];
}
template <class T> inline void add_run(T *__restrict dst, T const *__restrict src, index_t m) {
  for (index_t j = 0; j < m; ++j)
    dst[j] = dst[j] + src[j];
}
template <class S> inline constexpr bool is_unit_stride_v = false;
template <> inline constexpr bool is_unit_stride_v<std::integral_constant<index_t, 1>> = true;

// m elements of a strided run into a chunk buffer, padded to mp with the last one. restrict (the
// buffer is the row's own): without it GCC reloaded the last element for each padding lane, the
// stores to the buffer possibly changing it (1.5 % of the instructions of the D-LSTM's H v, whose
// 14-element rows of dual parts all go through these buffers).
template <class L, class T>
inline void pack_row(T *__restrict dst, T const *__restrict src, index_t st, index_t m,
                     index_t mp) {
  bool packed = false;
#if DUALCAST_HAS_SIMD
  if constexpr (is_batch_v<L>) {
    // Stride 2 (a part of dual<T, 1> numbers, a tape over duals' H v): whole batches, the last
    // one ending at the run's last element (overlapping the one before where m is not a
    // multiple of W).
    constexpr index_t W = lane_count<L>;
    if (st == 2 && m >= W) {
      constexpr auto lanes = std::make_index_sequence<std::size_t(W)>{};
      for (index_t j = 0; j + W < m; j += W)
        every_second<L>(src + 2 * j, false, lanes).store(dst + j);
      every_second<L>(src + 2 * (m - W), true, lanes).store(dst + m - W);
      packed = true;
    }
  }
#endif
  if (!packed)
    strided_rows(st, [&](auto s) {
      if constexpr (is_unit_stride_v<decltype(s)>)
        copy_run(dst, src, m);
      else
        for (index_t j = 0; j < m; ++j)
          dst[j] = src[j * s];
    });
  T const last = src[(m - 1) * st];
  for (index_t j = m; j < mp; ++j)
    dst[j] = last;
}
// m results from a chunk buffer into a strided run, written or added.
template <class T>
inline void unpack_row(T *__restrict dst, T const *__restrict src, index_t st, index_t m,
                       bool add) {
#if defined(__AVX512F__)
  // Stride 2 (a part of dual<double, 1> numbers): 8 results spread over 16 slots by two expands
  // and written by masked stores, not 8 scalar stores; the last m % 8 by the loop below.
  if constexpr (std::is_same_v<T, double>)
    if (st == 2) {
      index_t j = 0;
      for (; j + 8 <= m; j += 8) {
        __m512d const v = _mm512_loadu_pd(src + j);
        __m512d lo = _mm512_maskz_expand_pd(0x55, v);
        __m512d hi = _mm512_maskz_expand_pd(0x55, _mm512_maskz_shuffle_f64x2(0xff, v, v, 0xee));
        if (add) {
          lo = _mm512_add_pd(lo, _mm512_maskz_loadu_pd(0x55, dst + 2 * j));
          hi = _mm512_add_pd(hi, _mm512_maskz_loadu_pd(0x55, dst + 2 * j + 8));
        }
        _mm512_mask_storeu_pd(dst + 2 * j, 0x55, lo);
        _mm512_mask_storeu_pd(dst + 2 * j + 8, 0x55, hi);
      }
      dst += 2 * j, src += j, m -= j;
    }
#endif
  strided_rows(st, [&](auto s) {
    if constexpr (is_unit_stride_v<decltype(s)>)
      add ? add_run(dst, src, m) : copy_run(dst, src, m);
    else if (add)
      for (index_t j = 0; j < m; ++j)
        dst[j * s] = dst[j * s] + src[j];
    else
      for (index_t j = 0; j < m; ++j)
        dst[j * s] = src[j];
  });
}

// The input masks of a row (all ones; 0 for a broadcast input, stride 0) and each broadcast
// input's batch of its value, in row k of buf (rows of buf_row elements): its pointer, read again
// for every batch.
template <int W, class T>
inline void broadcast_batches(T const *const *in, index_t const *in_stride, int ni, T *buf,
                              std::size_t buf_row, T const **ip, index_t *in_mask) {
  for (int k = 0; k < ni; ++k) {
    in_mask[k] = in_stride[k] == 0 ? 0 : ~index_t(0);
    if (in_stride[k] == 0) {
      T *const b = buf + std::size_t(k) * buf_row;
      for (int j = 0; j < W; ++j)
        b[j] = in[k][0];
      ip[k] = b;
    }
  }
}

// run_row's rows with a partial last batch whose inputs are read where they are (below); out of
// line, so that the rows of whole batches keep the code GCC generated for them before this one
// existed (their unpacking loops inlined).
template <class L, class T, int NI, int NO>
[[gnu::noinline]] void run_row_in_place(batch_loop<T> const &op, T const *const *in,
                                        index_t const *in_stride, T *const *out,
                                        index_t const *out_stride, bool const *add, index_t n,
                                        bool in_place, bool buffered) {
  constexpr int W = lane_count<L>;
  alignas(64) T in_buf[NI > 0 ? NI : 1][W];
  alignas(64) T out_buf[NO][pack_elements];
  T const *ip[NI > 0 ? NI : 1] = {};
  index_t in_mask[NI > 0 ? NI : 1] = {};
  T *op_out[NO];
  broadcast_batches<W>(in, in_stride, NI, in_buf[0], sizeof in_buf[0] / sizeof(T), ip, in_mask);
  bool direct[NO];
  for (int k = 0; k < NO; ++k)
    direct[k] = out_stride[k] == 1 && !add[k] && !buffered;
  // `count` elements (whole batches) from row position `at`, for the chunk from `done`.
  auto run_at = [&](index_t at, index_t done, index_t count) {
    for (int k = 0; k < NI; ++k)
      if (in_stride[k] != 0)
        ip[k] = in[k] + at;
    for (int k = 0; k < NO; ++k)
      op_out[k] = direct[k] ? out[k] + at : out_buf[k] + (at - done);
    op.run(op.op, ip, in_mask, op_out, nullptr, count);
  };
  for (index_t done = 0; done < n;) {
    // A chunk of at least a batch, so that its overlapping batch reads only its own elements (the
    // chunks before may have been added over inputs: results meet inputs as the same elements).
    index_t m = in_place ? n : std::min(pack_elements, n - done);
    if (n - done - m > 0 && n - done - m < W)
      m -= W;
    index_t const whole = m / W * W;
    if (whole > 0)
      run_at(done, done, whole);
    if (whole < m)
      run_at(done + m - W, done, W);
    if (!in_place)
      for (int k = 0; k < NO; ++k)
        if (!direct[k])
          unpack_row(out[k] + done * out_stride[k], out_buf[k], out_stride[k], m, add[k]);
    done += m;
  }
}

// One run of n elements along the innermost dimension. The whole batches of a row whose inputs are
// contiguous or broadcast (stride 0) read them where they are; where n is not a multiple of the
// batch width, so does its last batch, one ending at the row's last element (overlapping the one
// before: those elements computed twice, the same way; run_row_in_place above) -- nothing packed,
// nothing read past the row. Outputs that are contiguous and overwritten are written in place;
// the others (strided, added to, or written over an input by an operation that reads its inputs
// again) go in chunks through a contiguous buffer, unpacked or added to the outputs afterwards, so
// that the loop over batches has no branch and the add reads and writes each output once. (No
// overlapping batch where an output written in place is an input: it would read what the batch
// before wrote.) Strided inputs and rows shorter than a batch go in chunks with their inputs
// packed too (padded to whole batches with the last element). All of it through the one call of
// the operation's batch loop: the kernel's body is compiled once per element operation (which
// keeps wide kernels quick to compile), and every element goes through the same instructions. (A
// plain-number lane, W = 1, takes the same ways: strided rows packed.)
template <class L, class T, int NI, int NO>
void run_row(batch_loop<T> const &op, T const *const *in, index_t const *in_stride, T *const *out,
             index_t const *out_stride, bool const *add, index_t n) {
  constexpr int W = lane_count<L>;
  bool inputs_in_place = true; // contiguous or broadcast
  for (int k = 0; k < NI; ++k)
    inputs_in_place = inputs_in_place && (in_stride[k] == 1 || in_stride[k] == 0);
  // A row with a partial last batch reads its inputs in place (run_row_in_place); the others
  // below, where its whole batches already do.
  bool const overlapping = W > 1 && n >= W && n % W != 0 && inputs_in_place;
  // Results written over inputs matter to an operation that reads its inputs again (through
  // out_buf, see batch_loop) and to a row with an overlapping last batch.
  bool const meets_inputs =
      (op.keeps_inputs || overlapping) && writes_over_inputs<NI, NO>(in, out, out_stride, add);
  bool const buffered = op.keeps_inputs && meets_inputs;
  bool in_place = inputs_in_place && !buffered; // and contiguous, overwritten outputs
  for (int k = 0; k < NO; ++k)
    in_place = in_place && out_stride[k] == 1 && !add[k];
  if (overlapping && (buffered || !meets_inputs)) {
    run_row_in_place<L, T, NI, NO>(op, in, in_stride, out, out_stride, add, n, in_place, buffered);
    return;
  }
  alignas(64) T in_buf[NI > 0 ? NI : 1][pack_elements];
  alignas(64) T out_buf[NO][pack_elements];
  T const *ip[NI > 0 ? NI : 1] = {}; // (initialised: GCC 12 -O3 -march=native warned)
  index_t in_mask[NI > 0 ? NI : 1] = {};
  T *op_out[NO];
  broadcast_batches<W>(in, in_stride, NI, in_buf[0], sizeof in_buf[0] / sizeof(T), ip, in_mask);
  for (index_t done = 0; done < n;) {
    index_t m, mp;
    bool chunked = !in_place || n - done < W;
    if (!chunked) { // every full batch left in the row
      m = mp = (n - done) / W * W;
      for (int k = 0; k < NI; ++k)
        if (in_stride[k] != 0)
          ip[k] = in[k] + done;
      for (int k = 0; k < NO; ++k)
        op_out[k] = out[k] + done;
    } else {
      m = std::min(pack_elements, n - done);
      mp = (m + W - 1) / W * W;
      for (int k = 0; k < NI; ++k) {
        if (in_stride[k] == 0)
          continue; // its batch, filled above
        if (in_stride[k] == 1 && m == mp) {
          ip[k] = in[k] + done;
        } else {
          pack_row<L>(in_buf[k], in[k] + done * in_stride[k], in_stride[k], m, mp);
          ip[k] = in_buf[k];
        }
      }
      for (int k = 0; k < NO; ++k)
        op_out[k] =
            out_stride[k] == 1 && m == mp && !add[k] && !buffered ? out[k] + done : out_buf[k];
    }
    op.run(op.op, ip, in_mask, op_out, nullptr, mp);
    if (chunked)
      for (int k = 0; k < NO; ++k) {
        if (op_out[k] != out_buf[k])
          continue;
        unpack_row(out[k] + done * out_stride[k], out_buf[k], out_stride[k], m, add[k]);
      }
    done += m;
  }
}

// Runs op over the iteration space of p, collapsed (collapse_dims): `total` elements.
template <class L, class T, int NI, int NO>
void map_collapsed(cpu const &ex, map_params<T, NI, NO> const &p, index_t total,
                   batch_loop<T> const &op) {
  const int r = p.rank;
  const index_t inner = p.ext[r - 1];
  const index_t outer = total / inner;
  const index_t blocks_per_row = (inner + block_elements - 1) / block_elements;
  const index_t tasks = outer * blocks_per_row;

  auto do_task = [&](index_t t) {
    index_t row = t / blocks_per_row, b = t % blocks_per_row;
    T const *in_ptr[NI > 0 ? NI : 1] = {};
    T *out_ptr[NO] = {};
    index_t in_st[NI > 0 ? NI : 1] = {}, out_st[NO] = {};
    for (int k = 0; k < NI; ++k)
      in_ptr[k] = p.in[k].ptr, in_st[k] = p.in[k].stride[r - 1];
    for (int k = 0; k < NO; ++k)
      out_ptr[k] = p.out[k].ptr, out_st[k] = p.out[k].stride[r - 1];
    index_t rem = row;
    for (int d = r - 2; d >= 0; --d) {
      index_t i = rem % p.ext[d];
      rem /= p.ext[d];
      for (int k = 0; k < NI; ++k)
        in_ptr[k] += i * p.in[k].stride[d];
      for (int k = 0; k < NO; ++k)
        out_ptr[k] += i * p.out[k].stride[d];
    }
    index_t begin = b * block_elements, n = std::min(block_elements, inner - begin);
    for (int k = 0; k < NI; ++k)
      in_ptr[k] += begin * in_st[k];
    for (int k = 0; k < NO; ++k)
      out_ptr[k] += begin * out_st[k];
    run_row<L, T, NI, NO>(op, in_ptr, in_st, out_ptr, out_st, p.add, n);
  };

  const int threads = total < parallel_threshold ? 1 : ex.thread_count();
  if (threads <= 1 || tasks == 1) {
    for (index_t t = 0; t < tasks; ++t)
      do_task(t);
    return;
  }
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) num_threads(threads)
  for (index_t t = 0; t < tasks; ++t)
    do_task(t);
#endif
}

// Runs op over every element of the iteration space described by p. A rank-1 space (a flat call:
// a small-array node) is already collapsed and runs from p itself: the copy that collapsing
// needs is 1.9 KB for a 14-array call, about 4 % of the D-LSTM gradient.
template <class L, class T, int NI, int NO>
void map_loop(cpu const &ex, map_params<T, NI, NO> const &p, batch_loop<T> const &op) {
  if (p.rank == 1 && p.ext[0] != 1) {
    if (p.ext[0] > 0)
      map_collapsed<L>(ex, p, p.ext[0], op);
    return;
  }
  map_params<T, NI, NO> c = p;
  index_t const total = collapse_dims(c);
  if (total > 0)
    map_collapsed<L>(ex, c, total, op);
}

// ---- passes over arrays stored in 16 bits (some operand's st is bfloat16 or half) ------------
// The float batch loop runs on float rows: each row is cut into chunks of mixed_elements, whose
// 16-bit (and strided) inputs are widened into float buffers in L1, and whose results are rounded
// once into their 16-bit (or strided, or added-to) outputs; float operands that are contiguous are
// used in place. Compiled once per lane type and operand count, like the float passes.
inline constexpr index_t mixed_elements = 256;

template <class L, int NI, int NO>
void run_row_mixed(batch_loop<float> const &op, char const *const *in, index_t const *in_stride,
                   element_storage const *in_st, char *const *out, index_t const *out_stride,
                   element_storage const *out_st, bool const *add, index_t n) {
  constexpr int W = lane_count<L>;
  alignas(64) float in_buf[NI > 0 ? NI : 1][mixed_elements];
  alignas(64) float out_buf[NO][mixed_elements];
  alignas(64) float scratch[mixed_elements];
  float const *ip[NI > 0 ? NI : 1] = {};
  index_t in_mask[NI > 0 ? NI : 1] = {};
  float *op_out[NO] = {};
  for (int k = 0; k < NI; ++k) { // a broadcast input: one batch of its value, read again
    in_mask[k] = in_stride[k] == 0 ? 0 : ~index_t(0);
    if (in_stride[k] == 0) {
      load_row(in_st[k], in[k], 0, in_buf[k], 1, W);
      ip[k] = in_buf[k];
    }
  }
  index_t done = 0;
  // Contiguous (or broadcast) operands and outputs overwritten: every full batch in one call of
  // the batch loop, which widens and rounds the 16-bit operands in registers (no pass through
  // the buffers); the partial last batch, and every other row, in chunks through them below.
  bool const buffered = op.keeps_inputs && writes_over_inputs<NI, NO>(in, out, out_stride, add);
  bool in_place = n >= W && converts_16bit<L, float> && !buffered;
  for (int k = 0; k < NI; ++k)
    in_place = in_place && (in_stride[k] == 1 || in_stride[k] == 0);
  for (int k = 0; k < NO; ++k)
    in_place = in_place && out_stride[k] == 1 && !add[k];
  if (in_place) {
    element_storage st[(NI > 0 ? NI : 1) + NO] = {};
    for (int k = 0; k < NI; ++k) {
      bool const broadcast = in_stride[k] == 0; // (its float batch, filled above)
      st[k] = broadcast ? element_storage::native : in_st[k];
      if (!broadcast)
        ip[k] = reinterpret_cast<float const *>(in[k]);
    }
    for (int k = 0; k < NO; ++k)
      st[NI + k] = out_st[k], op_out[k] = reinterpret_cast<float *>(out[k]);
    done = n / W * W;
    op.run(op.op, ip, in_mask, op_out, st, done);
  }
  for (; done < n;) {
    index_t const m = std::min(mixed_elements, n - done), mp = (m + W - 1) / W * W;
    for (int k = 0; k < NI; ++k) {
      if (in_stride[k] == 0)
        continue;
      index_t const bytes = storage_bytes(in_st[k], int(sizeof(float)));
      char const *src = in[k] + done * in_stride[k] * bytes;
      if (in_st[k] == element_storage::native && in_stride[k] == 1 && m == mp) {
        ip[k] = reinterpret_cast<float const *>(src);
      } else {
        load_row(in_st[k], src, in_stride[k], in_buf[k], m, mp);
        ip[k] = in_buf[k];
      }
    }
    for (int k = 0; k < NO; ++k)
      op_out[k] = out_st[k] == element_storage::native && out_stride[k] == 1 && m == mp &&
                          !add[k] && !buffered
                      ? reinterpret_cast<float *>(out[k]) + done
                      : out_buf[k];
    op.run(op.op, ip, in_mask, op_out, nullptr, mp);
    for (int k = 0; k < NO; ++k)
      if (op_out[k] == out_buf[k])
        store_row(out_st[k], out[k] + done * out_stride[k] * storage_bytes(out_st[k], 4),
                  out_stride[k], out_buf[k], m, add[k], scratch);
    done += m;
  }
}

template <class L, int NI, int NO>
void map_mixed(cpu const &ex, map_params<float, NI, NO> const &p0, batch_loop<float> const &op) {
  map_params<float, NI, NO> p = p0;
  index_t const total = collapse_dims(p); // (strides count elements, whatever their size)
  if (total == 0)
    return;
  const int r = p.rank;
  const index_t inner = p.ext[r - 1];
  const index_t outer = total / inner;
  const index_t blocks_per_row = (inner + block_elements - 1) / block_elements;
  const index_t tasks = outer * blocks_per_row;
  element_storage in_st[NI > 0 ? NI : 1] = {}, out_st[NO] = {};
  index_t in_bytes[NI > 0 ? NI : 1] = {}, out_bytes[NO] = {};
  for (int k = 0; k < NI; ++k)
    in_st[k] = p.in[k].st, in_bytes[k] = storage_bytes(in_st[k], int(sizeof(float)));
  for (int k = 0; k < NO; ++k)
    out_st[k] = p.out[k].st, out_bytes[k] = storage_bytes(out_st[k], int(sizeof(float)));

  auto do_task = [&](index_t t) {
    index_t row = t / blocks_per_row, b = t % blocks_per_row;
    char const *in_ptr[NI > 0 ? NI : 1] = {};
    char *out_ptr[NO] = {};
    index_t in_st_inner[NI > 0 ? NI : 1] = {}, out_st_inner[NO] = {};
    for (int k = 0; k < NI; ++k)
      in_ptr[k] = reinterpret_cast<char const *>(p.in[k].ptr),
      in_st_inner[k] = p.in[k].stride[r - 1];
    for (int k = 0; k < NO; ++k)
      out_ptr[k] = reinterpret_cast<char *>(p.out[k].ptr), out_st_inner[k] = p.out[k].stride[r - 1];
    index_t rem = row;
    for (int d = r - 2; d >= 0; --d) {
      index_t i = rem % p.ext[d];
      rem /= p.ext[d];
      for (int k = 0; k < NI; ++k)
        in_ptr[k] += i * p.in[k].stride[d] * in_bytes[k];
      for (int k = 0; k < NO; ++k)
        out_ptr[k] += i * p.out[k].stride[d] * out_bytes[k];
    }
    index_t begin = b * block_elements, n = std::min(block_elements, inner - begin);
    for (int k = 0; k < NI; ++k)
      in_ptr[k] += begin * in_st_inner[k] * in_bytes[k];
    for (int k = 0; k < NO; ++k)
      out_ptr[k] += begin * out_st_inner[k] * out_bytes[k];
    run_row_mixed<L, NI, NO>(op, in_ptr, in_st_inner, in_st, out_ptr, out_st_inner, out_st, p.add,
                             n);
  };

  const int threads = total < parallel_threshold ? 1 : ex.thread_count();
  if (threads <= 1 || tasks == 1) {
    for (index_t t = 0; t < tasks; ++t)
      do_task(t);
    return;
  }
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) num_threads(threads)
  for (index_t t = 0; t < tasks; ++t)
    do_task(t);
#endif
}

// The same for the element operation op: only its batch loop is compiled for it.
template <bool Simd, class T, int NI, int NO, class Op>
void map(cpu const &ex, map_params<T, NI, NO> const &p, Op const &op) {
  static_assert(Op::num_in == NI && Op::num_out == NO);
  using L = typename lanes<T, Simd>::type;
  batch_loop<T> const loop{&run_batches<L, T, Op>, &op, repairs_batches<Op> && 1 < lane_count<L>};
  if constexpr (std::is_same_v<T, float>)
    if (has_float16(p))
      return map_mixed<L>(ex, p, loop);
  map_loop<L>(ex, p, loop);
}

// The passes above depend on the lane type and the operand counts, not on the element operation:
// the compiled component (core/compiled.hpp) holds the SIMD ones for up to 5 inputs and 5 outputs,
// the counts of most kernels' values, partials and VJP calls, so that a translation unit linking
// it compiles each kernel's batch loop (run_batches) only. Other counts compile where they are
// used.
#define DUALCAST_MAP_LOOP(T, NI, NO)                                                               \
  DUALCAST_INSTANTIATE void map_loop<lanes<T, true>::type, T, NI, NO>(                             \
      cpu const &, map_params<T, NI, NO> const &, batch_loop<T> const &);
#define DUALCAST_MAP_MIXED(T, NI, NO)                                                              \
  DUALCAST_INSTANTIATE void map_mixed<lanes<float, true>::type, NI, NO>(                           \
      cpu const &, map_params<float, NI, NO> const &, batch_loop<float> const &);
#define DUALCAST_X(T) DUALCAST_EACH_ROW_COUNT(DUALCAST_MAP_LOOP, T)
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X
#define DUALCAST_X(T) DUALCAST_EACH_ROW_COUNT(DUALCAST_MAP_MIXED, T)
DUALCAST_IF_FLOAT(DUALCAST_X)
#undef DUALCAST_X
#undef DUALCAST_MAP_MIXED
#undef DUALCAST_MAP_LOOP

} // namespace dualcast::detail::cpu_backend

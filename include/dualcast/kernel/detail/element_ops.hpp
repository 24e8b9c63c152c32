// dualcast/kernel/detail/element_ops.hpp: what a fused kernel does at ONE element (or one SIMD
// batch of elements), in each mode. Backends only move data: they load the array operands of an
// element into lanes of type L (float, double, or a SIMD batch), call one of these operations, and
// store its results. The operations are host/device code shared by every backend.
//
// Array operands are numbered ("slots"): first the kernel's array arguments in order, then the
// mode's extra inputs (tangents, cotangents, addends). Results are numbered the same way.
#pragma once

#include <dualcast/arrays/view.hpp>
#include <dualcast/core/config.hpp>
#include <dualcast/kernel/kernel.hpp>
#include <dualcast/math/functions.hpp>
#include <dualcast/numbers/detail/tuple.hpp>
#include <dualcast/numbers/dual.hpp>
#include <dualcast/numbers/simd.hpp>
#include <dualcast/numbers/sparse_dual.hpp>

#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace dualcast {

// The inputs to differentiate (argument positions), and how many partials one evaluation
// carries (the chunk size; more active inputs are handled in several evaluations).
template <int Chunk, int... I> struct active_set {
  static_assert(Chunk >= 1, "dualcast: the chunk size must be at least 1");
  static constexpr int count = sizeof...(I);
  static constexpr int chunk = Chunk;
  static constexpr int positions[count > 0 ? count : 1] = {I...};
};
inline constexpr int default_chunk = 8;
template <int... I> inline constexpr active_set<default_chunk, I...> active{};
// chunked<C>(active<...>): the same active inputs, C partials per evaluation.
template <int C, int D, int... I> constexpr active_set<C, I...> chunked(active_set<D, I...>) {
  return {};
}

namespace detail {

struct array_marker {}; // stands in a kernel's scalar table for an array argument

template <class A>
using scalar_slot_t = std::conditional_t<is_view_v<A>, array_marker, std::decay_t<A>>;

// Where each kernel argument comes from: an array slot or a stored scalar.
template <class... A> struct arg_layout {
  static constexpr int arity = sizeof...(A);
  static constexpr bool is_array[arity + 1] = {is_view_v<A>..., false};
  static constexpr int num_arrays = (0 + ... + (is_view_v<A> ? 1 : 0));
  static constexpr int slot(int p) {
    int s = 0;
    for (int i = 0; i < p; ++i)
      s += is_array[i] ? 1 : 0;
    return s;
  }
  using scalars = tuple<scalar_slot_t<A>...>;
  // The argument positions of the arrays, in order.
  static constexpr auto array_positions = [] {
    std::array<int, (num_arrays > 0 ? num_arrays : 1)> p{};
    for (int i = 0, n = 0; i < arity; ++i)
      if (is_array[i])
        p[std::size_t(n++)] = i;
    return p;
  }();
};

template <class Active> constexpr int active_index(int p) {
  for (int a = 0; a < Active::count; ++a)
    if (Active::positions[a] == p)
      return a;
  return -1;
}

// The value part of a kernel result, as a lane.
template <class L, class X> DUALCAST_HD L value_lane(X const &x) {
  if constexpr (is_sparse_dual_v<X>)
    return x.x.val;
  else if constexpr (is_dual_v<X>)
    return value_lane<L>(x.val);
  else
    return L(x);
}
// Partial q of a kernel result (zero when the result does not depend on any active input).
template <class L, class X> DUALCAST_HD L partial_lane(X const &x, int q) {
  if constexpr (is_dual_v<X>)
    return x.d[q];
  else
    return L(0);
}
// Whether partial Q of a kernel result is computed: everywhere but a sparse dual's absent
// inputs, which are structurally zero (a plain result's zero partial still counts, as it always
// has, so that the dense path's results do not change).
template <class X, int Q> constexpr bool has_partial_f() {
  if constexpr (is_sparse_dual_v<X>)
    return X::set::position(Q) >= 0;
  else
    return true;
}
template <class X, int Q> inline constexpr bool has_partial = has_partial_f<X, Q>();
// Partial Q, known at compile time (sparse duals: zero where absent).
template <class L, int Q, class X> DUALCAST_HD L partial_at(X const &x) {
  if constexpr (is_sparse_dual_v<X>) {
    constexpr int p = X::set::position(Q);
    if constexpr (p >= 0)
      return x.x.d[p];
    else
      return L(0);
  } else {
    return partial_lane<L>(x, Q);
  }
}

// Whether every partial of every output of a kernel result is finite (see rerun_lanes).
template <class X> DUALCAST_HD bool partials_finite_of(X const &x) {
  if constexpr (is_sparse_dual_v<X>)
    return partials_finite(x.x);
  else if constexpr (is_dual_v<X>)
    return partials_finite(x);
  else
    return true;
}
template <class R, std::size_t... k>
DUALCAST_HD bool results_finite(R const &r, std::index_sequence<k...>) {
  return (partials_finite_of(get<k>(r)) && ...);
}

// The lanes (bit i: lane i) of a SIMD batch that are inf or NaN.
template <class L> std::uint32_t nonfinite_lanes(L const &v) {
  auto const finite = (v - v) == L(0); // NOLINT(misc-redundant-expression): see all_finite
  return ~finite.bits() & decltype(finite)::all_bits;
}
template <class X> std::uint32_t nonfinite_partial_lanes(X const &) { return 0; } // (a value)
template <class T, int N> std::uint32_t nonfinite_partial_lanes(dual<T, N> const &x) {
  if constexpr (is_dual_v<T>) { // nested: as partials_finite
    return 0;
  } else {
    T s = x.d[0]; // (one sum, as partials_finite)
    for (int i = 1; i < N; ++i)
      s += x.d[i];
    return nonfinite_lanes(s);
  }
}
template <class V, class S> std::uint32_t nonfinite_partial_lanes(sparse_dual<V, S> const &x) {
  return nonfinite_partial_lanes(x.x);
}
template <class R, std::size_t... k>
std::uint32_t results_nonfinite_lanes(R const &r, std::index_sequence<k...>) {
  return (0u | ... | nonfinite_partial_lanes(get<k>(r)));
}
// The lanes of the path being evaluated (detail::lane_paths): a divergent batch is evaluated once
// per path with every lane computing (backend/cpu/map.hpp, eval_batch), and the lanes of the
// other paths -- log of a negative x under `if (x > 0)` -- are blended away afterwards: their
// partials must not send the batch down the slow path (a guarded log ran 8x slower divergent than
// uniform when they did).
template <class L> std::uint32_t running_path_lanes() {
  using M = decltype(L{} < L{});
  lane_paths const &p = current_lane_paths();
  return p.active ? p.lanes : M::all_bits;
}

// The slow path of a SIMD batch whose partials came out inf or NaN in some lanes of the running
// path: the operation runs again on those lanes as plain numbers, whose chain rule applies the
// zero-wins rule at every step (numbers/dual.hpp, checks_each_step), and they are written back. A
// lane only takes it where a derivative is infinite or undefined (log or sqrt at 0, overflow, NaN
// data), so the hot path pays one test per result instead of one per chain-rule step; the other
// lanes keep their results, which the zero-wins rule could not have changed (a partial it
// changes is non-finite without it), so a lane's results do not depend on its neighbours' data.
// `run(in, out)` runs the operation on plain-number lanes: NIn inputs, NOut results (all copied,
// so that results the operation does not write keep their values); `lanes`: bit j, lane j.
template <int NIn, int NOut, class L, class Run>
DUALCAST_SEPARATE void rerun_some_lanes(L const *in, L *out, Run const &run, std::uint32_t lanes) {
  using S = typename L::value_type;
  for (int j = 0; j < L::size; ++j) {
    if (!((lanes >> j) & 1u))
      continue;
    std::array<S, std::size_t(NIn)> lin{};
    std::array<S, std::size_t(NOut)> lout{};
    for (int p = 0; p < NIn; ++p)
      lin[std::size_t(p)] = in[p][j];
    for (int q = 0; q < NOut; ++q)
      lout[std::size_t(q)] = out[q][j];
    run(lin.data(), lout.data());
    for (int q = 0; q < NOut; ++q)
      out[q].set(j, lout[std::size_t(q)]);
  }
}
// (No lanes -- a divergent path whose other lanes alone were non-finite: no call.)
template <int NIn, int NOut, class L, class Run>
DUALCAST_FORCEINLINE void rerun_lanes(L const *in, L *out, Run const &run, std::uint32_t lanes) {
  if (lanes != 0)
    rerun_some_lanes<NIn, NOut>(in, out, run, lanes);
}

// Evaluates f with each argument built by `make(p)`. Flattened itself: the backend's flattened
// loop (run_batches) left the kernel's body as a call -- its dual arguments and results through
// memory, twice the time of the HM-LSTM update (bench/divergence) -- whenever one translation
// unit evaluated the same kernel in two modes (values and partials, and VJP), since GCC's
// flattening at that stage skips callees it has not put in SSA form yet. Here f is always
// inlined early, where its call is made.
template <class F, class Make, std::size_t... P>
DUALCAST_HD DUALCAST_FLATTEN auto call_with(F const &f, Make const &make,
                                            std::index_sequence<P...>) {
  return as_outputs(f(make(std::integral_constant<int, static_cast<int>(P)>{})...));
}

template <class F, class Layout> struct op_base {
  F f;
  typename Layout::scalars scalars;

  // Argument p as a plain lane or stored scalar.
  template <int P, class L> DUALCAST_HD decltype(auto) plain_arg(L const *in) const {
    if constexpr (Layout::is_array[P])
      return in[Layout::slot(P)];
    else
      return get<P>(scalars);
  }
};

// ---- values only ---------------------------------------------------------------------------
template <class F, class Layout, int K> struct values_op : op_base<F, Layout> {
  static constexpr int num_in = Layout::num_arrays;
  static constexpr int num_out = K;
  template <class L> DUALCAST_HD void operator()(L const *in, L *out) const {
    auto make = [&](auto p) -> decltype(auto) {
      return this->template plain_arg<decltype(p)::value>(in);
    };
    auto r = call_with(this->f, make, std::make_index_sequence<Layout::arity>{});
    store(r, out, std::make_index_sequence<K>{});
  }
  template <class R, class L, std::size_t... k>
  DUALCAST_HD static void store(R const &r, L *out, std::index_sequence<k...>) {
    ((out[k] = value_lane<L>(get<k>(r))), ...);
  }
};

// Argument P for chunk [Begin, Begin + Width) of the active inputs: a seeded dual if active in
// this chunk, else the plain lane (an active input outside the chunk is a constant here). A
// kernel with sparse partials (kernel/kernel.hpp) gets sparse duals seeded with their own input.
template <class F> inline constexpr bool sparse_kernel = has_sparse_partials<F>;

// How many active inputs one evaluation of the partials / VJP modes differentiates: the active
// set's chunk, except that on the host a kernel with sparse partials takes up to
// max_sparse_chunk of them in ONE evaluation. Its duals carry only the partials each value
// depends on, so a wider evaluation costs registers only where dependencies meet, while every
// further chunk evaluates the values (and their transcendentals) again: the D-LSTM cell's VJP
// (11 active inputs) in one evaluation instead of two took 15-20 % less of a GradBench lstm
// backward (AMD Zen 4, doubles). On a GPU the set's chunk stays (registers per thread).
inline constexpr int max_sparse_chunk = 16;
template <class F, class Active> constexpr int evaluation_chunk() {
#ifdef __CUDA_ARCH__
  return Active::chunk;
#else
  if constexpr (sparse_kernel<F>)
    return Active::count > Active::chunk && Active::count <= max_sparse_chunk ? Active::count
                                                                              : Active::chunk;
  else
    return Active::chunk;
#endif
}
template <class Active, int Begin, int Width, int P, class Base, class L>
DUALCAST_HD auto chunk_arg(Base const &op, L const *in) {
  constexpr int a = active_index<Active>(P);
  if constexpr (a >= Begin && a < Begin + Width && sparse_kernel<decltype(op.f)>) {
    return seed<a - Begin>(L(op.template plain_arg<P>(in)));
  } else if constexpr (a >= Begin && a < Begin + Width) {
    dual<L, Width> x(op.template plain_arg<P>(in));
    x.d[a - Begin] = L(1);
    return x;
  } else {
    return op.template plain_arg<P>(in);
  }
}

// ---- values and the diagonal partials d out_k / d in_a --------------------------------------
// Results: K values, then K * A partials, output-major (k * A + a).
template <class F, class Layout, int K, class Active> struct partials_op : op_base<F, Layout> {
  static constexpr int A = Active::count;
  static constexpr int C = evaluation_chunk<F, Active>();
  static constexpr int num_in = Layout::num_arrays;
  static constexpr int num_out = K + K * A;

  template <class L> DUALCAST_HD void operator()(L const *in, L *out) const {
    if constexpr (A <= C)
      chunk<0>(in, out);
    else
      chunks_apart<0>(in, out);
  }
  template <int Begin, class L>
  DUALCAST_HD DUALCAST_FORCEINLINE void chunk(L const *in, L *out) const {
    constexpr int width = (A - Begin) < C ? (A - Begin) : C;
    auto make = [&](auto p) {
      return chunk_arg<Active, Begin, width, decltype(p)::value>(*this, in);
    };
    auto r = call_with(this->f, make, std::make_index_sequence<Layout::arity>{});
    store<Begin, width>(r, out, std::make_index_sequence<K>{});
    if constexpr (!std::is_arithmetic_v<L>) {
      if (!results_finite(r, std::make_index_sequence<K>{})) [[unlikely]]
        rerun_lanes<num_in, num_out>(
            in, out, [this](auto const *li, auto *lo) { this->template chunk<Begin>(li, lo); },
            results_nonfinite_lanes(r, std::make_index_sequence<K>{}) & running_path_lanes<L>());
    }
  }
  // Several chunks: each a function of its own on the host (core/config.hpp, DUALCAST_SEPARATE).
  template <int Begin, class L>
  DUALCAST_SEPARATE DUALCAST_HD void chunk_apart(L const *in, L *out) const {
    chunk<Begin>(in, out);
  }
  template <int Begin, class L> DUALCAST_HD void chunks_apart(L const *in, L *out) const {
    chunk_apart<Begin>(in, out);
    if constexpr (Begin + C < A)
      chunks_apart<Begin + C>(in, out);
  }
  template <int Begin, int Width, class R, class L, std::size_t... k>
  DUALCAST_HD static void store(R const &r, L *out, std::index_sequence<k...>) {
    if constexpr (Begin == 0)
      ((out[k] = value_lane<L>(get<k>(r))), ...);
    for_positions<Width>([&](auto q) {
      ((out[K + int(k) * A + Begin + q] = partial_at<L, decltype(q)::value>(get<k>(r))), ...);
    });
  }
};

// ---- JVP: tangents of the active inputs in, values and output tangents out --------------------
// Inputs: the arrays, then A tangents. Results: K values, then K tangents.
template <class F, class Layout, int K, class Active> struct jvp_op : op_base<F, Layout> {
  static constexpr int A = Active::count;
  static constexpr int num_in = Layout::num_arrays + A;
  static constexpr int num_out = 2 * K;

  template <class L> DUALCAST_HD void operator()(L const *in, L *out) const {
    L const *tangents = in + Layout::num_arrays;
    auto make = [&](auto p) { return this->arg<decltype(p)::value>(in, tangents); };
    auto r = call_with(this->f, make, std::make_index_sequence<Layout::arity>{});
    store(r, out, std::make_index_sequence<K>{});
    if constexpr (!std::is_arithmetic_v<L>) {
      if (!results_finite(r, std::make_index_sequence<K>{})) [[unlikely]] // see rerun_lanes
        rerun_lanes<num_in, num_out>(
            in, out, [this](auto const *li, auto *lo) { (*this)(li, lo); },
            results_nonfinite_lanes(r, std::make_index_sequence<K>{}) & running_path_lanes<L>());
    }
  }
  template <int P, class L> DUALCAST_HD auto arg(L const *in, L const *tangents) const {
    constexpr int a = active_index<Active>(P);
    if constexpr (a >= 0) {
      dual<L, 1> x(this->template plain_arg<P>(in));
      x.d[0] = tangents[a];
      return x;
    } else {
      return this->template plain_arg<P>(in);
    }
  }
  template <class R, class L, std::size_t... k>
  DUALCAST_HD static void store(R const &r, L *out, std::index_sequence<k...>) {
    ((out[k] = value_lane<L>(get<k>(r))), ...);
    ((out[K + k] = partial_lane<L>(get<k>(r), 0)), ...);
  }
};

// ---- VJP: output cotangents in, input cotangents out (duals re-evaluated, nothing stored) -----
// Inputs: the arrays, then K output cotangents. Results: A input cotangents
// sum_k ybar_k * d out_k / d in_a (the backend adds them to the cotangents' old values when the
// call accumulates), then with Values the K values of the outputs (value_and_vjp), from the same
// evaluation.
template <class F, class Layout, int K, class Active, bool Values = false>
struct vjp_op : op_base<F, Layout> {
  static constexpr int A = Active::count;
  static constexpr int C = evaluation_chunk<F, Active>();
  static constexpr int num_in = Layout::num_arrays + K;
  static constexpr int num_out = A + (Values ? K : 0);
  static constexpr bool with_values = Values; // (value_and_vjp; read by backend/cuda/map.cuh)
  // some arrays not differentiated (read by backend/cuda/map.cuh)
  static constexpr bool of_subset = A < Layout::num_arrays;

  template <class L> DUALCAST_HD void operator()(L const *in, L *out) const {
    if constexpr (A <= C)
      chunk<0>(in, out);
    else
      chunks_apart<0>(in, out);
  }
  template <int Begin, class L>
  DUALCAST_HD DUALCAST_FORCEINLINE void chunk(L const *in, L *out) const {
    constexpr int width = (A - Begin) < C ? (A - Begin) : C;
    auto make = [&](auto p) {
      return chunk_arg<Active, Begin, width, decltype(p)::value>(*this, in);
    };
    auto r = call_with(this->f, make, std::make_index_sequence<Layout::arity>{});
    L const *ybar = in + Layout::num_arrays;
#ifdef __CUDA_ARCH__
    // On a GPU the guarded sum directly: a second pass would keep every partial live across the
    // check, and wide kernels would spill registers. The values first (no lane is rerun here), so
    // that they need no registers while the cotangents are summed.
    if constexpr (Values && Begin == 0)
      store_values(r, out + A, std::make_index_sequence<K>{});
    for_positions<width>(
        [&](auto q) { out[Begin + q] = contract<true, decltype(q)::value, 0, false>(r, ybar); });
#else
    for_positions<width>(
        [&](auto q) { out[Begin + q] = contract<false, decltype(q)::value, 0, false>(r, ybar); });
    // A plain number: one test of the cotangents' sum (an inf or NaN in any makes it non-finite; a
    // false alarm from an overflowing sum only costs the guarded path). A SIMD batch is tested by
    // the backend after the row instead (repair, below).
    if constexpr (std::is_arithmetic_v<L>) {
      L sum = out[Begin];
      for (int q = 1; q < width; ++q)
        sum = sum + out[Begin + q];
      if (!all_finite(sum)) [[unlikely]] { // a zero factor wins: see contract
        bool finite = true;                // (each, or only their sum overflowed)
        for (int q = 0; q < width; ++q)
          finite = finite && all_finite(out[Begin + q]);
        if (!finite)
          for_positions<width>([&](auto q) {
            out[Begin + q] = contract<true, decltype(q)::value, 0, false>(r, ybar);
          });
      }
    }
    if constexpr (Values && Begin == 0)
      store_values(r, out + A, std::make_index_sequence<K>{});
#endif
  }
  // The zero-wins rule's slow path on a SIMD batch (the host's), which the backend runs after a
  // row's batches (backend/cpu/map.hpp, repair_batches) on a batch whose cotangents came out inf
  // or NaN in some lanes: those lanes again, as plain numbers, whose contraction is guarded (see
  // rerun_lanes). in: the batch's inputs; out: its results, repaired in place, the values kept
  // from the batch's evaluation. A test in the batch loop instead, even one test of the
  // cotangents' sum per batch, cost the LSTM cell's VJP pass 4-8 % (AMD Zen 4): what the slow
  // path needs kept there, not the test's own instructions.
  static constexpr int repaired_outputs = A;
  template <class L> void repair(L const *in, L *out) const {
    L values[Values ? K : 1];
    if constexpr (Values)
      for (int k = 0; k < K; ++k)
        values[k] = out[A + k];
    repair_chunk<0>(in, out);
    if constexpr (Values)
      for (int k = 0; k < K; ++k)
        out[A + k] = values[k];
  }
  template <int Begin, class L> void repair_chunk(L const *in, L *out) const {
    constexpr int width = (A - Begin) < C ? (A - Begin) : C;
    std::uint32_t lanes = 0;
    for (int q = 0; q < width; ++q)
      lanes |= nonfinite_lanes(out[Begin + q]);
    rerun_lanes<num_in, num_out>(
        in, out, [this](auto const *li, auto *lo) { this->template chunk<Begin>(li, lo); }, lanes);
    if constexpr (Begin + C < A)
      repair_chunk<Begin + C>(in, out);
  }
  template <class R, class L, std::size_t... k>
  DUALCAST_HD static void store_values(R const &r, L *out, std::index_sequence<k...>) {
    ((out[k] = value_lane<L>(get<k>(r))), ...);
  }
  // Several chunks: each a function of its own on the host (core/config.hpp, DUALCAST_SEPARATE).
  template <int Begin, class L>
  DUALCAST_SEPARATE DUALCAST_HD void chunk_apart(L const *in, L *out) const {
    chunk<Begin>(in, out);
  }
  template <int Begin, class L> DUALCAST_HD void chunks_apart(L const *in, L *out) const {
    chunk_apart<Begin>(in, out);
    if constexpr (Begin + C < A)
      chunks_apart<Begin + C>(in, out);
  }
  // sum over outputs in a fixed order: ybar_0 * p_0 + ybar_1 * p_1 + ... Guarded: a term with a
  // zero factor is zero even when the other is infinite or NaN -- an output nobody uses (ybar 0)
  // at a point where its partial is NaN, or a zero partial (relu below 0) under an infinite
  // cotangent (sqrt at 0) -- as the same program gives unfused, node by node, and as PyTorch
  // gives. Computed only where the plain sum is not finite. The terms of outputs that do not
  // depend on input Q (sparse duals) are left out; 0 when none does.
  template <bool Guarded, int Q, int k, bool Started, class R, class L>
  DUALCAST_HD static L contract(R const &r, L const *ybar, L const &acc = L(0)) {
    if constexpr (k == K) {
      return acc;
    } else if constexpr (!has_partial<std::decay_t<decltype(get<k>(r))>, Q>) {
      return contract<Guarded, Q, k + 1, Started>(r, ybar, acc);
    } else {
      L t = times<Guarded>(ybar[k], partial_at<L, Q>(get<k>(r)));
      if constexpr (Started)
        return contract<Guarded, Q, k + 1, true>(r, ybar, acc + t);
      else
        return contract<Guarded, Q, k + 1, true>(r, ybar, t);
    }
  }
  template <bool Guarded, class L> DUALCAST_HD static L times(L const &y, L const &p) {
    if constexpr (Guarded)
      return pick((y == L(0)) || (p == L(0)), L(0), y * p);
    else
      return y * p;
  }
};

} // namespace detail
} // namespace dualcast

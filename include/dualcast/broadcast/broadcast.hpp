// dualcast/broadcast/broadcast.hpp: running a kernel over arrays as ONE fused broadcast pass.
//
//   dualcast::apply(ex, k, dualcast::out(y0, y1), x0, x1, 2.0f);                 // values
//   dualcast::apply(ex, k, dualcast::active<0, 1>, dualcast::out(y0, y1),         // values and
//                   dualcast::out(d00, d01, d10, d11), x0, x1, 2.0f);             // d y_k / d x_a
//   dualcast::jvp(ex, k, dualcast::active<0, 1>, dualcast::out(y0, y1), dualcast::out(t0, t1),
//                 dualcast::in(x0, x1, 2.0f), dualcast::in(tx0, tx1));
//   dualcast::vjp(ex, k, dualcast::active<0, 1>, dualcast::out(xbar0, xbar1),
//                 dualcast::in(x0, x1, 2.0f), dualcast::in(ybar0, ybar1));
//   dualcast::value_and_vjp(ex, k, dualcast::active<0, 1>, dualcast::out(y0, y1),   // both,
//                           dualcast::out(xbar0, xbar1), dualcast::in(x0, x1, 2.0f),  // one pass
//                           dualcast::in(ybar0, ybar1));
//
// Arguments are views (dualcast::view) or plain scalars. Inputs broadcast against each other and
// to the outputs' shape by numpy's rules. Only active inputs (argument positions; default: every
// array) become duals, so a mask or constant takes exactly the branch its value says. Every
// check (shapes, aliasing) happens before anything is written (broadcast/detail/call_checks.hpp);
// then one call of the backend's map hook (backend/seam.hpp) runs the element operation of the mode
// (kernel/detail/element_ops.hpp) over the whole iteration space.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/arrays/stored_view.hpp>
#include <dualcast/arrays/view.hpp>
#include <dualcast/arrays/view_overlap.hpp>
#include <dualcast/backend/seam.hpp>
#include <dualcast/broadcast/detail/call_checks.hpp>
#include <dualcast/broadcast/detail/launch_plan.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/kernel/detail/element_ops.hpp>
#include <dualcast/kernel/detail/kernel_checks.hpp>
#include <dualcast/kernel/kernel.hpp>

#include <array>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace dualcast {

// Groups of arrays (and scalars): the outputs of a call, or a mode's extra inputs. Outputs given
// with add_to are added to (y = y + result) instead of overwritten (add: per output).
template <class... V> struct pack {
  std::tuple<V...> items;
  std::array<bool, sizeof...(V)> add{};
};
template <class... V> pack<std::decay_t<V>...> out(V &&...v) { return {{static_cast<V &&>(v)...}}; }
template <class... V> pack<std::decay_t<V>...> add_to(V &&...v) {
  pack<std::decay_t<V>...> p{{static_cast<V &&>(v)...}};
  p.add.fill(true);
  return p;
}
template <class... V> pack<std::decay_t<V>...> in(V &&...v) { return {{static_cast<V &&>(v)...}}; }

namespace detail {

// (T: the call's element type, or any_float where some array is stored in 16 bits)
template <class T, class V> constexpr bool is_output_view() {
  if constexpr (is_view_v<V>)
    return !std::is_const_v<typename V::element_type> && std::is_constructible_v<view<T>, V>;
  else
    return false;
}
template <class T, class... V> std::array<view<T>, sizeof...(V)> views_of(pack<V...> const &p) {
  static_assert((is_output_view<T, V>() && ...),
                "dualcast: output arrays must be mutable views of the call's element type (or of "
                "bfloat16 / half in a float call)");
  return std::apply(
      [](auto const &...v) { return std::array<view<T>, sizeof...(V)>{view<T>(v)...}; }, p.items);
}
template <class T, class... V>
std::array<view<T const>, sizeof...(V)> const_views_of(pack<V...> const &p) {
  static_assert((is_view_v<V> && ...), "dualcast: these arguments must be arrays (views)");
  return std::apply(
      [](auto const &...v) { return std::array<view<T const>, sizeof...(V)>{view<T const>(v)...}; },
      p.items);
}

// The plan of a call: the iteration shape, then the array arguments (in order) as inputs.
template <class T, int NI, int NO, std::size_t N>
launch_plan<T, NI, NO> plan_with_args(shape const &s, array_args<T, N> const &a) {
  launch_plan<T, NI, NO> plan(s);
  plan.add_ins(a.views.data(), N);
  return plan;
}

// The roles of a call's outputs in messages: the first n_first are named `first`, the rest
// `second`, each numbered from 0.
template <std::size_t N> struct output_roles {
  char const *role[N > 0 ? N : 1];
  int idx[N > 0 ? N : 1];
  output_roles(char const *first, std::size_t n_first, char const *second) {
    for (std::size_t i = 0; i < N; ++i) {
      role[i] = i < n_first ? first : second;
      idx[i] = int(i < n_first ? i : i - n_first);
    }
  }
};

// The calls with their arguments collected into arrays (the public calls below collect them; the
// tape's fused nodes collect them once when recording). Layout: the kernel's argument layout,
// `scalars` its scalar arguments.

// Values (and partials, when the operation writes them) into outs (add: per output).
template <class Op, bool S, class Ex, class T, std::size_t N, std::size_t NO>
void apply_arrays(Ex const &ex, Op const &op, array_args<T, N> const &ins,
                  std::array<view<T>, NO> const &outs, std::array<bool, NO> const &add,
                  std::size_t n_first, char const *second) {
  output_roles<NO> roles("output", n_first, second);
  shape s = outs[0].dims();
  check_call("dualcast::apply", ins.views.data(), ins.pos.data(), N, outs.data(), roles.role,
             roles.idx, NO, s);
  auto plan = plan_with_args<T, Op::num_in, int(NO)>(s, ins);
  plan.add_outs(outs.data(), add.data(), NO);
  backend_map<S>(hook{}, ex, plan.p, op);
}

// dst [+]= src summed over the dimensions along which dst broadcasts (backend_reduce); a dst stored
// in 16 bits gets the sums in float, then rounded once (added to in float where add says).
template <class Ex, class C>
void reduce_into(Ex const &ex, shape const &s, C const *src, view<C> const &dst, bool add) {
  backend_reduce(hook{}, ex, s, src, dst, add);
}
struct copy_op { // one input, one output: out = in (the backend converts, rounds and adds)
  static constexpr int num_in = 1, num_out = 1;
  template <class L> DUALCAST_HD void operator()(L const *in, L *out) const { out[0] = in[0]; }
};
template <class Ex>
void reduce_into(Ex const &ex, shape const &s, float const *src, view<any_float> const &dst,
                 bool add) {
  if (dst.kind() == element_storage::native)
    return backend_reduce(hook{}, ex, s, src,
                          view<float>(static_cast<float *>(dst.data()), dst.dims(), dst.strides()),
                          add);
  auto sum = backend_buffer<float>(hook{}, ex, dst.size());
  view<float> sums(sum.get(), dst.dims());
  backend_reduce(hook{}, ex, s, src, sums, false);
  launch_plan<any_float, 1, 1> plan(dst.dims());
  view<any_float const> in(sums);
  plan.add_ins(&in, 1);
  plan.add_outs(&dst, &add, 1);
  backend_map<true>(hook{}, ex, plan.p, copy_op{});
}

// VJP: the cotangents xv of the active inputs (add: per cotangent) from the output cotangents yv.
// Cotangents of inputs that are not broadcast are written in the fused pass; those of broadcast
// inputs go to scratch arrays (one block) and are summed over the broadcast dimensions after.
// With Values the same pass writes the K outputs' values to `values` (value_and_vjp; added to
// where values_add says).
template <bool S, class F, class Layout, int K, class Active, bool Values = false, class Ex,
          class T, std::size_t N, class Scalars>
void vjp_arrays(Ex const &ex, kernel<F, S> const &k, array_args<T, N> const &ins,
                Scalars const &scalars, std::array<view<T>, Active::count> const &xv,
                bool const *add_in, std::array<view<T const>, K> const &yv,
                view<T> const *values = nullptr, bool const *values_add = nullptr) {
  constexpr int NA = Active::count;
  char const *name = Values ? "dualcast::value_and_vjp" : "dualcast::vjp";
  bool direct[NA > 0 ? NA : 1], add[NA > 0 ? NA : 1];
  shape s = check_vjp(name, ins, Active::positions, xv.data(), NA, yv.data(), K, direct);
  if constexpr (Values) { // the values: as apply's outputs, and against the cotangents
    output_roles<std::size_t(K)> roles("output", std::size_t(K), "");
    for (int i = 0; i < K; ++i)
      check_output(name, "output", i, values[i], s);
    check_aliasing(name, values, roles.role, roles.idx, std::size_t(K), ins.views.data(),
                   ins.pos.data(), N, s);
    check_vjp_values(name, values, std::size_t(K), xv.data(), std::size_t(NA), yv.data(), s);
  }
  std::size_t n_scratch = 0;
  for (int a = 0; a < NA; ++a)
    n_scratch += direct[a] ? 0 : 1;
  using C = compute_t<T>; // (the scratch cotangents are summed in the compute type)
  decltype(backend_buffer<C>(hook{}, ex, index_t(0))) scratch;
  if (n_scratch > 0)
    scratch = backend_buffer<C>(hook{}, ex, index_t(n_scratch) * s.size());
  std::array<view<T>, NA> outs;
  for (int a = 0, j = 0; a < NA; ++a) {
    outs[std::size_t(a)] =
        direct[a] ? xv[std::size_t(a)] : view<T>(view<C>(scratch.get() + j++ * s.size(), s));
    add[a] = add_in[a] && direct[a]; // (broadcast ones are added by the reduction afterwards)
  }
  auto plan = plan_with_args<T, Layout::num_arrays + K, NA + (Values ? K : 0)>(s, ins);
  plan.add_ins(yv.data(), K);
  plan.add_outs(outs.data(), add, NA);
  if constexpr (Values)
    plan.add_outs(values, values_add, K);
  vjp_op<F, Layout, K, Active, Values> op{{k.f, scalars}};
  backend_map<S>(hook{}, ex, plan.p, op);
  for (int a = 0, j = 0; a < NA; ++a)
    if (!direct[a])
      reduce_into(ex, s, static_cast<C const *>(scratch.get() + j++ * s.size()), xv[std::size_t(a)],
                  add_in[a]);
}

// The same two calls on flat arrays (broadcast/detail/call_checks.hpp): `in` and the outputs are
// pointers to len contiguous elements laid out in the call's shape (ystride: 1, or 0 for an output
// cotangent that is one broadcast element), run as one pass of rank 1. The tape's fused nodes take
// this path when they can: a 12-input node over 14 elements spent more time building, checking and
// aligning its views than computing.
template <class T, int NI, int NO> map_params<T, NI, NO> flat_params(index_t len) {
  map_params<T, NI, NO> p; // (only rank 1 is read)
  p.rank = 1;
  p.ext[0] = len;
  return p;
}
// checked: the caller has ruled out the aliasing these checks look for (the tape's fused node:
// outputs it has just allocated, gradients it has placed and checked itself).
template <class Op, bool S, class Ex, class T, std::size_t N, std::size_t NO>
void apply_flat(Ex const &ex, Op const &op, std::array<T const *, N> const &in, int const *pos,
                std::array<T *, NO> const &outs, index_t len, bool checked = false) {
  if (!checked)
    check_flat_call("dualcast::apply", in.data(), pos, N, outs.data(), NO, len);
  auto p = flat_params<T, Op::num_in, int(NO)>(len);
  for (std::size_t i = 0; i < N; ++i)
    p.in[i].ptr = in[i], p.in[i].stride[0] = 1;
  for (std::size_t o = 0; o < NO; ++o)
    p.out[o].ptr = outs[o], p.out[o].stride[0] = 1, p.add[o] = false;
  backend_map<S>(hook{}, ex, p, op);
}
template <bool S, class F, class Layout, int K, class Active, class Ex, class T, std::size_t N,
          class Scalars>
void vjp_flat(Ex const &ex, kernel<F, S> const &k, std::array<T const *, N> const &in,
              Scalars const &scalars, std::array<T *, Active::count> const &xv, bool const *add,
              std::array<T const *, K> const &yv, index_t const *ystride, index_t len,
              bool checked = false) {
  constexpr int NA = Active::count;
  if (!checked)
    check_flat_vjp("dualcast::vjp", in.data(), Layout::array_positions.data(), N, xv.data(),
                   std::size_t(NA), yv.data(), ystride, std::size_t(K), len);
  auto p = flat_params<T, Layout::num_arrays + K, NA>(len);
  for (std::size_t i = 0; i < N; ++i)
    p.in[i].ptr = in[i], p.in[i].stride[0] = 1;
  for (std::size_t j = 0; j < std::size_t(K); ++j)
    p.in[N + j].ptr = yv[j], p.in[N + j].stride[0] = ystride[j];
  for (std::size_t a = 0; a < std::size_t(NA); ++a)
    p.out[a].ptr = xv[a], p.out[a].stride[0] = 1, p.add[a] = add[a];
  vjp_op<F, Layout, K, Active> op{{k.f, scalars}};
  backend_map<S>(hook{}, ex, p, op);
}

// The tape's own calls on arrays it has just allocated for them (the fused node on duals,
// ops/fused/dual_node.hpp): its outputs are fresh and distinct, so the aliasing check (a tenth of
// that node's time, docs/higher-order.md) is skipped, and so are the shape checks (it computed
// the call's shape, the outputs' shape, from the arguments). When every array walks that shape as
// one run of equally spaced elements (contiguous, or a part of a contiguous array of duals: every
// (K + 1)-th number) the pass runs on pointers and those strides without a launch plan (the
// views' copies into a plan cost a node of the D-LSTM more than its arithmetic); the user's calls
// above keep every check.
// The spacing of v's elements when it walks shape s as one run of equally spaced elements (1:
// contiguous), else 0 (another shape, broadcast, gaps between rows).
template <class V> index_t flat_stride(V const &v, shape const &s) {
  if constexpr (is_view_v<V>) {
    if (v.rank() == 1 && s.rank == 1) // (the usual case: one test)
      return v.extent(0) == s.ext[0] && v.stride(0) > 0 ? v.stride(0) : 0;
    if (!(v.dims() == s))
      return 0;
    index_t c = 0, run = 1; // c: the spacing; run: elements inside dimension i
    for (int i = v.rank() - 1; i >= 0; --i) {
      if (v.extent(i) == 1)
        continue;
      if (c == 0)
        c = v.stride(i);
      if (c <= 0 || v.stride(i) != c * run)
        return 0;
      run *= v.extent(i);
    }
    return c == 0 ? 1 : c;
  } else {
    return 1;
  }
}
// add[o]: add to output o instead of overwriting it.
template <class Op, bool S, class Ex, class T, class Outs, class... A>
void apply_fresh_run(Ex const &ex, Op const &op, Outs const &outs,
                     std::array<bool, std::tuple_size_v<Outs>> const &add, A const &...args) {
  constexpr std::size_t NO = std::tuple_size_v<Outs>;
  shape const s = outs[0].dims();
  index_t const in_st[] = {flat_stride(args, s)..., 1};
  bool flat = true;
  for (index_t st : in_st)
    flat = flat && st > 0;
  std::array<index_t, NO> out_st;
  for (std::size_t o = 0; o < NO; ++o)
    flat = flat && (out_st[o] = flat_stride(outs[o], s)) > 0;
  if (flat) {
    auto p = flat_params<T, Op::num_in, int(NO)>(s.size());
    int i = 0, j = 0;
    auto arg = [&](auto const &x) {
      if constexpr (is_view_v<std::remove_cvref_t<decltype(x)>>)
        p.in[i].ptr = x.data(), p.in[i++].stride[0] = in_st[j];
      ++j;
    };
    (arg(args), ...);
    for (std::size_t o = 0; o < NO; ++o)
      p.out[o].ptr = outs[o].data(), p.out[o].stride[0] = out_st[o], p.add[o] = add[o];
    backend_map<S>(hook{}, ex, p, op);
    return;
  }
  auto plan = plan_with_args<T, Op::num_in, int(NO)>(s, collect_arrays<T>(args...));
  plan.add_outs(outs.data(), add.data(), NO);
  backend_map<S>(hook{}, ex, plan.p, op);
}
// dualcast::apply's two forms below (values; values and partials) run so, with the same
// compile-time checks of the kernel.
template <class Ex, class F, bool S, class... O, class... A>
void apply_fresh(Ex const &ex, kernel<F, S> const &k, pack<O...> const &outs, A const &...args) {
  using T = typename common_element<O..., A...>::type;
  using VT = view_element_t<T, O..., A...>;
  if constexpr (call_fits<F, S, values_mode, T>(type_list<O..., A...>{}, type_list<A...>{})) {
    values_op<F, call_layout<A...>, int(sizeof...(O))> op{{k.f, scalar_table<F>(args...)}};
    apply_fresh_run<decltype(op), S, Ex, VT>(ex, op, views_of<VT>(outs), outs.add, args...);
  }
}
template <class Ex, class F, bool S, int C, int... I, class... O, class... P, class... A>
void apply_fresh(Ex const &ex, kernel<F, S> const &k, active_set<C, I...>, pack<O...> const &outs,
                 pack<P...> const &partials, A const &...args) {
  using T = typename common_element<O..., A...>::type;
  using VT = view_element_t<T, O..., P..., A...>;
  using Active = active_set<C, I...>;
  if constexpr (call_fits<F, S, chunked_mode<Active>, T>(type_list<O..., P..., A...>{},
                                                         type_list<A...>{})) {
    auto const all = std::apply(
        [](auto const &...v) { return std::array<view<VT>, sizeof...(v)>{view<VT>(v)...}; },
        std::tuple_cat(outs.items, partials.items));
    partials_op<F, call_layout<A...>, int(sizeof...(O)), Active> op{
        {k.f, scalar_table<F>(args...)}};
    std::array<bool, sizeof...(O) + sizeof...(P)> add{};
    for (std::size_t o = 0; o < sizeof...(O); ++o)
      add[o] = outs.add[o];
    apply_fresh_run<decltype(op), S, Ex, VT>(ex, op, all, add, args...);
  }
}

} // namespace detail

// ---- values -----------------------------------------------------------------------------------
template <class Ex, class F, bool S, class... O, class... A>
void apply(Ex const &ex, kernel<F, S> const &k, pack<O...> const &outs, A const &...args) {
  using T = typename detail::common_element<O..., A...>::type;
  using VT = detail::view_element_t<T, O..., A...>;
  // (the call is compiled only when its checks pass: one message, no errors after it)
  if constexpr (detail::call_fits<F, S, detail::values_mode, T>(detail::type_list<O..., A...>{},
                                                                detail::type_list<A...>{})) {
    constexpr int K = detail::check_kernel<F, T, A...>();
    static_assert(sizeof...(O) == K, "dualcast::apply: give one output array per kernel output");
    using Layout = detail::call_layout<A...>;
    detail::values_op<F, Layout, K> op{{k.f, detail::scalar_table<F>(args...)}};
    detail::apply_arrays<decltype(op), S>(ex, op, detail::collect_arrays<VT>(args...),
                                          detail::views_of<VT>(outs), outs.add, K, "");
  }
}

// ---- values and partials d out_k / d in_a (partials given output-major: k * A + a) ------------
template <class Ex, class F, bool S, int C, int... I, class... O, class... P, class... A>
void apply(Ex const &ex, kernel<F, S> const &k, active_set<C, I...>, pack<O...> const &outs,
           pack<P...> const &partials, A const &...args) {
  using T = typename detail::common_element<O..., A...>::type;
  using VT = detail::view_element_t<T, O..., P..., A...>;
  using Active = active_set<C, I...>;
  if constexpr (detail::call_fits<F, S, detail::chunked_mode<Active>, T>(
                    detail::type_list<O..., P..., A...>{}, detail::type_list<A...>{})) {
    constexpr int K = detail::check_kernel<F, T, A...>();
    using Layout = detail::call_layout<A...>;
    static_assert(detail::active_positions_valid<Layout, Active>(),
                  "dualcast: active positions must name distinct array arguments of the kernel");
    constexpr int NA = Active::count;
    static_assert(sizeof...(O) == K, "dualcast::apply: give one output array per kernel output");
    static_assert(
        sizeof...(P) == K * NA,
        "dualcast::apply: give one partial array per (output, active input) pair, output-major");
    auto ov = detail::views_of<VT>(outs);
    auto pv = detail::views_of<VT>(partials);
    std::array<view<VT>, K + K * NA> all;
    std::array<bool, K + K * NA> add;
    for (int i = 0; i < K + K * NA; ++i) {
      all[std::size_t(i)] = i < K ? ov[std::size_t(i)] : pv[std::size_t(i - K)];
      add[std::size_t(i)] = i < K ? outs.add[std::size_t(i)] : partials.add[std::size_t(i - K)];
    }
    detail::partials_op<F, Layout, K, Active> op{{k.f, detail::scalar_table<F>(args...)}};
    detail::apply_arrays<decltype(op), S>(ex, op, detail::collect_arrays<VT>(args...), all, add, K,
                                          "partial");
  }
}

// ---- JVP: values and output tangents from input tangents ---------------------------------------
template <class Ex, class F, bool S, int C, int... I, class... O, class... TO, class... A,
          class... TI>
void jvp(Ex const &ex, kernel<F, S> const &k, active_set<C, I...>, pack<O...> const &outs,
         pack<TO...> const &out_tangents, pack<A...> const &inputs,
         pack<TI...> const &in_tangents) {
  using T = typename detail::common_element<O..., A...>::type;
  using VT = detail::view_element_t<T, O..., TO..., A..., TI...>;
  using Active = active_set<C, I...>;
  if constexpr (detail::call_fits<F, S, detail::jvp_mode<Active>, T>(
                    detail::type_list<O..., TO..., A..., TI...>{}, detail::type_list<A...>{})) {
    constexpr int K = detail::check_kernel<F, T, A...>();
    using Layout = detail::call_layout<A...>;
    static_assert(detail::active_positions_valid<Layout, Active>(),
                  "dualcast: active positions must name distinct array arguments of the kernel");
    constexpr int NA = Active::count;
    static_assert(sizeof...(O) == K && sizeof...(TO) == K,
                  "dualcast::jvp: give one output and one output tangent per kernel output");
    static_assert(sizeof...(TI) == NA && (is_view_v<TI> && ...),
                  "dualcast::jvp: give one tangent array per active input");
    char const *op_name = "dualcast::jvp";
    auto ov = detail::views_of<VT>(outs);
    auto tv = detail::views_of<VT>(out_tangents);
    std::array<view<VT>, 2 * K> all;
    std::array<bool, 2 * K> add;
    for (int i = 0; i < 2 * K; ++i) {
      all[std::size_t(i)] = i < K ? ov[std::size_t(i)] : tv[std::size_t(i - K)];
      add[std::size_t(i)] = i < K ? outs.add[std::size_t(i)] : out_tangents.add[std::size_t(i - K)];
    }
    auto ins =
        std::apply([](auto const &...a) { return detail::collect_arrays<VT>(a...); }, inputs.items);
    detail::output_roles<2 * K> roles("output", K, "output tangent");
    shape s = ov[0].dims();
    detail::check_call(op_name, ins.views.data(), ins.pos.data(), ins.size, all.data(), roles.role,
                       roles.idx, 2 * K, s);
    // Each tangent has the shape of its input.
    auto tin = detail::const_views_of<VT>(in_tangents);
    detail::check_tangents(op_name, ins, Active::positions, tin.data(), NA, all.data(), 2 * K,
                           roles.role, roles.idx, s);

    auto plan = detail::plan_with_args<VT, Layout::num_arrays + NA, 2 * K>(s, ins);
    plan.add_ins(tin.data(), NA);
    plan.add_outs(all.data(), add.data(), 2 * K);
    auto scalars =
        std::apply([](auto const &...a) { return detail::scalar_table<F>(a...); }, inputs.items);
    detail::jvp_op<F, Layout, K, Active> op{{k.f, scalars}};
    backend_map<S>(detail::hook{}, ex, plan.p, op);
  }
}

namespace detail {
// vjp and value_and_vjp (Values; outs: the values' arrays, else empty): the call's arrays and
// scalars collected, then one pass (vjp_arrays).
template <bool Values, class Active, class Ex, class F, bool S, class... O, class... X, class... A,
          class... Y>
void vjp_call(Ex const &ex, kernel<F, S> const &k, pack<O...> const &outs,
              pack<X...> const &in_cotangents, pack<A...> const &inputs,
              pack<Y...> const &out_cotangents, bool accumulate) {
  using T = typename common_element<O..., X..., A...>::type;
  using VT = view_element_t<T, O..., X..., A..., Y...>;
  if constexpr (call_fits<F, S, chunked_mode<Active>, T>(type_list<O..., X..., A..., Y...>{},
                                                         type_list<A...>{})) {
    constexpr int K = check_kernel<F, T, A...>();
    using Layout = call_layout<A...>;
    static_assert(active_positions_valid<Layout, Active>(),
                  "dualcast: active positions must name distinct array arguments of the kernel");
    constexpr int NA = Active::count;
    static_assert(!Values || sizeof...(O) == K,
                  "dualcast::value_and_vjp: give one output array per kernel output");
    static_assert(sizeof...(X) == NA,
                  "dualcast::vjp / value_and_vjp: give one cotangent array per active input");
    static_assert(sizeof...(Y) == K && (is_view_v<Y> && ...),
                  "dualcast::vjp / value_and_vjp: give one cotangent array per kernel output");
    bool add[NA > 0 ? NA : 1];
    for (int a = 0; a < NA; ++a)
      add[a] = accumulate || in_cotangents.add[std::size_t(a)];
    auto ins = std::apply([](auto const &...a) { return collect_arrays<VT>(a...); }, inputs.items);
    auto scalars = std::apply([](auto const &...a) { return scalar_table<F>(a...); }, inputs.items);
    auto values = views_of<VT>(outs);
    vjp_arrays<S, F, Layout, K, Active, Values>(ex, k, ins, scalars, views_of<VT>(in_cotangents),
                                                add, const_views_of<VT>(out_cotangents),
                                                values.data(), outs.add.data());
  }
}
} // namespace detail

// ---- VJP: input cotangents from output cotangents (duals re-evaluated; nothing stored) ---------
// With accumulate = true (or cotangents given with add_to) they are added to (xbar += ...), else
// overwritten. Inputs broadcast along some dimensions get their cotangents summed over those
// dimensions.
template <class Ex, class F, bool S, int C, int... I, class... X, class... A, class... Y>
void vjp(Ex const &ex, kernel<F, S> const &k, active_set<C, I...>, pack<X...> const &in_cotangents,
         pack<A...> const &inputs, pack<Y...> const &out_cotangents, bool accumulate = false) {
  detail::vjp_call<false, active_set<C, I...>>(ex, k, pack<>{}, in_cotangents, inputs,
                                               out_cotangents, accumulate);
}

// ---- values and VJP in one pass ---------------------------------------------------------------
// The outputs' values and the input cotangents for given output cotangents, from ONE evaluation
// of the kernel on duals: what apply and then vjp give (to a rounding error where the compiler
// contracts other multiply-adds into FMAs), reading the inputs once instead of twice. For a step
// whose output cotangents are known when it runs: a loss, the last layer, forward + backward of
// one cell. The values are overwritten (added to when given with add_to), the cotangents as in
// vjp.
template <class Ex, class F, bool S, int C, int... I, class... O, class... X, class... A,
          class... Y>
void value_and_vjp(Ex const &ex, kernel<F, S> const &k, active_set<C, I...>, pack<O...> const &outs,
                   pack<X...> const &in_cotangents, pack<A...> const &inputs,
                   pack<Y...> const &out_cotangents, bool accumulate = false) {
  detail::vjp_call<true, active_set<C, I...>>(ex, k, outs, in_cotangents, inputs, out_cotangents,
                                              accumulate);
}

// ---- defaults: every array argument active ----------------------------------------------------

template <class Ex, class F, bool S, class... X, class... A, class... Y>
void vjp(Ex const &ex, kernel<F, S> const &k, pack<X...> const &in_cotangents,
         pack<A...> const &inputs, pack<Y...> const &out_cotangents, bool accumulate = false) {
  vjp(ex, k, detail::default_active_t<A...>{}, in_cotangents, inputs, out_cotangents, accumulate);
}
template <class Ex, class F, bool S, class... O, class... X, class... A, class... Y>
void value_and_vjp(Ex const &ex, kernel<F, S> const &k, pack<O...> const &outs,
                   pack<X...> const &in_cotangents, pack<A...> const &inputs,
                   pack<Y...> const &out_cotangents, bool accumulate = false) {
  value_and_vjp(ex, k, detail::default_active_t<A...>{}, outs, in_cotangents, inputs,
                out_cotangents, accumulate);
}
template <class Ex, class F, bool S, class... O, class... TO, class... A, class... TI>
void jvp(Ex const &ex, kernel<F, S> const &k, pack<O...> const &outs,
         pack<TO...> const &out_tangents, pack<A...> const &inputs,
         pack<TI...> const &in_tangents) {
  jvp(ex, k, detail::default_active_t<A...>{}, outs, out_tangents, inputs, in_tangents);
}

} // namespace dualcast

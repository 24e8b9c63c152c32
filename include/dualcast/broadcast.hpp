// dualcast/broadcast.hpp: running a kernel over arrays as ONE fused broadcast pass.
//
//   dualcast::apply(ex, k, dualcast::out(y0, y1), x0, x1, 2.0f);                 // values
//   dualcast::apply(ex, k, dualcast::active<0, 1>, dualcast::out(y0, y1),         // values and
//                   dualcast::out(d00, d01, d10, d11), x0, x1, 2.0f);             // d y_k / d x_a
//   dualcast::jvp(ex, k, dualcast::active<0, 1>, dualcast::out(y0, y1), dualcast::out(t0, t1),
//                 dualcast::in(x0, x1, 2.0f), dualcast::in(tx0, tx1));
//   dualcast::vjp(ex, k, dualcast::active<0, 1>, dualcast::out(xbar0, xbar1),
//                 dualcast::in(x0, x1, 2.0f), dualcast::in(ybar0, ybar1));
//
// Arguments are views (dualcast::view) or plain scalars. Inputs broadcast against each other and
// to the outputs' shape by numpy's rules. Only active inputs (argument positions; default: every
// array) become duals, so a mask or constant takes exactly the branch its value says. Every
// check (shapes, aliasing) happens before anything is written (detail/call_checks.hpp); then one
// call of the backend's map hook (backend/seam.hpp) runs the element operation of the mode
// (detail/element_ops.hpp) over the whole iteration space.
#pragma once

#include <dualcast/backend/seam.hpp>
#include <dualcast/detail/call_checks.hpp>
#include <dualcast/detail/element_ops.hpp>
#include <dualcast/detail/kernel_checks.hpp>
#include <dualcast/detail/launch_plan.hpp>
#include <dualcast/errors.hpp>
#include <dualcast/kernel.hpp>
#include <dualcast/shape.hpp>
#include <dualcast/view.hpp>
#include <dualcast/view_overlap.hpp>

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

template <class T, class... V>
std::array<view<T>, sizeof...(V)> views_of(pack<V...> const &p, char const *what) {
  static_assert((std::is_same_v<V, view<T>> && ...),
                "dualcast: output arrays must be mutable views of the call's element type");
  (void)what;
  return std::apply([](auto const &...v) { return std::array<view<T>, sizeof...(V)>{v...}; },
                    p.items);
}

// The shape of every argument of a call (rank 0 for a scalar), by position.
template <class... A> std::array<shape, sizeof...(A)> argument_shapes(pack<A...> const &args) {
  return std::apply(
      [](auto const &...a) {
        auto one = [](auto const &x) {
          if constexpr (is_view_v<decltype(x)>)
            return x.dims();
          else
            return shape{};
        };
        return std::array<shape, sizeof...(A)>{one(a)...};
      },
      args.items);
}


// The fused pass of vjp: contributions go straight into the cotangents of inputs that are not
// broadcast, and into scratch arrays (reduced afterwards) for those that are.
template <bool Simd, class F, class Layout, int K, class Active, class Ex, class T, class... A,
          std::size_t NA, class Buffer, class Scalars>
void vjp_pass(Ex const &ex, kernel<F, Simd> const &k, shape const &s, std::tuple<A const &...> args,
              std::array<view<T const>, K> const &yv, std::array<view<T>, NA> const &xv,
              bool const *direct, Buffer *scratch, Scalars const &scalars, bool const *add) {
  launch_plan<T, Layout::num_arrays + K, int(NA)> plan(s);
  add_array_args(plan, args);
  for (auto const &y : yv)
    plan.add_in(y);
  for (std::size_t a = 0; a < NA; ++a) // (broadcast ones are added by the reduction afterwards)
    plan.add_out(direct[a] ? xv[a] : view<T>(scratch[a].get(), s), add[a] && direct[a]);
  vjp_op<F, Layout, K, Active> op{{k.f, scalars}};
  backend_map<Simd>(hook{}, ex, plan.p, op);
}

} // namespace detail

// ---- values -----------------------------------------------------------------------------------
template <class Ex, class F, bool S, class... O, class... A>
void apply(Ex const &ex, kernel<F, S> const &k, pack<O...> const &outs, A const &...args) {
  using T = typename detail::common_element<O..., A...>::type;
  static_assert(detail::all_arrays_of<T, O..., A...>,
                "dualcast: all arrays of one call must have the same element type");
  constexpr int K = detail::check_kernel<F, T, A...>();
  static_assert(sizeof...(O) == K, "dualcast::apply: give one output array per kernel output");
  using Layout = detail::arg_layout<A...>;
  auto ov = detail::views_of<T>(outs, "output");
  char const *roles[K];
  int idx[K];
  for (int i = 0; i < K; ++i)
    roles[i] = "output", idx[i] = i;
  shape s = ov[0].dims();
  detail::check_call("dualcast::apply", std::tie(args...), ov, roles, idx, s);

  detail::launch_plan<T, Layout::num_arrays, K> plan(s);
  detail::add_array_args(plan, std::tie(args...));
  for (int i = 0; i < K; ++i)
    plan.add_out(ov[std::size_t(i)], outs.add[std::size_t(i)]);
  detail::values_op<F, Layout, K> op{{k.f, detail::scalar_table<F>(args...)}};
  backend_map<S>(detail::hook{}, ex, plan.p, op);
}

// ---- values and partials d out_k / d in_a (partials given output-major: k * A + a) ------------
template <class Ex, class F, bool S, int C, int... I, class... O, class... P, class... A>
void apply(Ex const &ex, kernel<F, S> const &k, active_set<C, I...>, pack<O...> const &outs,
           pack<P...> const &partials, A const &...args) {
  using T = typename detail::common_element<O..., A...>::type;
  static_assert(detail::all_arrays_of<T, O..., P..., A...>,
                "dualcast: all arrays of one call must have the same element type");
  constexpr int K = detail::check_kernel<F, T, A...>();
  using Layout = detail::arg_layout<A...>;
  using Active = active_set<C, I...>;
  static_assert(detail::active_positions_valid<Layout, Active>(),
                "dualcast: active positions must name distinct array arguments of the kernel");
  constexpr int NA = Active::count;
  static_assert(sizeof...(O) == K, "dualcast::apply: give one output array per kernel output");
  static_assert(
      sizeof...(P) == K * NA,
      "dualcast::apply: give one partial array per (output, active input) pair, output-major");
  auto ov = detail::views_of<T>(outs, "output");
  auto pv = detail::views_of<T>(partials, "partial");
  std::array<view<T>, K + K * NA> all;
  char const *roles[K + K * NA];
  int idx[K + K * NA];
  for (int i = 0; i < K; ++i)
    all[i] = ov[i], roles[i] = "output", idx[i] = i;
  for (int i = 0; i < K * NA; ++i)
    all[K + i] = pv[i], roles[K + i] = "partial", idx[K + i] = i;
  shape s = ov[0].dims();
  detail::check_call("dualcast::apply", std::tie(args...), all, roles, idx, s);

  detail::launch_plan<T, Layout::num_arrays, K + K * NA> plan(s);
  detail::add_array_args(plan, std::tie(args...));
  for (int i = 0; i < K + K * NA; ++i)
    plan.add_out(all[std::size_t(i)], i < K ? outs.add[std::size_t(i)]
                                            : partials.add[std::size_t(i - K)]);
  detail::partials_op<F, Layout, K, Active> op{{k.f, detail::scalar_table<F>(args...)}};
  backend_map<S>(detail::hook{}, ex, plan.p, op);
}

// ---- JVP: values and output tangents from input tangents ---------------------------------------
template <class Ex, class F, bool S, int C, int... I, class... O, class... TO, class... A,
          class... TI>
void jvp(Ex const &ex, kernel<F, S> const &k, active_set<C, I...>, pack<O...> const &outs,
         pack<TO...> const &out_tangents, pack<A...> const &inputs,
         pack<TI...> const &in_tangents) {
  using T = typename detail::common_element<O..., A...>::type;
  static_assert(detail::all_arrays_of<T, O..., TO..., A..., TI...>,
                "dualcast: all arrays of one call must have the same element type");
  constexpr int K = detail::check_kernel<F, T, A...>();
  using Layout = detail::arg_layout<A...>;
  using Active = active_set<C, I...>;
  static_assert(detail::active_positions_valid<Layout, Active>(),
                "dualcast: active positions must name distinct array arguments of the kernel");
  constexpr int NA = Active::count;
  static_assert(sizeof...(O) == K && sizeof...(TO) == K,
                "dualcast::jvp: give one output and one output tangent per kernel output");
  static_assert(sizeof...(TI) == NA && (is_view_v<TI> && ...),
                "dualcast::jvp: give one tangent array per active input");
  std::string const op_name = "dualcast::jvp";
  auto ov = detail::views_of<T>(outs, "output");
  auto tv = detail::views_of<T>(out_tangents, "output tangent");
  std::array<view<T>, 2 * K> all;
  char const *roles[2 * K];
  int idx[2 * K];
  for (int i = 0; i < K; ++i)
    all[i] = ov[i], roles[i] = "output", idx[i] = i;
  for (int i = 0; i < K; ++i)
    all[K + i] = tv[i], roles[K + i] = "output tangent", idx[K + i] = i;
  shape s = ov[0].dims();
  auto args = std::apply([](auto const &...a) { return std::tie(a...); }, inputs.items);
  detail::check_call(op_name, args, all, roles, idx, s);
  // Each tangent has the shape of its input.
  auto const in_shapes = detail::argument_shapes(inputs);
  auto tin = std::apply(
      [](auto const &...t) { return std::array<view<T const>, NA>{view<T const>(t)...}; },
      in_tangents.items);
  for (int a = 0; a < NA; ++a)
    if (!(tin[a].dims() == in_shapes[Active::positions[a]]))
      throw shape_error(op_name + ": tangent " + std::to_string(a) + " has shape " +
                        to_string(tin[a].dims()) + " but argument " +
                        std::to_string(Active::positions[a]) + " has shape " +
                        to_string(in_shapes[Active::positions[a]]));

  // The outputs are written while the tangents are read: no overlap unless the same elements.
  for (int i = 0; i < 2 * K; ++i)
    for (int a = 0; a < NA; ++a)
      if (detail::overlaps(all[i], tin[a]) && !detail::same_elements(all[i], tin[a], s))
        throw aliasing_error(op_name + ": " + detail::role_name(roles[i], idx[i]) +
                             " overlaps tangent " + std::to_string(a) +
                             " without being the same elements; write to separate memory");

  detail::launch_plan<T, Layout::num_arrays + NA, 2 * K> plan(s);
  detail::add_array_args(plan, args);
  for (auto const &t : tin)
    plan.add_in(t);
  for (int i = 0; i < 2 * K; ++i)
    plan.add_out(all[std::size_t(i)], i < K ? outs.add[std::size_t(i)]
                                            : out_tangents.add[std::size_t(i - K)]);
  auto scalars =
      std::apply([](auto const &...a) { return detail::scalar_table<F>(a...); }, inputs.items);
  detail::jvp_op<F, Layout, K, Active> op{{k.f, scalars}};
  backend_map<S>(detail::hook{}, ex, plan.p, op);
}

// ---- VJP: input cotangents from output cotangents (duals re-evaluated; nothing stored) ---------
// With accumulate = true (or cotangents given with add_to) they are added to (xbar += ...), else
// overwritten. Inputs broadcast along some dimensions get their cotangents summed over those
// dimensions.
template <class Ex, class F, bool S, int C, int... I, class... X, class... A, class... Y>
void vjp(Ex const &ex, kernel<F, S> const &k, active_set<C, I...>, pack<X...> const &in_cotangents,
         pack<A...> const &inputs, pack<Y...> const &out_cotangents, bool accumulate = false) {
  using T = typename detail::common_element<X..., A...>::type;
  static_assert(detail::all_arrays_of<T, X..., A..., Y...>,
                "dualcast: all arrays of one call must have the same element type");
  constexpr int K = detail::check_kernel<F, T, A...>();
  using Layout = detail::arg_layout<A...>;
  using Active = active_set<C, I...>;
  static_assert(detail::active_positions_valid<Layout, Active>(),
                "dualcast: active positions must name distinct array arguments of the kernel");
  constexpr int NA = Active::count;
  static_assert(sizeof...(X) == NA, "dualcast::vjp: give one cotangent array per active input");
  static_assert(sizeof...(Y) == K && (is_view_v<Y> && ...),
                "dualcast::vjp: give one cotangent array per kernel output");
  std::string const op_name = "dualcast::vjp";
  auto xv = detail::views_of<T>(in_cotangents, "input cotangent");
  auto yv =
      std::apply([](auto const &...y) { return std::array<view<T const>, K>{view<T const>(y)...}; },
                 out_cotangents.items);
  auto args = std::apply([](auto const &...a) { return std::tie(a...); }, inputs.items);
  shape s_in = detail::broadcast_args(op_name, args);
  // The iteration shape: the inputs and output cotangents broadcast together.
  shape s = s_in;
  for (int k2 = 0; k2 < K; ++k2) {
    bool ok = true;
    s = broadcast_pair(s, yv[k2].dims(), ok);
    if (!ok)
      throw shape_error(op_name + ": output cotangent " + std::to_string(k2) + " of shape " +
                        to_string(yv[k2].dims()) + " does not broadcast with the inputs' shape " +
                        to_string(s_in));
  }
  auto const in_shapes = detail::argument_shapes(inputs);
  // Input cotangents: the shape of their input; a broadcast input goes through a scratch array.
  bool direct[NA > 0 ? NA : 1];
  for (int a = 0; a < NA; ++a) {
    shape const &xs = in_shapes[Active::positions[a]];
    if (!(xv[a].dims() == xs))
      throw shape_error(op_name + ": input cotangent " + std::to_string(a) + " has shape " +
                        to_string(xv[a].dims()) + " but argument " +
                        std::to_string(Active::positions[a]) + " has shape " + to_string(xs));
    direct[a] = xs.rank == s.rank;
    for (int d = 0; d < xs.rank && direct[a]; ++d)
      direct[a] = xs.ext[d] == s.ext[d];
    for (int d = 0; d < xv[a].rank() && xv[a].size() > 0; ++d)
      if (xv[a].extent(d) > 1 && xv[a].stride(d) == 0)
        throw aliasing_error(op_name + ": input cotangent " + std::to_string(a) +
                             " has stride 0 in dimension " + std::to_string(d));
  }
  {
    char const *roles[NA > 0 ? NA : 1];
    int idx[NA > 0 ? NA : 1];
    for (int a = 0; a < NA; ++a)
      roles[a] = "input cotangent", idx[a] = a;
    detail::check_aliasing(op_name, xv.data(), roles, idx, NA, args, s);
  }
  // Cotangents of non-broadcast inputs are written while the output cotangents are read: no overlap
  // unless the same elements. (Those of broadcast inputs are written after the pass, by the
  // reduction.)
  for (int a = 0; a < NA; ++a)
    for (int k2 = 0; k2 < K && direct[a]; ++k2)
      if (detail::overlaps(xv[a], yv[k2]) && !detail::same_elements(xv[a], yv[k2], s))
        throw aliasing_error(op_name + ": input cotangent " + std::to_string(a) +
                             " overlaps output cotangent " + std::to_string(k2) +
                             " without being the same elements; write to separate memory");

  using Buffer = decltype(backend_buffer<T>(detail::hook{}, ex, index_t(0)));
  Buffer scratch[NA > 0 ? NA : 1];
  for (int a = 0; a < NA; ++a)
    if (!direct[a])
      scratch[a] = backend_buffer<T>(detail::hook{}, ex, s.size());
  bool add[NA > 0 ? NA : 1];
  for (int a = 0; a < NA; ++a)
    add[a] = accumulate || in_cotangents.add[std::size_t(a)];
  auto scalars =
      std::apply([](auto const &...a) { return detail::scalar_table<F>(a...); }, inputs.items);
  detail::vjp_pass<S, F, Layout, K, Active>(ex, k, s, args, yv, xv, direct, scratch, scalars,
                                            add);
  for (int a = 0; a < NA; ++a)
    if (!direct[a])
      backend_reduce(detail::hook{}, ex, s, static_cast<T const *>(scratch[a].get()), xv[a],
                     add[a]);
}

// ---- defaults: every array argument active ----------------------------------------------------

template <class Ex, class F, bool S, class... X, class... A, class... Y>
void vjp(Ex const &ex, kernel<F, S> const &k, pack<X...> const &in_cotangents,
         pack<A...> const &inputs, pack<Y...> const &out_cotangents, bool accumulate = false) {
  vjp(ex, k, detail::default_active_t<A...>{}, in_cotangents, inputs, out_cotangents, accumulate);
}
template <class Ex, class F, bool S, class... O, class... TO, class... A, class... TI>
void jvp(Ex const &ex, kernel<F, S> const &k, pack<O...> const &outs,
         pack<TO...> const &out_tangents, pack<A...> const &inputs,
         pack<TI...> const &in_tangents) {
  jvp(ex, k, detail::default_active_t<A...>{}, outs, out_tangents, inputs, in_tangents);
}

} // namespace dualcast

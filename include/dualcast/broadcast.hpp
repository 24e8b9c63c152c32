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
// check (shapes, aliasing) happens before anything is written.
#pragma once

#include <dualcast/detail/element_ops.hpp>
#include <dualcast/detail/operand.hpp>
#include <dualcast/errors.hpp>
#include <dualcast/kernel.hpp>
#include <dualcast/shape.hpp>
#include <dualcast/view.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace dualcast {

// Groups of arrays (and scalars): the outputs of a call, or a mode's extra inputs.
template <class... V> struct pack { std::tuple<V...> items; };
template <class... V> pack<std::decay_t<V>...> out(V &&...v) { return {{static_cast<V &&>(v)...}}; }
template <class... V> pack<std::decay_t<V>...> in(V &&...v) { return {{static_cast<V &&>(v)...}}; }

namespace detail {

template <class A> struct element_of { using type = void; };
template <class T> struct element_of<view<T>> { using type = std::remove_cv_t<T>; };

// The element type shared by all arrays of a call.
template <class... V> struct common_element { using type = void; };
template <class V, class... Rest> struct common_element<V, Rest...> {
  using first = typename element_of<std::decay_t<V>>::type;
  using rest = typename common_element<Rest...>::type;
  using type = std::conditional_t<std::is_void_v<first>, rest, first>;
};
template <class T, class... V>
inline constexpr bool
    all_arrays_of = ((std::is_void_v<typename element_of<std::decay_t<V>>::type> ||
                      std::is_same_v<typename element_of<std::decay_t<V>>::type, T>)&&...);

// What the lambda receives for argument A when it runs on plain numbers of type T.
template <class A, class T>
using scalar_arg_t = std::conditional_t<is_view_v<A>, T, std::decay_t<A>>;

template <class F, class T, class... A>
using scalar_result_t =
    decltype(as_outputs(std::declval<F const &>()(std::declval<scalar_arg_t<A, T>>()...)));

template <class R, std::size_t... k> constexpr bool outputs_are_numbers(std::index_sequence<k...>) {
  return (is_number<std::decay_t<decltype(get<k>(std::declval<R>()))>>::value && ...);
}

// Compile-time checks shared by every mode; gives readable messages instead of template errors.
template <class F, class T, class... A> constexpr int check_kernel() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "dualcast: arrays passed to a kernel must hold float or double");
  static_assert(((is_view_v<A> || std::is_arithmetic_v<std::decay_t<A>>)&&...),
                "dualcast: kernel arguments must be dualcast::view arrays or arithmetic scalars");
  static_assert(std::is_invocable_v<F const &, scalar_arg_t<A, T>...>,
                "dualcast: the kernel's lambda cannot be called with this number of arguments "
                "(check the kernel's arity against the arguments passed)");
  using R = scalar_result_t<F, T, A...>;
  static_assert(outputs_are_numbers<R>(std::make_index_sequence<R::size>{}),
                "dualcast: every output of a kernel must be a number or a dual number");
  return static_cast<int>(R::size);
}

template <class Layout, class Active> constexpr bool active_positions_valid() {
  for (int a = 0; a < Active::count; ++a) {
    int p = Active::positions[a];
    if (p < 0 || p >= Layout::arity || !Layout::is_array[p])
      return false;
    for (int b = 0; b < a; ++b)
      if (Active::positions[b] == p)
        return false;
  }
  return true;
}

template <int C, class Layout, int P = 0, int... Acc> constexpr auto all_arrays_active() {
  if constexpr (P == Layout::arity)
    return active_set<C, Acc...>{};
  else if constexpr (Layout::is_array[P])
    return all_arrays_active<C, Layout, P + 1, Acc..., P>();
  else
    return all_arrays_active<C, Layout, P + 1, Acc...>();
}

template <class A> auto scalar_slot(A const &a) {
  if constexpr (is_view_v<A>)
    return array_marker{};
  else
    return a;
}

// ---- run-time checks ---------------------------------------------------------------------------
struct extent_range {
  std::uintptr_t lo, hi; // bytes [lo, hi)
};
template <class T> extent_range memory_range(view<T> const &v) {
  index_t lo = 0, hi = 0;
  for (int d = 0; d < v.rank(); ++d) {
    index_t span = (v.extent(d) - 1) * v.stride(d);
    (span < 0 ? lo : hi) += span;
  }
  auto base = reinterpret_cast<std::uintptr_t>(v.data());
  return {base + static_cast<std::uintptr_t>(lo * index_t(sizeof(T))),
          base + static_cast<std::uintptr_t>((hi + 1) * index_t(sizeof(T)))};
}
// Do two views with the same strides, origins `delta` elements apart, share an element? They do
// iff delta = sum_d c_d * stride_d for integers c_d in [-(eb_d - 1), ea_d - 1]; searched from
// the largest stride down, each level keeping only the c_d whose remainder the smaller strides
// can still reach (one or two values for the strides of slices of one tensor). Gives up (true:
// may overlap) after `budget` steps.
struct lattice_dim {
  index_t stride, lo, hi;
};
inline bool lattice_hits(lattice_dim const *d, int n, index_t r, int &budget) {
  if (n == 0)
    return r == 0;
  if (--budget < 0)
    return true;
  index_t rest_lo = 0, rest_hi = 0;
  for (int j = 1; j < n; ++j)
    rest_lo += d[j].lo * d[j].stride, rest_hi += d[j].hi * d[j].stride;
  auto floor_div = [](index_t x, index_t y) { return x / y - ((x % y != 0) && (x < 0)); };
  index_t s = d[0].stride;
  index_t c_lo = -floor_div(-(r - rest_hi), s), c_hi = floor_div(r - rest_lo, s);
  c_lo = c_lo < d[0].lo ? d[0].lo : c_lo;
  c_hi = c_hi > d[0].hi ? d[0].hi : c_hi;
  for (index_t c = c_lo; c <= c_hi; ++c)
    if (lattice_hits(d + 1, n - 1, r - c * s, budget))
      return true;
  return false;
}
template <class T> bool same_stride_overlap(view<T> const &a, view<T> const &b) {
  lattice_dim d[max_rank];
  int n = 0;
  index_t oa = 0, ob = 0; // origins relative to a.data(), after making the strides positive
  index_t delta_bytes =
      reinterpret_cast<char const *>(b.data()) - reinterpret_cast<char const *>(a.data());
  if (delta_bytes % index_t(sizeof(T)) != 0)
    return true;
  ob = delta_bytes / index_t(sizeof(T));
  for (int k = 0; k < a.rank(); ++k) {
    index_t ea = a.extent(k), eb = b.extent(k);
    index_t st = ea > 1 ? a.stride(k) : b.stride(k);
    if (ea > 1 && eb > 1 && a.stride(k) != b.stride(k))
      return true; // different layouts: not decided here
    if (st == 0 || (ea == 1 && eb == 1))
      continue;
    if (st < 0) {
      oa += (ea - 1) * st, ob += (eb - 1) * st;
      st = -st;
    }
    d[n++] = {st, -(eb - 1), ea - 1};
  }
  for (int i = 1; i < n; ++i) // largest stride first
    for (int j = i; j > 0 && d[j].stride > d[j - 1].stride; --j)
      std::swap(d[j], d[j - 1]);
  int budget = 4096;
  return lattice_hits(d, n, ob - oa, budget);
}
// Do two views share an element? Exact for views with the same strides (slices of one tensor,
// e.g. the gradients of an LSTM's four gate slices), else by their address ranges.
template <class T, class U> bool overlaps(view<T> const &a, view<U> const &b) {
  if (a.size() == 0 || b.size() == 0)
    return false;
  auto x = memory_range(a), y = memory_range(b);
  if (!(x.lo < y.hi && y.lo < x.hi))
    return false;
  using A = std::remove_const_t<T>;
  using B = std::remove_const_t<U>;
  if constexpr (std::is_same_v<A, B>) {
    if (a.rank() == b.rank())
      return same_stride_overlap(view<A const>(a), view<A const>(b));
  }
  return true;
}
template <class T, class U> bool same_elements(view<T> const &a, view<U> const &b, shape const &s) {
  // a (an output of shape s) and b (an input broadcast to s) address the same element everywhere.
  if (static_cast<void const *>(a.data()) != static_cast<void const *>(b.data()) ||
      b.rank() > s.rank)
    return false;
  for (int d = 0; d < s.rank; ++d) {
    int j = b.rank() - s.rank + d;
    index_t bs = (j < 0 || b.extent(j) == 1) ? 0 : b.stride(j);
    if (s.ext[d] != 1 && a.stride(d) != bs)
      return false;
  }
  return true;
}

inline std::string role_name(char const *role, int i) {
  return std::string(role) + " " + std::to_string(i);
}

// Strides of view v aligned to shape s (right-aligned, 0 on broadcast dimensions).
template <class T, class P> void align_operand(operand<P> &o, view<T> const &v, shape const &s) {
  o.ptr = v.data();
  for (int d = 0; d < s.rank; ++d) {
    int j = v.rank() - s.rank + d;
    o.stride[d] = (j < 0 || v.extent(j) == 1) ? 0 : v.stride(j);
  }
}

template <class T>
void check_output(std::string const &op, char const *role, int i, view<T> const &v,
                  shape const &s) {
  if (!(v.dims() == s))
    throw shape_error(op + ": " + role_name(role, i) + " has shape " + to_string(v.dims()) +
                      " but the call's shape is " + to_string(s));
  // (An empty array writes nothing; its row-major strides may be 0 before a zero extent.)
  for (int d = 0; d < v.rank() && v.size() > 0; ++d)
    if (v.extent(d) > 1 && v.stride(d) == 0)
      throw aliasing_error(op + ": " + role_name(role, i) + " has stride 0 in dimension " +
                           std::to_string(d) +
                           ", so several elements would be written to one place");
}

// The broadcast shape of the array arguments, then fitted to the outputs' shape.
template <class... A> shape broadcast_args(std::string const &op, std::tuple<A const &...> args) {
  shape shapes[sizeof...(A) + 1];
  int pos[sizeof...(A) + 1] = {};
  int n = 0;
  std::apply(
      [&](auto const &...a) {
        int p = 0;
        auto add = [&](auto const &x) {
          if constexpr (is_view_v<decltype(x)>) {
            shapes[n] = x.dims();
            pos[n++] = p;
          }
          ++p;
        };
        (add(a), ...);
      },
      args);
  return broadcast_shapes(op, shapes, pos, n);
}

template <class... A>
void check_fits(std::string const &op, std::tuple<A const &...> args, shape const &s_in,
                shape const &s) {
  bool ok = true;
  shape b = broadcast_pair(s_in, s, ok);
  if (ok && b == s)
    return;
  std::apply(
      [&](auto const &...a) {
        int p = 0;
        auto test = [&](auto const &x) {
          if constexpr (is_view_v<decltype(x)>) {
            bool fits = true;
            shape bx = broadcast_pair(x.dims(), s, fits);
            if (!fits || !(bx == s))
              throw shape_error(op + ": argument " + std::to_string(p) + " of shape " +
                                to_string(x.dims()) + " does not broadcast to the output shape " +
                                to_string(s));
          }
          ++p;
        };
        (test(a), ...);
      },
      args);
}

// Outputs must not overlap each other, nor overlap an input unless they are that same input.
template <class T, class... A>
void check_aliasing(std::string const &op, view<T> const *outs, char const *const *roles,
                    int const *idx, std::size_t n_out, std::tuple<A const &...> args,
                    shape const &s) {
  for (std::size_t i = 0; i < n_out; ++i) {
    for (std::size_t j = 0; j < i; ++j)
      if (overlaps(outs[i], outs[j]))
        throw aliasing_error(op + ": " + role_name(roles[i], idx[i]) + " overlaps " +
                             role_name(roles[j], idx[j]));
    std::apply(
        [&](auto const &...a) {
          int p = 0;
          auto test = [&](auto const &x) {
            if constexpr (is_view_v<decltype(x)>) {
              if (overlaps(outs[i], x) && !same_elements(outs[i], x, s))
                throw aliasing_error(op + ": " + role_name(roles[i], idx[i]) +
                                     " overlaps argument " + std::to_string(p) +
                                     " without being the same elements; write to separate memory");
            }
            ++p;
          };
          (test(a), ...);
        },
        args);
  }
}

template <class T, class... A>
void align_inputs(operand<T const> *ops, std::tuple<A const &...> args, shape const &s) {
  std::apply(
      [&](auto const &...a) {
        int n = 0;
        auto add = [&](auto const &x) {
          if constexpr (is_view_v<decltype(x)>)
            align_operand(ops[n++], view<T const>(x), s);
        };
        (add(a), ...);
      },
      args);
}

template <class T, class... V>
std::array<view<T>, sizeof...(V)> views_of(pack<V...> const &p, char const *what) {
  static_assert((std::is_same_v<V, view<T>> && ...),
                "dualcast: output arrays must be mutable views of the call's element type");
  (void)what;
  return std::apply([](auto const &...v) { return std::array<view<T>, sizeof...(V)>{v...}; },
                    p.items);
}

template <class T, int NI, int NO> struct launch_plan {
  map_params<T, NI, NO> p{};
  int ni = 0, no = 0;
  explicit launch_plan(shape const &s) {
    p.rank = s.rank;
    for (int d = 0; d < s.rank; ++d)
      p.ext[d] = s.ext[d];
  }
  shape dims() const {
    shape s;
    s.rank = p.rank;
    for (int d = 0; d < p.rank; ++d)
      s.ext[d] = p.ext[d];
    return s;
  }
  void add_in(view<T const> const &v) { align_operand(p.in[ni++], v, dims()); }
  void add_zero_in() { // an input that reads 0 everywhere
    static const T zero{};
    p.in[ni].ptr = &zero;
    for (int d = 0; d < max_rank; ++d)
      p.in[ni].stride[d] = 0;
    ++ni;
  }
  void add_out(view<T> const &v) { align_operand(p.out[no++], v, dims()); }
};

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

// Shapes, fit and aliasing of a call's arguments against its output shape s.
template <class T, std::size_t NO, class... A>
void check_call(std::string const &op, std::tuple<A const &...> args,
                std::array<view<T>, NO> const &outs, char const *const (&roles)[NO],
                int const (&idx)[NO], shape const &s) {
  shape s_in = broadcast_args(op, args);
  check_fits(op, args, s_in, s);
  for (std::size_t i = 0; i < NO; ++i)
    check_output(op, roles[i], idx[i], outs[i], s);
  check_aliasing(op, outs.data(), roles, idx, NO, args, s);
}

template <class T, int NI, int NO, class... A>
void add_array_args(launch_plan<T, NI, NO> &plan, std::tuple<A const &...> args) {
  std::apply(
      [&](auto const &...a) {
        auto add = [&](auto const &x) {
          if constexpr (is_view_v<decltype(x)>)
            plan.add_in(view<T const>(x));
        };
        (add(a), ...);
      },
      args);
}

template <class F, class... A> auto scalar_table(A const &...args) {
  return typename arg_layout<A...>::scalars{make_tuple(scalar_slot(args)...)};
}

template <class Tuple, std::size_t... I>
auto positions_of(Tuple const &t, std::index_sequence<I...>) {
  return std::array<shape, sizeof...(I)>{std::get<I>(t).dims()...};
}

// The fused pass of vjp: contributions go straight into the cotangents of inputs that are not
// broadcast, and into scratch arrays (reduced afterwards) for those that are.
template <bool Simd, bool Acc, class F, class Layout, int K, class Active, class Ex, class T,
          class... A, std::size_t NA, class Buffer, class Scalars>
void vjp_pass(Ex const &ex, kernel<F, Simd> const &k, shape const &s, std::tuple<A const &...> args,
              std::array<view<T const>, K> const &yv, std::array<view<T>, NA> const &xv,
              bool const *direct, Buffer *scratch, Scalars const &scalars) {
  launch_plan<T, Layout::num_arrays + K + (Acc ? int(NA) : 0), int(NA)> plan(s);
  add_array_args(plan, args);
  for (auto const &y : yv)
    plan.add_in(y);
  for (std::size_t a = 0; a < NA; ++a) {
    if (direct[a]) {
      if constexpr (Acc)
        plan.add_in(view<T const>(xv[a]));
      plan.add_out(xv[a]);
    } else {
      if constexpr (Acc)
        plan.add_zero_in();
      plan.add_out(view<T>(scratch[a].get(), s));
    }
  }
  vjp_op<F, Layout, K, Active, Acc> op{{k.f, scalars}};
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
  for (auto const &v : ov)
    plan.add_out(v);
  detail::values_op<F, Layout, K> op{{k.f, detail::scalar_table<F>(args...)}};
  backend_map<S>(detail::hook{}, ex, plan.p, op);
}

// ---- values and partials d out_k / d in_a (partials given output-major: k * A + a)
// ----------------
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
  for (auto const &v : all)
    plan.add_out(v);
  detail::partials_op<F, Layout, K, Active> op{{k.f, detail::scalar_table<F>(args...)}};
  backend_map<S>(detail::hook{}, ex, plan.p, op);
}

// ---- JVP: values and output tangents from input tangents
// -------------------------------------------
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
  for (auto const &v : all)
    plan.add_out(v);
  auto scalars =
      std::apply([](auto const &...a) { return detail::scalar_table<F>(a...); }, inputs.items);
  detail::jvp_op<F, Layout, K, Active> op{{k.f, scalars}};
  backend_map<S>(detail::hook{}, ex, plan.p, op);
}

// ---- VJP: input cotangents from output cotangents (duals re-evaluated; nothing stored)
// -------------- With accumulate = true the input cotangents are added to (xbar += ...), else
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
  auto scalars =
      std::apply([](auto const &...a) { return detail::scalar_table<F>(a...); }, inputs.items);
  if (accumulate)
    detail::vjp_pass<S, true, F, Layout, K, Active>(ex, k, s, args, yv, xv, direct, scratch,
                                                    scalars);
  else
    detail::vjp_pass<S, false, F, Layout, K, Active>(ex, k, s, args, yv, xv, direct, scratch,
                                                     scalars);
  for (int a = 0; a < NA; ++a)
    if (!direct[a])
      backend_reduce(detail::hook{}, ex, s, static_cast<T const *>(scratch[a].get()), xv[a],
                     accumulate);
}

// ---- defaults: every array argument active
// ---------------------------------------------------------
namespace detail {
template <class... A>
using default_active_t = decltype(all_arrays_active<default_chunk, arg_layout<A...>>());
}

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

// dualcast/ops/elementwise.hpp: the fused elementwise node (mixed mode) and elementwise
// operations on tape variables.
//
//   constexpr auto cell = dualcast::kernel([](auto i, auto f, auto g, auto o, auto c) {
//     auto c2 = dualcast::sigmoid(f) * c + dualcast::sigmoid(i) * dualcast::tanh(g);
//     return dualcast::outputs(dualcast::sigmoid(o) * dualcast::tanh(c2), c2);
//   });
//   auto [h, c2] = dualcast::fused(cell, I, F, G, O, C);                       // cost model
//   auto [h, c2] = dualcast::fused(cell, dualcast::policy::recompute, I, F, G, O, C);
//
// Arguments: variables (differentiated: the kernel's active inputs), tensors (constants, never
// dualized) and arithmetic scalars. ONE node is recorded per call; nothing inside the lambda is
// taped. Forward runs one fused pass: values, plus under the store policy the diagonal partials
// d y_k / d x_a of the inputs that require gradients. Backward:
//   store:     xbar_a += sum_k ybar_k * P[k, a]   -- itself one dualcast kernel over the stored
//              partials per input, summed over broadcast dimensions afterwards;
//   recompute: dualcast::vjp(..., accumulate = true) re-evaluates the duals; nothing is stored
//              except (references to) the inputs.
//
// Cost model of policy::automatic (bytes moved; n = elements of the call's shape, s = sizeof(T),
// K outputs, A inputs that require gradients, I = bytes of the array inputs):
//   store     moves 2 * K * A * n * s extra bytes: K*A partial arrays written in forward and read
//             again in backward (and held in memory in between);
//   recompute moves I + K * n * s extra bytes: the inputs are re-read in backward, and the dual
//             re-evaluation of the lambda is charged as one output array per output (its
//             arithmetic; transcendental-heavy lambdas make this an underestimate).
//   Both read the K output cotangents and write the A input cotangents; that is not counted.
//   store is chosen iff its bytes are <= recompute's. Examples: sigmoid (K=1, A=1): 2n vs 2n ->
//   store; x * y (K=1, A=2): 4n vs 3n -> recompute; an LSTM cell (K=2, A=5): 20n vs 7n ->
//   recompute. Override per call with policy::store / policy::recompute, or per tape with
//   tape::default_policy.
//
// Operators and math functions on variables (x * y, dualcast::sigmoid(x), ...) are lazy: they
// build a dualcast::expr that becomes ONE fused node when consumed (ops/expression.hpp).
//
// Unfused mode: dualcast::unfused(k, ...) (in ops/expression.hpp) evaluates the same lambda on the
// variables operation by operation, each operation recording its own node (classic reverse mode);
// dualcast::call(k, ...) picks fused or unfused by the tape's switch tape::fused, so both run side
// by side in one binary. Only lambdas callable on variables (arithmetic and dualcast math, no
// value-dependent branches) can run unfused; fused() accepts any kernel.
#pragma once

#include <dualcast/backend/cpu.hpp>
#include <dualcast/broadcast.hpp>
#include <dualcast/kernel.hpp>
#include <dualcast/math.hpp>
#include <dualcast/tape.hpp>
#include <dualcast/tensor.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace dualcast {

namespace detail {

template <class A> struct elem_of { using type = void; };
template <class T> struct elem_of<var<T>> { using type = T; };
template <class T> struct elem_of<tensor<T>> { using type = T; };
template <class... A> struct elem_of_args { using type = void; };
template <class A, class... R> struct elem_of_args<A, R...> {
  using first = typename elem_of<std::remove_cvref_t<A>>::type;
  using type = std::conditional_t<std::is_void_v<first>, typename elem_of_args<R...>::type, first>;
};

template <class T, class A> auto as_kernel_arg(A const &a) {
  if constexpr (is_var_v<A>)
    return a.value().cview();
  else if constexpr (is_tensor_v<A>)
    return a.cview();
  else
    return T(a);
}
template <class T, class A>
using kernel_arg_t = decltype(as_kernel_arg<T>(std::declval<A const &>()));

// A lazy elementwise expression (ops/expression.hpp), recognised without its definition.
template <class A>
concept expr_like = requires {
  std::remove_cvref_t<A>::is_dualcast_expr;
};
// An argument with expressions materialised (ONE fused node each); others unchanged.
template <class A> decltype(auto) materialize(A const &a) {
  if constexpr (expr_like<A>)
    return a.eval();
  else
    return (a);
}

template <class... A> inline constexpr int var_count = (0 + ... + (is_var_v<A> ? 1 : 0));

template <class... A> constexpr auto var_positions() {
  std::array<int, var_count<A...> + 1> p{};
  bool is[] = {is_var_v<A>..., false};
  int n = 0;
  for (int i = 0; i < int(sizeof...(A)); ++i)
    if (is[i])
      p[std::size_t(n++)] = i;
  return p;
}
template <class... A, std::size_t... I> constexpr auto make_active(std::index_sequence<I...>) {
  constexpr auto p = var_positions<A...>();
  return active_set<default_chunk, p[I]...>{};
}
template <class... A>
using active_of = decltype(make_active<A...>(std::make_index_sequence<var_count<A...>>{}));

// sum_k y_k * p_k over argument pairs (y0, p0, y1, p1, ...), in a fixed order.
template <class Y, class P, class... R>
DUALCAST_HD auto contract_pairs(Y const &y, P const &p, R const &...r) {
  if constexpr (sizeof...(R) == 0)
    return y * p;
  else
    return y * p + contract_pairs(r...);
}
// Function objects, not lambdas: nvcc runs them on the GPU too.
struct contract_fn {
  template <class... A> DUALCAST_HD auto operator()(A const &...a) const {
    return contract_pairs(a...);
  }
};
struct contract_acc_fn {
  template <class X, class... A> DUALCAST_HD auto operator()(X const &x, A const &...a) const {
    return x + contract_pairs(a...);
  }
};
inline constexpr kernel<contract_fn> contract_kernel{contract_fn{}};
inline constexpr kernel<contract_acc_fn> contract_acc_kernel{contract_acc_fn{}};

// All input cotangents of a store node in one pass, reading each output cotangent once:
//   xbar_a = [xbar_a +] sum_k ybar_k * P[k, a],  a = 0 .. NA - 1.
// Arguments: the NA current gradients (if Acc), ybar_0 .. ybar_{K-1}, then P in k-major order.
template <int K, int NA, bool Acc> struct contract_all_fn {
  static constexpr std::size_t first_ybar = Acc ? NA : 0;
  template <std::size_t A, std::size_t... k, class... X>
  DUALCAST_HD static auto term(std::index_sequence<k...>, X const &...x) {
    // the same order of operations as contract_pairs
    auto s = ((nth<first_ybar + k>(x...) * nth<first_ybar + K + k * NA + A>(x...)) + ...);
    if constexpr (Acc)
      return nth<A>(x...) + s;
    else
      return s;
  }
  template <std::size_t... A, class... X>
  DUALCAST_HD static auto all(std::index_sequence<A...>, X const &...x) {
    return outputs(term<A>(std::make_index_sequence<K>{}, x...)...);
  }
  template <class... X> DUALCAST_HD auto operator()(X const &...x) const {
    return all(std::make_index_sequence<NA>{}, x...);
  }
};

// The cost model (see the file comment): true when storing the partials moves fewer bytes.
inline bool store_is_cheaper(int K, int A, index_t n, std::size_t elem, std::size_t input_bytes) {
  double store = 2.0 * K * A * double(n) * double(elem);
  double recompute = double(input_bytes) + double(K) * double(n) * double(elem);
  return store <= recompute;
}

// xbar (slot of shape xs) += sum_k ybar_k * P_k over the call shape s.
template <class T, std::size_t K, class Ex, std::size_t... I>
void contract_into(Ex const &ex, grad_slot<T> &slot, shape const &s,
                   std::array<view<T const>, 2 * K> const &v, std::index_sequence<I...>) {
  if (slot.dims == s) {
    auto [g, acc] = tape::grad_target(slot);
    if (acc)
      apply(ex, contract_acc_kernel, out(g.raw_view()), g.cview(), v[I]...);
    else
      apply(ex, contract_kernel, out(g.raw_view()), v[I]...);
  } else {
    tensor<T> tmp = tensor<T>::empty(s, slot.dev);
    apply(ex, contract_kernel, out(tmp.raw_view()), v[I]...);
    auto [g, acc] = tape::grad_target(slot);
    backend_reduce(hook{}, ex, s, static_cast<T const *>(tmp.data()), g.raw_view(), acc);
  }
}

// The backward of a store node when every input has a gradient of the call's shape (no
// broadcast, no repeated variable): all cotangents in one pass (contract_all_fn). false: not
// applicable -- the caller contracts input by input (the gradients are then defined, zeroed
// where they were fresh).
template <class T, int K, int NA, class Ex, class Slots, std::size_t... a, std::size_t... k,
          std::size_t... p>
bool contract_all(Ex const &ex, Slots const &slots, shape const &s,
                  std::array<tensor<T>, K> const &ybar, std::array<tensor<T>, K * NA + 1> const &P,
                  std::index_sequence<a...>, std::index_sequence<k...>, std::index_sequence<p...>) {
  for (int i = 0; i < NA; ++i) {
    auto const &sl = slots[std::size_t(i)];
    if (!sl || !(sl->dims == s))
      return false;
    for (int j = 0; j < i; ++j)
      if (slots[std::size_t(j)] == sl)
        return false;
  }
  std::array<tensor<T>, NA> g;
  std::array<bool, NA> fresh{};
  bool any_acc = false;
  for (int i = 0; i < NA; ++i) {
    auto [t, acc] = tape::grad_target(*slots[std::size_t(i)]);
    g[std::size_t(i)] = t;
    fresh[std::size_t(i)] = !acc;
    any_acc = any_acc || acc;
  }
  bool overlap = false; // slices of one variable that share elements
  for (int i = 0; i < NA; ++i)
    for (int j = 0; j < i; ++j)
      overlap = overlap || overlaps(g[std::size_t(i)].cview(), g[std::size_t(j)].cview());
  if (overlap || any_acc)
    for (int i = 0; i < NA; ++i)
      if (fresh[std::size_t(i)])
        g[std::size_t(i)].assign_raw(tensor<T>::zeros(shape{}, g[std::size_t(i)].dev()));
  if (overlap)
    return false;
  if (any_acc)
    apply(ex, kernel<contract_all_fn<K, NA, true>>{{}}, out(g[a].raw_view()...), g[a].cview()...,
          ybar[k].cview()..., P[p].cview()...);
  else
    apply(ex, kernel<contract_all_fn<K, NA, false>>{{}}, out(g[a].raw_view()...),
          ybar[k].cview()..., P[p].cview()...);
  return true;
}

template <class T, std::size_t K, class R> auto wrap_outputs(std::array<var<T>, K> const &v) {
  if constexpr (K == 1)
    return v[0];
  else
    return v;
}

template <class T, class A> auto unfused_arg(tape &tp, A const &a) {
  if constexpr (is_tensor_v<A>)
    return tp.constant(a);
  else
    return a;
}

} // namespace detail

// Calls a kernel on tape variables as ONE fused node (see the file comment). Lazy expression
// arguments are materialised first.
template <class F, bool S, class... A>
requires(detail::expr_like<A> || ...) auto fused(policy pol, kernel<F, S> const &k, A const &...a) {
  return fused(pol, k, detail::materialize(a)...);
}
template <class F, bool S, class... A>
requires(!detail::expr_like<A> && ...) auto fused(policy pol, kernel<F, S> const &k,
                                                  A const &...a) {
  using T = typename detail::elem_of_args<A...>::type;
  static_assert(!std::is_void_v<T>,
                "dualcast::fused: give at least one variable or tensor argument");
  static_assert(((is_var_v<A> || is_tensor_v<A> || std::is_arithmetic_v<A>)&&...),
                "dualcast::fused: arguments must be variables, tensors or arithmetic scalars");
  static_assert(((std::is_void_v<typename detail::elem_of<A>::type> ||
                  std::is_same_v<typename detail::elem_of<A>::type, T>)&&...),
                "dualcast::fused: all arrays of one call must have the same element type");
  // static: usable in the nested lambdas below without a capture (g++ 12 wants one otherwise)
  static constexpr int K = detail::check_kernel<F, T, detail::kernel_arg_t<T, A>...>();
  using Active = detail::active_of<A...>;
  static constexpr int NA = Active::count;
  char const *name = "dualcast::fused";
  tape *tp = detail::tape_of(name, a...);
  device dev;
  {
    std::vector<std::pair<int, device>> devs;
    int p = 0;
    auto one = [&](auto const &x) {
      if constexpr (is_var_v<decltype(x)>)
        devs.emplace_back(p, x.value().dev());
      else if constexpr (is_tensor_v<decltype(x)>)
        devs.emplace_back(p, x.dev());
      ++p;
    };
    (one(a), ...);
    dev = detail::common_device(name, devs);
  }
  // The rest runs with the executor of that device (detail/device_dispatch.hpp).
  return detail::on_device(name, dev, tp ? tp->ex : cpu{}, [&](auto const &ex) {
    auto args = std::make_tuple(detail::as_kernel_arg<T>(a)...);
    shape s = std::apply(
        [&](auto const &...x) { return detail::broadcast_args(name, std::tie(x...)); }, args);
    std::array<tensor<T>, K> outs;
    for (auto &o : outs)
      o = tensor<T>::empty(s, dev);

    // The slots of the active inputs (null for variables without gradients).
    std::array<std::shared_ptr<detail::grad_slot<T>>, NA + 1> slots{};
    std::size_t input_bytes = 0;
    {
      int c = 0;
      auto one = [&](auto const &x) {
        if constexpr (is_var_v<decltype(x)>)
          slots[std::size_t(c++)] = x.slot();
        if constexpr (is_var_v<decltype(x)> || is_tensor_v<decltype(x)>)
          input_bytes += std::size_t(x.size()) * sizeof(T);
      };
      (one(a), ...);
    }
    int n_req = 0;
    for (int i = 0; i < NA; ++i)
      n_req += slots[std::size_t(i)] ? 1 : 0;

    auto run_values = [&]<std::size_t... o>(std::index_sequence<o...>) {
      std::apply([&](auto const &...x) { apply(ex, k, out(outs[o].raw_view()...), x...); }, args);
    };
    std::array<var<T>, K> result;
    if (n_req == 0) {
      run_values(std::make_index_sequence<K>{});
      for (int i = 0; i < K; ++i)
        result[std::size_t(i)] = var<T>(outs[std::size_t(i)], nullptr, tp);
      return detail::wrap_outputs<T, K, void>(result);
    }

    if (pol == policy::automatic)
      pol = tp->default_policy;
    if (pol == policy::automatic)
      pol = detail::store_is_cheaper(K, n_req, s.size(), sizeof(T), input_bytes)
                ? policy::store
                : policy::recompute;

    std::array<std::shared_ptr<detail::grad_slot<T>>, K> out_slots;
    for (int i = 0; i < K; ++i) {
      result[std::size_t(i)] = tp->make_output(outs[std::size_t(i)], true);
      out_slots[std::size_t(i)] = result[std::size_t(i)].slot();
    }
    std::vector<std::shared_ptr<detail::grad_slot<T>>> out_vec(out_slots.begin(), out_slots.end());

    if (pol == policy::store) {
      std::array<tensor<T>, std::size_t(K * NA) + 1> parts;
      for (int i = 0; i < K * NA; ++i)
        parts[std::size_t(i)] = tensor<T>::empty(s, dev);
      [&]<std::size_t... o, std::size_t... q>(std::index_sequence<o...>,
                                              std::index_sequence<q...>) {
        std::apply(
            [&](auto const &...x) {
              apply(ex, k, Active{}, out(outs[o].raw_view()...), out(parts[q].raw_view()...), x...);
            },
            args);
      }
      (std::make_index_sequence<K>{}, std::make_index_sequence<std::size_t(K * NA)>{});
      for (int a2 = 0; a2 < NA; ++a2) // partials of inputs without gradients are not kept
        if (!slots[std::size_t(a2)])
          for (int k2 = 0; k2 < K; ++k2)
            parts[std::size_t(k2 * NA + a2)] = tensor<T>{};
      auto &n =
          tp->record<T>("fused elementwise (store)", out_vec, [ex, s, slots, out_slots, parts] {
            std::array<tensor<T>, K> ybar;
            for (int k2 = 0; k2 < K; ++k2)
              ybar[std::size_t(k2)] = tape::out_grad(out_slots[std::size_t(k2)]);
            if constexpr (NA > 1)
              if (detail::contract_all<T, K, NA>(ex, slots, s, ybar, parts,
                                                 std::make_index_sequence<std::size_t(NA)>{},
                                                 std::make_index_sequence<std::size_t(K)>{},
                                                 std::make_index_sequence<std::size_t(K * NA)>{}))
                return;
            for (int a2 = 0; a2 < NA; ++a2) {
              if (!slots[std::size_t(a2)])
                continue;
              std::array<view<T const>, 2 * std::size_t(K)> v;
              for (int k2 = 0; k2 < K; ++k2) {
                v[std::size_t(2 * k2)] = ybar[std::size_t(k2)].cview();
                v[std::size_t(2 * k2 + 1)] = parts[std::size_t(k2 * NA + a2)].cview();
              }
              detail::contract_into<T, K>(ex, *slots[std::size_t(a2)], s, v,
                                          std::make_index_sequence<2 * std::size_t(K)>{});
            }
          });
      for (int i = 0; i < K * NA; ++i)
        tape::save(n, parts[std::size_t(i)], "partial " + std::to_string(i));
    } else {
      run_values(std::make_index_sequence<K>{});
      // Keeps the array inputs alive (and version-checked) for the re-evaluation.
      std::vector<tensor<T>> keep;
      std::vector<std::string> what;
      {
        int p = 0;
        auto one = [&](auto const &x) {
          if constexpr (is_var_v<decltype(x)>)
            keep.push_back(x.value()), what.push_back("argument " + std::to_string(p));
          if constexpr (is_tensor_v<decltype(x)>)
            keep.push_back(x), what.push_back("argument " + std::to_string(p));
          ++p;
        };
        (one(a), ...);
      }
      auto &n = tp->record<T>(
          "fused elementwise (recompute)", out_vec, [ex, dev, k, slots, out_slots, args, keep] {
            std::array<tensor<T>, K> ybar;
            for (int k2 = 0; k2 < K; ++k2)
              ybar[std::size_t(k2)] = tape::out_grad(out_slots[std::size_t(k2)]);
            // Targets: the slots' gradients; a temporary for inputs without gradients, for
            // repeated variables (the same variable passed twice) and for gradients that overlap
            // an earlier target (overlapping slices of one variable), added afterwards.
            std::array<tensor<T>, NA + 1> target;
            std::array<bool, NA + 1> temp{};
            bool any_acc = false, any_fresh_direct = false;
            std::array<bool, NA + 1> fresh{};
            for (int a2 = 0; a2 < NA; ++a2) {
              auto const &sl = slots[std::size_t(a2)];
              bool repeated = false;
              for (int b = 0; b < a2; ++b)
                repeated = repeated || (sl && slots[std::size_t(b)] == sl);
              if (!sl || repeated) {
                temp[std::size_t(a2)] = true;
                continue;
              }
              auto [g, acc] = tape::grad_target(*sl);
              bool overlapping = false;
              for (int b = 0; b < a2; ++b)
                overlapping =
                    overlapping || (!temp[std::size_t(b)] &&
                                    detail::overlaps(target[std::size_t(b)].cview(), g.cview()));
              if (overlapping) {
                temp[std::size_t(a2)] = true;
                continue;
              }
              target[std::size_t(a2)] = g;
              fresh[std::size_t(a2)] = !acc;
              any_acc = any_acc || acc;
              any_fresh_direct = any_fresh_direct || !acc;
            }
            std::array<shape, sizeof...(A)> in_shapes;
            {
              int p = 0;
              std::apply(
                  [&](auto const &...x) {
                    ((in_shapes[std::size_t(p++)] =
                          [&] {
                            if constexpr (is_view_v<decltype(x)>)
                              return x.dims();
                            else
                              return shape{};
                          }()),
                     ...);
                  },
                  args);
            }
            for (int a2 = 0; a2 < NA; ++a2) {
              shape const &xs = in_shapes[std::size_t(Active::positions[a2])];
              if (temp[std::size_t(a2)])
                target[std::size_t(a2)] =
                    any_acc ? tensor<T>::zeros(xs, dev) : tensor<T>::empty(xs, dev);
              else if (any_acc && fresh[std::size_t(a2)])
                target[std::size_t(a2)].assign_raw(tensor<T>::zeros(shape{}, dev));
            }
            [&]<std::size_t... q, std::size_t... k2>(std::index_sequence<q...>,
                                                     std::index_sequence<k2...>) {
              auto inputs = std::apply([](auto const &...x) { return in(x...); }, args);
              vjp(ex, k, Active{}, out(target[q].raw_view()...), inputs, in(ybar[k2].cview()...),
                  any_acc);
            }
            (std::make_index_sequence<std::size_t(NA)>{},
             std::make_index_sequence<std::size_t(K)>{});
            for (int a2 = 0; a2 < NA; ++a2)
              if (temp[std::size_t(a2)] && slots[std::size_t(a2)])
                tape::accumulate_grad(slots[std::size_t(a2)], target[std::size_t(a2)]);
          });
      for (std::size_t i = 0; i < keep.size(); ++i)
        tape::save(n, keep[i], what[i]);
    }
    return detail::wrap_outputs<T, K, void>(result);
  });
}

template <class F, bool S, class... A>
requires(!std::is_same_v<std::remove_cvref_t<A>, policy> && ...) auto fused(kernel<F, S> const &k,
                                                                            A const &...a) {
  return fused(policy::automatic, k, a...);
}

} // namespace dualcast

#include <dualcast/ops/expression.hpp> // lazy operators and math on variables

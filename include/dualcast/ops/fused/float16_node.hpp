// dualcast/ops/fused/float16_node.hpp: the fused node over bfloat16 / half variables that reads
// and writes 16-bit storage itself (no cast nodes, no float copies of the operands).
//
// Forward runs ONE values pass (dualcast::apply) over the arguments as they are stored: the kernel
// widens each 16-bit element to float on load, computes in float and rounds each output once on
// store, into 16-bit outputs (float ones where a float array sits beside the 16-bit ones). The
// node saves no partials: backward re-evaluates the kernel on float duals from the 16-bit inputs
// in one VJP pass (dualcast::vjp), so the derivatives are float ones of the rounded inputs,
// never rounded themselves, and the node's tape memory is its bookkeeping plus references to the
// inputs (version-checked), which live anyway. Each variable's contribution is computed in float
// and added in float to its gradient as stored (16 bits for a 16-bit variable: widened, summed,
// rounded once per node), the gradient's precision being its variable's.
//
// Under policy::store (or where the cost model picks it: cost_model.hpp, partials counted at 4
// bytes and the inputs at their stored size) the node stores its partials instead: ONE pass
// writes the 16-bit values and the K * A diagonal partials d y_k / d x_a, in float; backward
// contracts them with the output cotangents, xbar_a += sum_k ybar_k * P[k, a], in float, each
// gradient rounded once. Float partials, not 16-bit ones: the derivative is what the store node
// keeps, and a saturated gate's derivative (1e-4 beside values of 1) rounded to bfloat16's 8 bits
// would be the precision the recompute node does not lose; float gives the recompute node's
// gradients to float rounding, at 4 bytes per partial and element (the float node's own cost).
#pragma once

#include <dualcast/arrays/view_overlap.hpp>
#include <dualcast/broadcast/broadcast.hpp>
#include <dualcast/kernel/detail/kernel_checks.hpp>
#include <dualcast/kernel/kernel.hpp>
#include <dualcast/ops/fused/args.hpp>
#include <dualcast/ops/fused/cost_model.hpp>
#include <dualcast/ops/fused/store_node.hpp>
#include <dualcast/tape/detail/grad_slot.hpp>
#include <dualcast/tape/detail/tape_node.hpp>
#include <dualcast/tape/policy.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/detail/device_dispatch.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace dualcast::detail {

// A fused argument as the 16-bit node keeps it: a variable's stored values with its gradient
// slot (null: no gradient), a tensor's values, a scalar as float.
template <class E> struct f16_var_arg {
  view<E const> v;
  std::shared_ptr<grad_slot<E>> slot;
};
template <class A> auto f16_node_arg(A const &a) {
  if constexpr (is_var_v<A>)
    return f16_var_arg<typename A::value_type>{a.value().cview(), a.slot()};
  else if constexpr (is_tensor_v<A>)
    return a.cview();
  else
    return float(a);
}
template <class X> struct is_f16_var_arg : std::false_type {};
template <class E> struct is_f16_var_arg<f16_var_arg<E>> : std::true_type {};
// What the kernel reads for a kept argument.
template <class X> auto f16_kernel_input(X const &x) {
  if constexpr (is_f16_var_arg<X>::value)
    return x.v;
  else
    return x;
}
// The kernel's view of argument A in float (to count its outputs).
template <class A>
using f16_float_arg_t = std::conditional_t<is_var_v<A> || is_tensor_v<A>, view<float const>, float>;

// Backward's target for one variable: its gradient (written where fresh, added to elsewhere), or
// a temporary of the variable's shape for one without a gradient, one passed twice and one whose
// gradient shares elements with an earlier target (slices of one variable), added afterwards.
template <class E> struct f16_target {
  grad_slot<E> *slot = nullptr;
  tensor<E> temp;
  view<E> v;
  bool add = false;
};

// The variables among the kept arguments, as a tuple of pointers to them.
template <class X> auto f16_vars_of(X const &x) {
  if constexpr (is_f16_var_arg<X>::value)
    return std::tuple<X const *>{&x};
  else
    return std::tuple<>{};
}

// Backward of the 16-bit node: targets made ready in argument order, one VJP pass over the
// 16-bit inputs and output cotangents into them, temporaries added to their gradients.
template <class Active, int K, class Ex, class F, bool S, class Kept, class Out>
void f16_backward(Ex const &ex, kernel<F, S> const &k, Kept const &kept,
                  std::array<std::shared_ptr<grad_slot<Out>>, K> const &os, device const &dev,
                  cpu const &host) {
  auto vars = std::apply([](auto const &...x) { return std::tuple_cat(f16_vars_of(x)...); }, kept);
  auto targets = std::apply(
      [](auto const *...x) {
        return std::make_tuple(
            f16_target<typename std::remove_cvref_t<decltype(x->v)>::value_type>{}...);
      },
      vars);
  [&]<std::size_t... i>(std::index_sequence<i...>) {
    // (i: the variable's position; each sees the targets placed before it)
    auto const place = [&](auto ic) {
      constexpr std::size_t a = decltype(ic)::value;
      auto const &x = *std::get<a>(vars);
      auto &t = std::get<a>(targets);
      using E = typename std::remove_cvref_t<decltype(t.v)>::value_type;
      bool temp = !x.slot;
      [&]<std::size_t... o>(std::index_sequence<o...>) {
        [[maybe_unused]] auto const same = [&](auto oc) {
          constexpr std::size_t b = decltype(oc)::value;
          if constexpr (std::is_same_v<decltype(std::get<b>(vars)->slot), decltype(x.slot)>)
            temp = temp || std::get<b>(vars)->slot == x.slot;
        };
        (same(std::integral_constant<std::size_t, o>{}), ...);
      }
      (std::make_index_sequence<a>{});
      if (!temp) {
        auto [g, acc] = grad_target(*x.slot);
        view<E> const gv = g.raw_view();
        bool overlapping = false;
        [&]<std::size_t... o>(std::index_sequence<o...>) {
          [[maybe_unused]] auto const meets = [&](auto oc) {
            constexpr std::size_t b = decltype(oc)::value;
            auto const &tb = std::get<b>(targets);
            if constexpr (std::is_same_v<decltype(tb.v), view<E>>)
              overlapping = overlapping || (!tb.temp.defined() &&
                                            overlaps(view<E const>(tb.v), view<E const>(gv)));
          };
          (meets(std::integral_constant<std::size_t, o>{}), ...);
        }
        (std::make_index_sequence<a>{});
        if (!overlapping) {
          t.v = gv, t.add = acc;
          return;
        }
      }
      t.slot = x.slot.get();
      t.temp = tensor<E>::empty(x.v.dims(), dev);
      t.v = t.temp.raw_view();
    };
    (place(std::integral_constant<std::size_t, i>{}), ...);
    std::array<tensor<Out>, K> ybar;
    for (int j = 0; j < K; ++j)
      ybar[std::size_t(j)] = out_grad(*os[std::size_t(j)]);
    auto xbar = out(std::get<i>(targets).v...);
    for (std::size_t j = 0; j < sizeof...(i); ++j)
      xbar.add[j] = false;
    ((xbar.add[i] = std::get<i>(targets).add), ...);
    [&]<std::size_t... o>(std::index_sequence<o...>) {
      std::apply(
          [&](auto const &...x) {
            vjp(ex, k, Active{}, xbar, in(f16_kernel_input(x)...), in(ybar[o].cview()...));
          },
          kept);
    }
    (std::make_index_sequence<K>{});
    auto const finish = [&](auto &t) {
      if (t.slot)
        accumulate_grad(*t.slot, t.temp, host);
    };
    (finish(std::get<i>(targets)), ...);
  }
  (std::make_index_sequence<std::tuple_size_v<decltype(vars)>>{});
}

// The element type of a gradient slot (in decltype only).
template <class E> E f16_slot_elem(grad_slot<E> const &);
// The gradient slot of a kept variable (as a tuple element).
template <class X> auto f16_slots_of(X const &x) {
  if constexpr (is_f16_var_arg<X>::value)
    return std::make_tuple(x.slot);
  else
    return std::tuple<>{};
}

// Backward of the 16-bit store node: per variable (each once, its repeated uses added in float),
// xbar [+]= sum_k ybar_k * P[k, a] over the call shape s, straight into its gradient where that
// has the call's shape and the variable is passed once, else into a float temporary summed over
// the broadcast dimensions and rounded into the gradient once.
template <int K, int NA, class Ex, class Out, class Slots>
void f16_store_backward(Ex const &ex, Slots const &slots,
                        std::array<tensor<float>, std::size_t(K *NA)> const &parts, shape const &s,
                        std::array<std::shared_ptr<grad_slot<Out>>, K> const &os,
                        device const &dev) {
  std::array<tensor<Out>, K> ybar;
  for (int j = 0; j < K; ++j)
    ybar[std::size_t(j)] = out_grad(*os[std::size_t(j)]);
  // o [+]= sum_k ybar_k * P[k, a] (contract_fn: pairs ybar_k, P[k, a])
  auto const contract = [&](auto const &o, int a) {
    [&]<std::size_t... i>(std::index_sequence<i...>) {
      auto const arg = [&](auto ic) {
        constexpr std::size_t j = decltype(ic)::value;
        if constexpr (j % 2 == 0)
          return ybar[j / 2].cview();
        else
          return parts[j / 2 * std::size_t(NA) + std::size_t(a)].cview();
      };
      apply(ex, contract_kernel, o, arg(std::integral_constant<std::size_t, i>{})...);
    }
    (std::make_index_sequence<2 * std::size_t(K)>{});
  };
  [&]<std::size_t... a>(std::index_sequence<a...>) {
    auto const one = [&](auto ac) {
      constexpr std::size_t i = decltype(ac)::value;
      auto const &sl = std::get<i>(slots);
      if (!sl)
        return;
      bool earlier = false, later = false; // the same variable passed more than once
      [&]<std::size_t... b>(std::index_sequence<b...>) {
        auto const same = [&](auto bc) {
          constexpr std::size_t j = decltype(bc)::value;
          if constexpr (j != i && std::is_same_v<std::remove_cvref_t<decltype(std::get<j>(slots))>,
                                                 std::remove_cvref_t<decltype(sl)>>) {
            if (std::get<j>(slots) == sl)
              (j < i ? earlier : later) = true;
          }
        };
        (same(std::integral_constant<std::size_t, b>{}), ...);
      }
      (std::make_index_sequence<sizeof...(a)>{});
      if (earlier) // (done with its first use)
        return;
      if (!later && sl->dims == s) {
        auto [g, acc] = grad_target(*sl);
        auto o = out(g.raw_view());
        o.add[0] = acc;
        contract(o, int(i));
        return;
      }
      tensor<float> tmp = tensor<float>::empty(s, dev);
      contract(out(tmp.raw_view()), int(i));
      [&]<std::size_t... b>(std::index_sequence<b...>) {
        auto const add_use = [&](auto bc) {
          constexpr std::size_t j = decltype(bc)::value;
          if constexpr (j > i && std::is_same_v<std::remove_cvref_t<decltype(std::get<j>(slots))>,
                                                std::remove_cvref_t<decltype(sl)>>) {
            if (std::get<j>(slots) == sl) {
              auto o = out(tmp.raw_view());
              o.add[0] = true;
              contract(o, int(j));
            }
          }
        };
        (add_use(std::integral_constant<std::size_t, b>{}), ...);
      }
      (std::make_index_sequence<sizeof...(a)>{});
      auto [g, acc] = grad_target(*sl);
      if constexpr (std::is_same_v<decltype(f16_slot_elem(*sl)), float>)
        reduce_into(ex, s, static_cast<float const *>(tmp.data()), g.raw_view(), acc);
      else
        reduce_into(ex, s, static_cast<float const *>(tmp.data()), view<any_float>(g.raw_view()),
                    acc);
    };
    (one(std::integral_constant<std::size_t, a>{}), ...);
  }
  (std::make_index_sequence<std::size_t(NA)>{});
}

// The 16-bit fused node (see the file comment); Out: the outputs' element type. The caller has
// checked the arguments' types.
template <class Out, class P, class F, bool S, class... A>
auto float16_fused(P, kernel<F, S> const &k, A const &...a) {
  static constexpr int K = check_kernel<F, float, f16_float_arg_t<A>...>();
  using Active = active_of<A...>;
  static constexpr int NA = Active::count;
  using compiled = compiled_nodes<P::kind, K, NA>;
  char const *name = "dualcast::fused";
  tape *tp = tape_of(name, a...);
  // The call's device and shape: its arrays' (all on one device).
  device dev;
  bool first = true;
  std::size_t n_required = 0, input_bytes = 0;
  auto const look = [&](auto const &x) {
    using X = std::remove_cvref_t<decltype(x)>;
    if constexpr (is_var_v<X> || is_tensor_v<X>) {
      auto const &t = [&]() -> auto const & {
        if constexpr (is_var_v<X>)
          return x.value();
        else
          return x;
      }
      ();
      if (first)
        dev = t.dev(), first = false;
      else
        common_device(name, dev, t.dev());
      if constexpr (is_var_v<X>)
        n_required += x.requires_grad() ? 1 : 0;
      input_bytes += std::size_t(t.dims().size()) * sizeof(typename X::value_type);
    }
  };
  (look(a), ...);
  cpu const host = tp ? tp->ex : ambient_cpu();
  auto const on_stream = tape_stream_scope(tp, dev);
  return on_device(name, dev, host, [&](auto const &ex) {
    auto kept = std::make_tuple(f16_node_arg(a)...);
    // The call's shape: the array arguments' shapes broadcast together (positions for messages).
    std::array<shape, sizeof...(A)> shapes;
    std::array<int, sizeof...(A)> pos;
    int n_shapes = 0, p = 0;
    auto const shape_of = [&](auto const &x) {
      using X = std::remove_cvref_t<decltype(x)>;
      if constexpr (is_var_v<X>)
        shapes[std::size_t(n_shapes)] = x.dims(), pos[std::size_t(n_shapes++)] = p;
      else if constexpr (is_tensor_v<X>)
        shapes[std::size_t(n_shapes)] = x.dims(), pos[std::size_t(n_shapes++)] = p;
      ++p;
    };
    (shape_of(a), ...);
    shape const s =
        broadcast_shapes(name, static_cast<shape const *>(shapes.data()), pos.data(), n_shapes);
    std::array<tensor<Out>, K> outs;
    for (auto &o : outs)
      o = tensor<Out>::empty(s, dev);
    auto const values = [&] {
      [&]<std::size_t... o>(std::index_sequence<o...>) {
        std::apply(
            [&](auto const &...x) {
              apply(ex, k, out(outs[o].raw_view()...), f16_kernel_input(x)...);
            },
            kept);
      }
      (std::make_index_sequence<K>{});
    };
    std::array<var<Out>, K> result;
    if (!tp || n_required == 0 || !tp->grad_enabled()) {
      values();
      for (int i = 0; i < K; ++i)
        result[std::size_t(i)] = var<Out>(outs[std::size_t(i)], nullptr, tp);
      return wrap_outputs(result);
    }
    std::array<std::shared_ptr<grad_slot<Out>>, K> out_slots;
    for (int i = 0; i < K; ++i) {
      result[std::size_t(i)] = tp->make_output(outs[std::size_t(i)], true);
      out_slots[std::size_t(i)] = result[std::size_t(i)].slot();
    }
    policy_kind const chosen = choose_policy(P::kind, tp->default_policy, compiled::store, K,
                                             int(n_required), s.size(), sizeof(float), input_bytes);
    if constexpr (compiled::store) {
      if (chosen == policy_kind::store || !compiled::recompute) {
        // ONE pass: the values and the float partials (output-major: k * NA + a)
        std::array<tensor<float>, std::size_t(K * NA)> parts;
        for (auto &q : parts)
          q = tensor<float>::empty(s, dev);
        [&]<std::size_t... o, std::size_t... q>(std::index_sequence<o...>,
                                                std::index_sequence<q...>) {
          std::apply(
              [&](auto const &...x) {
                apply(ex, k, Active{}, out(outs[o].raw_view()...), out(parts[q].raw_view()...),
                      f16_kernel_input(x)...);
              },
              kept);
        }
        (std::make_index_sequence<K>{}, std::make_index_sequence<std::size_t(K * NA)>{});
        auto slots =
            std::apply([](auto const &...x) { return std::tuple_cat(f16_slots_of(x)...); }, kept);
        // (the partials of variables without a gradient are not kept)
        std::size_t n_kept = 0;
        [&]<std::size_t... v>(std::index_sequence<v...>) {
          auto const drop = [&](auto vc) {
            constexpr std::size_t i = decltype(vc)::value;
            for (int j = 0; j < K; ++j)
              if (!std::get<i>(slots))
                parts[std::size_t(j * NA) + i] = tensor<float>();
              else
                ++n_kept;
          };
          (drop(std::integral_constant<std::size_t, v>{}), ...);
        }
        (std::make_index_sequence<std::size_t(NA)>{});
        arena_array<saved_tensor> saves(tp->node_memory(), n_kept);
        for (std::size_t j = 0, q = 0; q < parts.size(); ++q)
          if (parts[q].defined())
            saves[j++] = save(parts[q], "partial", int(q));
        tp->record_static<Out, K>(
            "fused elementwise (16-bit storage, store)", out_slots,
            [ex, slots, parts, s, dev](std::array<std::shared_ptr<grad_slot<Out>>, K> const &os) {
              f16_store_backward<K, NA>(ex, slots, parts, s, os, dev);
            },
            std::move(saves));
        return wrap_outputs(result);
      }
    }
    values();
    // The array arguments, version-checked (an operand changed in place before backward throws).
    std::size_t n_arrays = 0;
    auto const count = [&](auto const &x) {
      using X = std::remove_cvref_t<decltype(x)>;
      n_arrays += (is_var_v<X> || is_tensor_v<X>) ? 1 : 0;
    };
    (count(a), ...);
    arena_array<saved_tensor> saves(tp->node_memory(), n_arrays);
    {
      std::size_t j = 0;
      int i = 0;
      auto const keep = [&](auto const &x) {
        using X = std::remove_cvref_t<decltype(x)>;
        if constexpr (is_var_v<X>)
          saves[j++] = save(x.value(), "argument", i);
        else if constexpr (is_tensor_v<X>)
          saves[j++] = save(x, "argument", i);
        ++i;
      };
      (keep(a), ...);
    }
    tp->record_static<Out, K>(
        "fused elementwise (16-bit storage)", out_slots,
        [ex, k, kept, dev, host](std::array<std::shared_ptr<grad_slot<Out>>, K> const &os) {
          f16_backward<Active, K>(ex, k, kept, os, dev, host);
        },
        std::move(saves));
    return wrap_outputs(result);
  });
}

} // namespace dualcast::detail

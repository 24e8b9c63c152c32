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
#pragma once

#include <dualcast/arrays/view_overlap.hpp>
#include <dualcast/broadcast/broadcast.hpp>
#include <dualcast/kernel/detail/kernel_checks.hpp>
#include <dualcast/kernel/kernel.hpp>
#include <dualcast/ops/fused/args.hpp>
#include <dualcast/tape/detail/grad_slot.hpp>
#include <dualcast/tape/detail/tape_node.hpp>
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

// The 16-bit fused node (see the file comment); Out: the outputs' element type. The caller has
// checked the arguments' types.
template <class Out, class P, class F, bool S, class... A>
auto float16_fused(P, kernel<F, S> const &k, A const &...a) {
  static constexpr int K = check_kernel<F, float, f16_float_arg_t<A>...>();
  using Active = active_of<A...>;
  char const *name = "dualcast::fused";
  tape *tp = tape_of(name, a...);
  // The call's device and shape: its arrays' (all on one device).
  device dev;
  bool first = true;
  std::size_t n_required = 0;
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
    [&]<std::size_t... o>(std::index_sequence<o...>) {
      std::apply(
          [&](auto const &...x) {
            apply(ex, k, out(outs[o].raw_view()...), f16_kernel_input(x)...);
          },
          kept);
    }
    (std::make_index_sequence<K>{});
    std::array<var<Out>, K> result;
    if (!tp || n_required == 0 || !tp->grad_enabled()) {
      for (int i = 0; i < K; ++i)
        result[std::size_t(i)] = var<Out>(outs[std::size_t(i)], nullptr, tp);
      return wrap_outputs(result);
    }
    std::array<std::shared_ptr<grad_slot<Out>>, K> out_slots;
    for (int i = 0; i < K; ++i) {
      result[std::size_t(i)] = tp->make_output(outs[std::size_t(i)], true);
      out_slots[std::size_t(i)] = result[std::size_t(i)].slot();
    }
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

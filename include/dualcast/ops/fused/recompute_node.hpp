// dualcast/ops/fused/recompute_node.hpp: the fused node under policy::recompute. Forward runs
// ONE values-only pass and keeps (references to) the inputs; backward re-evaluates the kernel on
// duals in one VJP pass (dualcast::vjp), so the node holds no partial arrays: its tape memory is
// the inputs it saved, which usually live anyway.
#pragma once

#include <dualcast/broadcast.hpp>
#include <dualcast/detail/grad_slot.hpp>
#include <dualcast/kernel.hpp>
#include <dualcast/tape.hpp>
#include <dualcast/tensor.hpp>
#include <dualcast/view_overlap.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <tuple>
#include <utility>

namespace dualcast::detail {

// Forward and recording of a recompute node (the arguments as for store_node); `keep` are the
// array inputs' tensors, kept alive and version-checked for the re-evaluation.
template <class T, int K, class Active, class Ex, class F, bool S, class Args, std::size_t NK>
void recompute_node(Ex const &ex, cpu const &host, tape &tp, kernel<F, S> const &k,
                    Args const &args, device const &dev, std::array<tensor<T>, K> const &outs,
                    std::array<std::shared_ptr<grad_slot<T>>, Active::count + 1> const &slots,
                    std::array<std::shared_ptr<grad_slot<T>>, K> const &out_slots,
                    std::array<tensor<T>, NK> const &keep) {
  constexpr int NA = Active::count;
  [&]<std::size_t... o>(std::index_sequence<o...>) {
    std::apply([&](auto const &...x) { apply(ex, k, out(outs[o].raw_view()...), x...); }, args);
  }
  (std::make_index_sequence<K>{});
  std::array<saved_tensor, NK + 1> saves;
  std::size_t n_saves = 0;
  for (std::size_t i = 0; i < NK; ++i)
    if (keep[i].defined())
      saves[n_saves++] = save(keep[i], "argument", int(i));
  tp.record<T, K>(
      "fused elementwise (recompute)", out_slots,
      [ex, host, dev, k, slots, out_slots, args, keep] {
        std::array<tensor<T>, K> ybar;
        for (int k2 = 0; k2 < K; ++k2)
          ybar[std::size_t(k2)] = out_grad(*out_slots[std::size_t(k2)]);
        // Targets: the slots' gradients, written where fresh and added to elsewhere; a temporary
        // for inputs without gradients, for repeated variables (the same variable passed twice)
        // and for gradients that overlap an earlier target (overlapping slices of one variable),
        // added afterwards.
        std::array<tensor<T>, NA + 1> target;
        std::array<bool, NA + 1> temp{}, add{};
        for (int a2 = 0; a2 < NA; ++a2) {
          auto const &sl = slots[std::size_t(a2)];
          bool repeated = false;
          for (int b = 0; b < a2; ++b)
            repeated = repeated || (sl && slots[std::size_t(b)] == sl);
          if (!sl || repeated) {
            temp[std::size_t(a2)] = true;
            continue;
          }
          auto [g, acc] = grad_target(*sl);
          bool overlapping = false;
          for (int b = 0; b < a2; ++b)
            overlapping =
                overlapping || (!temp[std::size_t(b)] &&
                                overlaps(target[std::size_t(b)].cview(), g.cview()));
          if (overlapping) { // (a view of a base gradient: it holds zeros or sums already)
            temp[std::size_t(a2)] = true;
            continue;
          }
          target[std::size_t(a2)] = g;
          add[std::size_t(a2)] = acc;
        }
        std::array<shape, std::tuple_size_v<Args>> in_shapes;
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
        for (int a2 = 0; a2 < NA; ++a2)
          if (temp[std::size_t(a2)])
            target[std::size_t(a2)] =
                tensor<T>::empty(in_shapes[std::size_t(Active::positions[a2])], dev);
        [&]<std::size_t... q, std::size_t... k2>(std::index_sequence<q...>,
                                                 std::index_sequence<k2...>) {
          auto inputs = std::apply([](auto const &...x) { return in(x...); }, args);
          auto targets = out(target[q].raw_view()...);
          for (int a2 = 0; a2 < NA; ++a2)
            targets.add[std::size_t(a2)] = add[std::size_t(a2)];
          vjp(ex, k, Active{}, targets, inputs, in(ybar[k2].cview()...));
        }
        (std::make_index_sequence<std::size_t(NA)>{},
         std::make_index_sequence<std::size_t(K)>{});
        for (int a2 = 0; a2 < NA; ++a2)
          if (temp[std::size_t(a2)] && slots[std::size_t(a2)])
            accumulate_grad(*slots[std::size_t(a2)], target[std::size_t(a2)], host);
      },
      saves.data(), n_saves);
}

} // namespace dualcast::detail

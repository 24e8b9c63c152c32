// dualcast/ops/fused/recompute_node.hpp: the fused node under policy::recompute. Forward runs
// ONE values-only pass and keeps (references to) the inputs; backward re-evaluates the kernel on
// duals in one VJP pass (dualcast::vjp), so the node holds no partial arrays: its tape memory is
// the inputs it saved, which usually live anyway.
#pragma once

#include <dualcast/broadcast.hpp>
#include <dualcast/detail/grad_slot.hpp>
#include <dualcast/ops/fused/core.hpp>
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

// Forward and recording of a recompute node: `args` are the kernel's arguments (views and
// scalars), `outs` the output values, `core` the node's state (its `keep`: the array inputs,
// version-checked and kept alive for the re-evaluation).
template <class T, int K, class Active, class Ex, class F, bool S, class Args>
void recompute_node(Ex const &ex, tape &tp, kernel<F, S> const &k, Args const &args,
                    std::array<tensor<T>, K> const &outs, fused_core<T> &&core) {
  constexpr int NA = Active::count;
  [&]<std::size_t... o>(std::index_sequence<o...>) {
    std::apply([&](auto const &...x) { apply(ex, k, out(outs[o].raw_view()...), x...); }, args);
  }
  (std::make_index_sequence<K>{});
  auto saves = saves_of(tp.node_memory(), core, "argument");
  std::array<slot_ptr<T>, K> out_slots;
  for (int i = 0; i < K; ++i)
    out_slots[std::size_t(i)] = core.out[std::size_t(i)];
  tp.record<T, K>(
      "fused elementwise (recompute)", out_slots,
      [ex, k, args, c = std::move(core)]() mutable {
        gather_ybar(c);
        prepare_targets(c);
        [&]<std::size_t... q, std::size_t... k2>(std::index_sequence<q...>,
                                                 std::index_sequence<k2...>) {
          auto targets = out(c.target[q].raw_view()...);
          for (int a = 0; a < NA; ++a)
            targets.add[std::size_t(a)] = c.add[std::size_t(a)];
          auto inputs = std::apply([](auto const &...x) { return in(x...); }, args);
          vjp(ex, k, Active{}, targets, inputs, in(c.ybar[k2].cview()...));
        }
        (std::make_index_sequence<std::size_t(NA)>{}, std::make_index_sequence<std::size_t(K)>{});
        finish_targets(c);
      },
      saves.data(), saves.size());
}

} // namespace dualcast::detail

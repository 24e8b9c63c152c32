// dualcast/ops/fused/recompute_node.hpp: the fused node under policy::recompute. Forward runs
// ONE values-only pass and keeps (references to) the inputs; backward re-evaluates the kernel on
// duals in one VJP pass (dualcast::vjp), so the node holds no partial arrays: its tape memory is
// the inputs it saved, which usually live anyway.
#pragma once

#include <dualcast/broadcast.hpp>
#include <dualcast/detail/grad_slot.hpp>
#include <dualcast/kernel.hpp>
#include <dualcast/ops/fused/core.hpp>
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
  using Layout = typename layout_of<Args>::type;
  auto ins = std::apply([](auto const &...x) { return collect_arrays<T>(x...); }, args);
  auto scalars = std::apply([](auto const &...x) { return scalar_table<F>(x...); }, args);
  std::array<view<T>, K> ov;
  for (int i = 0; i < K; ++i)
    ov[std::size_t(i)] = outs[std::size_t(i)].raw_view();
  apply_arrays<values_op<F, Layout, K>, S>(ex, values_op<F, Layout, K>{{k.f, scalars}}, ins, ov,
                                           std::array<bool, K>{}, K, "");
  auto saves = saves_of(tp.node_memory(), core, "argument");
  std::array<slot_ptr<T>, K> out_slots;
  for (int i = 0; i < K; ++i)
    out_slots[std::size_t(i)] = core.out[std::size_t(i)];
  tp.record<T, K>(
      "fused elementwise (recompute)", out_slots,
      [ex, k, ins, scalars, c = std::move(core)]() mutable {
        fused_backward<T> const b(c);
        gather_ybar(c, *b);
        prepare_targets(c, *b);
        std::array<view<T>, NA> xv;
        bool add[Active::count > 0 ? Active::count : 1]; // (clang 14: NA here would need a capture)
        for (int a = 0; a < NA; ++a) {
          xv[std::size_t(a)] = b->target[std::size_t(a)];
          add[a] = b->add[std::size_t(a)] != 0;
        }
        std::array<view<T const>, K> yv;
        for (int i = 0; i < K; ++i)
          yv[std::size_t(i)] = b->ybar[std::size_t(i)].cview();
        vjp_arrays<S, F, Layout, K, Active>(ex, k, ins, scalars, xv, add, yv);
        finish_targets(c, *b);
      },
      saves.data(), saves.size());
}

} // namespace dualcast::detail

// dualcast/ops/fused/recompute_node.hpp: the fused node under policy::recompute. Forward runs
// ONE values-only pass and keeps (references to) the inputs; backward re-evaluates the kernel on
// duals in one VJP pass (dualcast::vjp), so the node holds no partial arrays: its tape memory is
// the inputs it saved, which usually live anyway.
#pragma once

#include <dualcast/arrays/view_overlap.hpp>
#include <dualcast/broadcast/broadcast.hpp>
#include <dualcast/kernel/kernel.hpp>
#include <dualcast/ops/fused/core.hpp>
#include <dualcast/tape/detail/grad_slot.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace dualcast::detail {

// Whether a node is flat: every array argument and output contiguous with the call's shape s
// (broadcast/broadcast.hpp's apply_flat / vjp_flat then run it on pointers).
template <class T, std::size_t N, std::size_t K>
bool is_flat(array_args<T, N> const &ins, std::array<tensor<T>, K> const &outs, shape const &s) {
  for (auto const &v : ins.views)
    if (!(v.dims() == s) || !v.is_contiguous())
      return false;
  for (auto const &o : outs)
    if (!(o.dims() == s) || !o.is_contiguous())
      return false;
  return true;
}

// The values pass of a fused call into its outputs (fused()'s own, allocated for this call: they
// alias nothing, so the call's aliasing checks are skipped), on pointers when the call is flat:
// fused() with and without gradients. (Out of line: inlined into both of fused()'s branches, it
// made recording 4-6 % slower on the D-LSTM.)
template <class T, int K, class Layout, class Ex, class F, bool S, std::size_t N, class Scalars>
[[gnu::noinline]] void values_pass(Ex const &ex, kernel<F, S> const &k, array_args<T, N> const &ins,
                                   Scalars const &scalars, std::array<tensor<T>, K> const &outs,
                                   shape const &s, bool flat) {
  using values = values_op<F, Layout, K>;
  if (flat) {
    std::array<T const *, N> in;
    std::array<T *, K> ov;
    for (std::size_t i = 0; i < N; ++i)
      in[i] = ins.views[i].data();
    for (int i = 0; i < K; ++i)
      ov[std::size_t(i)] = outs[std::size_t(i)].raw_data();
    apply_flat<values, S>(ex, values{{k.f, scalars}}, in, Layout::array_positions.data(), ov,
                          s.size(), true);
  } else {
    std::array<view<T>, K> ov;
    for (int i = 0; i < K; ++i)
      ov[std::size_t(i)] = outs[std::size_t(i)].raw_view();
    apply_arrays<values, S>(ex, values{{k.f, scalars}}, ins, ov, std::array<bool, K>{}, K, "");
  }
}

// Backward of a recompute node: the gradients' targets made ready, the kernel re-evaluated on
// duals in one VJP pass into them (on pointers when the node and its cotangents are flat), the
// temporaries added to their gradients. The arguments: a flat node's pointers (flat_in), else
// their views (ins).
template <int K, class Active, class Layout, class Ex, class F, bool S, class T, std::size_t N,
          class Scalars>
void recompute_backward(Ex const &ex, kernel<F, S> const &k, fused_core<T> const &c,
                        out_slots_ref<T> out, array_args<T, N> const *ins,
                        std::array<T const *, N> const *flat_in, Scalars const &scalars) {
  constexpr int NA = Active::count;
  fused_backward<T> const b(c, out);
  gather_ybar(*b);
  claim_targets(c, *b);
  std::array<T const *, K> yp;
  index_t ys[K];
  if (flat_in && flat_ybar(c, *b, yp.data(), ys) && place_flat_targets(c, *b)) {
    std::array<T *, NA> xv;
    bool add[NA > 0 ? NA : 1];
    for (int a = 0; a < NA; ++a) {
      xv[std::size_t(a)] = b->flat_target[std::size_t(a)];
      add[a] = b->add[std::size_t(a)] != 0;
    }
    check_flat_targets<T>(c, *b, flat_in->data(), Layout::array_positions.data(), N, yp.data(), ys,
                          K);
    vjp_flat<S, F, Layout, K, Active>(ex, k, *flat_in, scalars, xv, add, yp, ys, c.s.size(), true);
  } else {
    array_args<T, N> rebuilt; // (a flat node whose gradients or cotangents are not)
    if (!ins) {
      for (std::size_t i = 0; i < N; ++i)
        rebuilt.views[i] = view<T const>((*flat_in)[i], c.s),
        rebuilt.pos[i] = Layout::array_positions[i];
      ins = &rebuilt;
    }
    place_targets(c, *b);
    std::array<view<T>, NA> xv;
    bool add[NA > 0 ? NA : 1];
    for (int a = 0; a < NA; ++a) {
      xv[std::size_t(a)] = b->target[std::size_t(a)];
      add[a] = b->add[std::size_t(a)] != 0;
    }
    std::array<view<T const>, K> yv;
    for (int i = 0; i < K; ++i)
      yv[std::size_t(i)] = b->ybar[std::size_t(i)].cview();
    vjp_arrays<S, F, Layout, K, Active>(ex, k, *ins, scalars, xv, add, yv);
  }
  finish_targets(c, *b);
}

// A recompute node's backward: its arguments (a flat node's pointers, else its views packed in the
// tape's memory), scalars and core. One closure for both kinds of node (a closure each made
// test_tape_fused.cpp compile 5 s slower).
template <class T, int K, class Active, class Layout, class Ex, class F, bool S, std::size_t N,
          class Scalars>
struct recompute_closure {
  Ex ex;
  kernel<F, S> k;
  std::array<T const *, N> in;
  void const *views;
  Scalars scalars;
  fused_core<T> c;

  void operator()(std::array<slot_ptr<T>, K> const &os) const {
    out_slots_ref<T> const out{os.data(), os.size()};
    if (!views) {
      recompute_backward<K, Active, Layout>(ex, k, c, out, static_cast<array_args<T, N> *>(nullptr),
                                            &in, scalars);
      return;
    }
    array_args<T, N> a;
    unpack_views<T>(views, a.views.data(), N);
    for (std::size_t i = 0; i < N; ++i)
      a.pos[i] = Layout::array_positions[i];
    recompute_backward<K, Active, Layout>(
        ex, k, c, out, &a, static_cast<std::array<T const *, N> *>(nullptr), scalars);
  }
  // (tape_node.hpp, node::prefetch_records and prefetch) The slot list; the variables' slots and a
  // flat node's arguments.
  void prefetch_records() const { __builtin_prefetch(c.in.begin()); }
  void prefetch() const {
    for (grad_slot<T> const *s : c.in)
      if (s)
        __builtin_prefetch(s);
    if (!views) // (their first two lines: all of an array of a few numbers)
      for (T const *p : in)
        __builtin_prefetch(p), __builtin_prefetch(reinterpret_cast<char const *>(p) + 64);
  }
};

// Forward and recording of a recompute node: `ins` are the kernel's array arguments (views),
// `scalars` its scalar table (Layout: where each argument comes from), `outs` the output values,
// `core` the node's state (its saves: the array inputs, version-checked and kept alive for the
// re-evaluation), `s` the call's shape (core.s, as a shape). A flat node keeps its arguments as
// pointers (its views are rebuilt from them, with the call's shape, if backward needs them).
template <class T, int K, class Active, class Layout, class Ex, class F, bool S, std::size_t N,
          class Scalars>
void recompute_node(Ex const &ex, tape &tp, kernel<F, S> const &k, array_args<T, N> const &ins,
                    Scalars const &scalars, std::array<tensor<T>, K> const &outs,
                    std::array<slot_ptr<T>, K> out_slots, fused_core<T> &&core,
                    arena_array<saved_tensor> &&saves, shape const &s) {
  // A flat node's arguments as pointers, any other's views packed in the tape's memory.
  std::array<T const *, N> in{};
  void const *views = nullptr;
  bool const flat = is_flat(ins, outs, s);
  values_pass<T, K, Layout>(ex, k, ins, scalars, outs, s, flat);
  if (flat)
    for (std::size_t i = 0; i < N; ++i)
      in[i] = ins.views[i].data();
  else
    views = pack_views<T>(tp.node_memory(), ins.views.data(), N);
  tp.record_static<T, K>("fused elementwise (recompute)", out_slots,
                         recompute_closure<T, K, Active, Layout, Ex, F, S, N, Scalars>{
                             ex, k, in, views, scalars, std::move(core)},
                         std::move(saves));
}

} // namespace dualcast::detail

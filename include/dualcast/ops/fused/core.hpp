// dualcast/ops/fused/core.hpp: the part of a fused node that does not depend on its kernel -- the
// arguments with their types erased, the gradient slots, the tensors kept for backward, the
// targets backward writes -- in functions compiled once per element type. What remains in the
// kernel-typed node code is the fused pass itself, so a kernel with 40 inputs costs little more to
// compile than one with 4.
#pragma once

#include <dualcast/arrays/compact_shape.hpp>
#include <dualcast/arrays/view_overlap.hpp>
#include <dualcast/broadcast/detail/call_checks.hpp>
#include <dualcast/core/compiled.hpp>
#include <dualcast/tape/detail/arena.hpp>
#include <dualcast/tape/detail/grad_slot.hpp>
#include <dualcast/tape/detail/tape_node.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/detail/device_dispatch.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

namespace dualcast::detail {

// One argument of a fused call: a variable, a tensor (a constant) or a scalar (both null).
template <class T> struct arg_ref {
  var<T> const *v = nullptr;
  tensor<T> const *t = nullptr;
  tensor<T> const *value() const { return v ? &v->value() : t; }
};
template <class T, class A> arg_ref<T> ref_of(A const &a) {
  if constexpr (is_var_v<A>)
    return {&a, nullptr};
  else if constexpr (is_tensor_v<A>)
    return {nullptr, &a};
  else
    return {};
}

// What fused() learns from its arguments before running anything.
struct fused_args_info {
  device dev;
  int n_vars = 0, n_required = 0; // variables; those that require gradients
  std::size_t input_bytes = 0;    // of the array arguments
};
template <class T>
[[gnu::noinline]] fused_args_info inspect_args(char const *op, arg_ref<T> const *r, std::size_t n) {
  fused_args_info info;
  bool first = true;
  int first_pos = 0;
  for (std::size_t i = 0; i < n; ++i) {
    tensor<T> const *t = r[i].value();
    if (!t)
      continue;
    if (first) {
      info.dev = t->dev(), first_pos = int(i), first = false;
    } else if (!(t->dev() == info.dev)) {
      devices_differ(op, first_pos, info.dev, int(i), t->dev());
    }
    info.input_bytes += std::size_t(t->size()) * sizeof(T);
    if (r[i].v) {
      ++info.n_vars;
      info.n_required += r[i].v->requires_grad() ? 1 : 0;
    }
  }
  return info;
}

template <class T> using slot_ptr = std::shared_ptr<grad_slot<T>>;

// A node's output slots, read where its node (tape_node.hpp's fn_node, which holds them) hands
// them to backward (kept in the backward's scratch, fused_scratch): not a copy per node.
template <class T> struct out_slots_ref {
  slot_ptr<T> const *p = nullptr;
  std::size_t n = 0;
  std::size_t size() const { return n; }
  slot_ptr<T> const &operator[](std::size_t i) const { return p[i]; }
};

// The kernel-independent state of a recorded fused node.
//
// Its input slots are plain pointers, not owning ones (8 bytes each where a shared_ptr takes 16:
// 88 bytes of an 11-input LSTM cell's node, issue 36): an intermediate's slot is owned by the
// node that computed it, which lives on the same tape at least as long as this one (both go at
// tape::clear()), and a leaf's is held by the tape from its first use in a generation until
// clear() (tape::hold_leaf, from check_graph_alive, which fused() runs on every variable).
template <class T> struct fused_core {
  arena_array<grad_slot<T> *> in; // the variables' slots in argument order (null: no gradient)
  arena_array<shape> in_shape;    // the shapes of the variables without a slot, in order (a slot
                                  // knows its variable's shape)
  // A store node's partial arrays d y_k / d x_a of the variables with a gradient, each of the
  // call's shape, in ONE block (output-major, partial_at; saved by the node, which keeps it): a
  // tensor each cost 160 bytes of bookkeeping and an allocation, 3.8 KiB for an 11-input cell
  // with two outputs.
  T *partials = nullptr;
  device dev;
  cpu host;
  compact_shape s; // the call's iteration shape (arrays/compact_shape.hpp: 16 bytes, not 72)
};

// The core of a node over the arguments r (n of them), every array in the tape's memory; `saves`
// (what the node will save, version-checked: taken over by the tape's node when it is recorded)
// holds the array arguments when keep_inputs (a recompute node; one per storage, its index the
// position of the first argument on it), whose memory they keep alive for the re-evaluation,
// which reads them through the node's pointers or views.
template <class T>
[[gnu::noinline]] fused_core<T> make_core(arena &mem, arg_ref<T> const *r, std::size_t n,
                                          arena_array<saved_tensor> &saves, bool keep_inputs,
                                          device const &dev, cpu const &host, shape const &s) {
  std::size_t nv = 0, unslotted = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (r[i].v) {
      ++nv;
      unslotted += r[i].v->slot() ? 0 : 1;
    }
  }
  fused_core<T> c{arena_array<grad_slot<T> *>(mem, nv),
                  arena_array<shape>(mem, unslotted),
                  nullptr,
                  dev,
                  host,
                  s};
  for (std::size_t i = 0, a = 0, u = 0; i < n; ++i)
    if (r[i].v) {
      c.in[a++] = r[i].v->slot().get();
      if (!r[i].v->slot())
        c.in_shape[u++] = r[i].v->dims();
    }
  // One save per storage: a version belongs to the storage, so arguments that share one (the
  // D-LSTM's eight weights, slices of one parameter) need one check and one reference, named by
  // the first of them (the one an error names).
  if (!keep_inputs) {
    saves = arena_array<saved_tensor>(mem, 0);
    return c;
  }
  constexpr std::size_t inline_n = 64; // (more arguments: each saved)
  storage const *st[inline_n];         // the distinct storages so far
  bool first_on_storage[inline_n] = {};
  std::size_t distinct = 0;
  for (std::size_t i = 0; i < n; ++i) {
    tensor<T> const *t = r[i].value();
    bool first = t != nullptr;
    if (first && i < inline_n) {
      storage const *const s = t->store().get();
      first = !among(st, std::min(distinct, inline_n), s);
      if (first && distinct < inline_n)
        st[distinct] = s;
      first_on_storage[i] = first;
    }
    distinct += first ? 1 : 0;
  }
  saves = arena_array<saved_tensor>(mem, distinct);
  for (std::size_t i = 0, j = 0; i < n; ++i)
    if (tensor<T> const *t = r[i].value(); t && (i >= inline_n || first_on_storage[i]))
      saves[j++] = save(*t, "argument", int(i));
  return c;
}

// Whether variable a has a gradient and is its first use in the node: a store node keeps partials
// for those only, a variable passed twice (x * x on the CPU) getting ONE partial array, the sum of
// its uses' (store_node.hpp: merge_repeated).
template <class T> bool kept_partial(fused_core<T> const &c, std::size_t a) {
  if (!c.in[a])
    return false;
  for (std::size_t o = 0; o < a; ++o)
    if (c.in[o] == c.in[a])
      return false;
  return true;
}
// The number of variables before `end` whose partials a store node keeps.
template <class T> std::size_t slotted_count(fused_core<T> const &c, std::size_t end) {
  std::size_t n = 0;
  for (std::size_t a = 0; a < end; ++a)
    n += kept_partial(c, a) ? 1 : 0;
  return n;
}
// A store node's kept partial d y_k / d x_a (kept_partial(c, a)) as a view of the call's shape.
template <class T> view<T> partial_at(fused_core<T> const &c, std::size_t k, std::size_t a) {
  std::size_t const len = std::size_t(c.s.size());
  std::size_t const i = k * slotted_count(c, c.in.size()) + slotted_count(c, a);
  return view<T>(c.partials + i * len, c.s);
}
// The first use of variable a in the node (a itself unless it is passed twice).
template <class T> std::size_t first_use(fused_core<T> const &c, std::size_t a) {
  for (std::size_t o = 0; o < a; ++o)
    if (c.in[o] == c.in[a])
      return o;
  return a;
}

// A non-flat recompute node's argument views, packed in the tape's memory: each view's data
// pointer, then its rank, extents and strides (8 + 8 + 16 * rank bytes where a view takes 144:
// 1.7 KiB of a 12-argument node, as lazy expressions whose repeated leaves are deduplicated are).
template <class T>
[[gnu::noinline]] void const *pack_views(arena &mem, view<T const> const *v, std::size_t n) {
  std::size_t words = 0;
  for (std::size_t i = 0; i < n; ++i)
    words += 1 + 2 * std::size_t(v[i].rank());
  auto *p = static_cast<T const **>(
      mem.allocate(n * sizeof(T const *) + words * sizeof(index_t), alignof(index_t)));
  auto *w = reinterpret_cast<index_t *>(p + n);
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = v[i].data();
    *w++ = v[i].rank();
    for (int d = 0; d < v[i].rank(); ++d)
      *w++ = v[i].extent(d);
    for (int d = 0; d < v[i].rank(); ++d)
      *w++ = v[i].stride(d);
  }
  return p;
}
template <class T>
[[gnu::noinline]] void unpack_views(void const *packed, view<T const> *v, std::size_t n) {
  auto const *p = static_cast<T const *const *>(packed);
  auto const *w = reinterpret_cast<index_t const *>(p + n);
  for (std::size_t i = 0; i < n; ++i) {
    shape s;
    s.rank = int(*w++);
    for (int d = 0; d < s.rank; ++d)
      s.ext[d] = *w++;
    v[i] = view<T const>(p[i], s, w);
    w += s.rank;
  }
}

// Backward's scratch for a fused node: one target per variable, whether it is added to or a
// temporary, and the outputs' cotangents. Not part of the node: a recorded node would otherwise
// carry these tensors (160 bytes each, 2 KiB for an 11-input cell) through the whole forward
// pass only to use them while its backward runs; one set per thread and element type is reused
// from node to node (a fused node's backward never runs another's). The guard empties it after
// each node, also when backward throws, so it holds no memory in between.
template <class T> struct fused_scratch {
  std::vector<view<T>> target;  // the gradients' views (their slots keep them alive) or temp's
  std::vector<T *> flat_target; // the same as pointers, for a flat node
  std::vector<tensor<T>> temp_tensor, ybar;
  std::vector<char> add, temp;
  out_slots_ref<T> out; // the node's output slots
};
template <class T> class fused_backward {
public:
  // (Defined below the class: not inline, so that the compiled component can hold them.)
  fused_backward(fused_core<T> const &c, out_slots_ref<T> out);
  fused_backward(fused_backward const &) = delete;
  fused_backward &operator=(fused_backward const &) = delete;
  ~fused_backward();
  fused_scratch<T> &operator*() const { return s_; }
  fused_scratch<T> *operator->() const { return &s_; }

private:
  static fused_scratch<T> &scratch() {
    thread_local fused_scratch<T> s;
    return s;
  }
  fused_scratch<T> &s_;
};
template <class T>
fused_backward<T>::fused_backward(fused_core<T> const &c, out_slots_ref<T> out) : s_(scratch()) {
  // The arrays only grow: the steps write every entry below c.in.size() that they read, and
  // resized to each node's inputs, alternating nodes of 10 and 4 (a plain-operator LSTM step)
  // destroyed and made views and tensors at every node.
  std::size_t const na = c.in.size();
  s_.out = out;
  if (s_.target.size() < na) {
    s_.target.resize(na);
    s_.flat_target.resize(na);
    s_.temp_tensor.resize(na);
    s_.add.resize(na);
    s_.temp.resize(na);
  }
  std::fill_n(s_.add.begin(), na, char(0));
  std::fill_n(s_.temp.begin(), na, char(0));
  if (s_.ybar.size() < out.size())
    s_.ybar.resize(out.size());
}
template <class T> fused_backward<T>::~fused_backward() {
  for (auto &t : s_.temp_tensor)
    if (t.defined())
      t = tensor<T>{};
  for (auto &y : s_.ybar)
    y = tensor<T>{};
  s_.out = {};
}

// Backward's first step: the outputs' cotangents (zeros where an output has none).
template <class T> [[gnu::noinline]] void gather_ybar(fused_scratch<T> &b) {
  for (std::size_t k = 0; k < b.out.size(); ++k)
    b.ybar[k] = out_grad(*b.out[k]);
}

// Address intervals [lo, hi) kept four to a vector, each new one tested against all kept ones
// without a branch per pair (for a node's targets: as a plain loop, the vectoriser's
// remainder loop and reduction per test cost more than the pairs; see flat_writes_meet). Up to
// `capacity` intervals; full(): the caller compares the rest itself.
class interval_set {
public:
  static constexpr std::size_t capacity = 64;
  bool full() const { return m_ == capacity; }
  void add(flat_interval r) {
#if defined(__CUDACC__)
    lo_[m_] = std::int64_t(r.lo), hi_[m_] = std::int64_t(r.hi);
#else // (whole vectors, the rest of the last one empty: see put_lane)
    put_lane(lo_, m_, std::int64_t(r.lo)), put_lane(hi_, m_, std::int64_t(r.hi));
#endif
    ++m_;
  }
  // Whether r meets a kept interval (signed compares: see flat_writes_meet).
  bool meets(flat_interval r) const {
#if defined(__CUDACC__) // (no vector constants for nvcc's front end: see flat_writes_meet)
    bool met = false;
    for (std::size_t g = 0; g < m_; ++g)
      met |= std::int64_t(r.lo) < hi_[g] && lo_[g] < std::int64_t(r.hi);
    return met;
#else
    using lanes_t = int64x4;
    lanes_t const rlo = lanes_t{} + std::int64_t(r.lo), rhi = lanes_t{} + std::int64_t(r.hi);
    lanes_t met{};
    for (std::size_t g = 0; g < m_; g += lanes) {
      lanes_t l, h;
      std::memcpy(&l, lo_ + g, sizeof l), std::memcpy(&h, hi_ + g, sizeof h);
      met |= (rlo < h) & (l < rhi);
    }
    return (met[0] | met[1] | met[2] | met[3]) != 0;
#endif
  }

private:
  static constexpr std::size_t lanes = 4;
  alignas(32) std::int64_t lo_[capacity + lanes], hi_[capacity + lanes];
  std::size_t m_ = 0;
};

// The targets of a recompute node's VJP: each variable's gradient, written where fresh and added
// to elsewhere; a temporary for variables without gradients, for a variable passed twice and for
// a gradient that overlaps an earlier target (overlapping slices of one variable), added to the
// gradient afterwards (finish_targets). In two steps: claim_targets makes each gradient ready, in
// argument order (what it does to one slot can depend on the slots before it); place_targets or,
// for a flat node, place_flat_targets then decides where each is written.
template <class T>
[[gnu::noinline]] void claim_targets(fused_core<T> const &c, fused_scratch<T> &b) {
  std::size_t const na = c.in.size();
  for (std::size_t a = 0; a < na; ++a) {
    auto const &sl = c.in[a];
    b.temp[a] = !sl || among(c.in.begin(), a, sl); // (no slot, or a variable passed twice)
    b.add[a] = !b.temp[a] && grad_target_in(*sl);  // (true: add to what the gradient holds)
  }
}
template <class T>
[[gnu::noinline]] void place_targets(fused_core<T> const &c, fused_scratch<T> &b) {
  std::size_t const na = c.in.size();
  // The targets' address ranges, each computed once: most targets are distinct gradients (or
  // disjoint slices of one), which two comparisons settle; the exact test runs where ranges meet.
  constexpr std::size_t inline_ranges = 32;
  extent_range ranges[inline_ranges] = {};
  auto may_overlap = [&](std::size_t o, view<T const> const &g, extent_range rg) {
    if (o < inline_ranges && !ranges_meet(ranges[o], rg))
      return false;
    return overlaps(view<T const>(b.target[o]), g);
  };
  std::size_t unslotted = 0;
  for (std::size_t a = 0; a < na; ++a) {
    auto const &sl = c.in[a];
    shape const sa = sl ? sl->dims.get() : c.in_shape[unslotted++];
    if (!b.temp[a]) {
      view<T> const g = sl->grad->raw_view();
      view<T const> const gv(g);
      extent_range const rg = range_of(gv);
      bool overlapping = false; // (a view of a base gradient: it holds zeros or sums already)
      for (std::size_t o = 0; o < a && !overlapping; ++o)
        overlapping = !b.temp[o] && may_overlap(o, gv, rg);
      if (overlapping)
        b.temp[a] = true, b.add[a] = false;
      else
        b.target[a] = g;
    }
    if (b.temp[a]) {
      b.temp_tensor[a] = tensor<T>::empty(sa, c.dev);
      b.target[a] = b.temp_tensor[a].raw_view();
    }
    if (a < inline_ranges)
      ranges[a] = range_of(view<T const>(b.target[a]));
  }
}

// place_targets for a flat node (every array argument contiguous with the call's shape, so each
// variable's gradient has that shape): the same decisions on pointers (b.flat_target), two
// contiguous arrays overlapping iff their address intervals meet. false, having changed nothing:
// a gradient is strided (a slice of a larger one); place_targets then does it with views.
template <class T>
[[gnu::noinline]] bool place_flat_targets(fused_core<T> const &c, fused_scratch<T> &b) {
  std::size_t const na = c.in.size();
  for (std::size_t a = 0; a < na; ++a)
    if (!b.temp[a] && !c.in[a]->grad.get().is_contiguous())
      return false;
  index_t const len = c.s.size();
  // The placed gradients' intervals, each computed once. A gradient allocated by this backward
  // step (see check_flat_targets) meets none placed before it, so it is only kept (a view's
  // gradient placed after it may be a slice of it).
  interval_set placed;
  for (std::size_t a = 0; a < na; ++a) {
    if (!b.temp[a]) {
      T *const g = c.in[a]->grad->raw_data();
      flat_interval const rg = flat_interval_of<T>(g, len);
      bool const older = b.add[a] || c.in[a]->base();
      bool overlapping = false;
      if (!placed.full()) {
        overlapping = older && placed.meets(rg);
        if (!overlapping)
          placed.add(rg);
      } else {
        for (std::size_t o = 0; o < a; ++o)
          overlapping |=
              !b.temp[o] && intervals_meet(flat_interval_of<T>(b.flat_target[o], len), rg);
      }
      if (overlapping)
        b.temp[a] = true, b.add[a] = false;
      else
        b.flat_target[a] = g;
    }
    if (b.temp[a]) {
      b.temp_tensor[a] = tensor<T>::empty(c.s, c.dev);
      b.flat_target[a] = b.temp_tensor[a].raw_data();
    }
  }
  return true;
}
// check_flat_vjp for a flat node's placed targets (place_flat_targets), on what can break its
// rules: no two targets share an element (place_flat_targets made sure), and a temporary or a
// gradient whose memory the running backward allocated (a view's: its base's, made_by) is memory
// taken while every array the pass reads was alive. Only the other gradients -- a seed's, a
// hook's, one from before this backward -- are compared with the arguments and the cotangents
// (about 300 pairs per D-LSTM node otherwise: 5 % of the GradBench lstm jacobian); where one may
// meet, check_flat_vjp over all names the culprit.
template <class T>
[[gnu::noinline]] void check_flat_targets(fused_core<T> const &c, fused_scratch<T> const &b,
                                          T const *const *in, int const *pos, std::size_t n,
                                          T const *const *y, index_t const *ystride,
                                          std::size_t k) {
  std::size_t const na = c.in.size();
  constexpr std::size_t inline_n = 64;
  T *older[inline_n];
  std::size_t n_older = 0;
  std::uint64_t const now = running_backward();
  for (std::size_t a = 0; a < na && n_older < inline_n; ++a)
    if (!b.temp[a] && (now == 0 || c.in[a]->grad.made_by() != now))
      older[n_older++] = b.flat_target[a];
  if (n_older == 0 && na <= inline_n)
    return;
  index_t const len = c.s.size();
  if (na <= inline_n && !flat_writes_meet<T>(in, n, older, n_older, y, ystride, k, len, true))
    return;
  check_flat_vjp<T>("dualcast::vjp", in, pos, n, b.flat_target.data(), na, y, ystride, k, len);
}
// A flat node's output cotangents as pointers with their strides: 1, or 0 for a missing one (a
// broadcast zero). false: one is laid out otherwise.
template <class T>
[[gnu::noinline]] bool flat_ybar(fused_core<T> const &c, fused_scratch<T> const &b, T const **y,
                                 index_t *stride) {
  for (std::size_t k = 0; k < b.out.size(); ++k) {
    tensor<T> const &t = b.ybar[k];
    if (!(t.dims() == c.s))
      return false;
    bool const zero_strided = [&] {
      for (int d = 0; d < t.rank(); ++d)
        if (t.stride(d) != 0)
          return false;
      return true;
    }();
    if (t.is_contiguous())
      stride[k] = 1;
    else if (zero_strided)
      stride[k] = 0;
    else
      return false;
    y[k] = t.data();
  }
  return true;
}
// Backward's last step: the temporaries added to their gradients.
template <class T>
[[gnu::noinline]] void finish_targets(fused_core<T> const &c, fused_scratch<T> const &b) {
  for (std::size_t a = 0; a < c.in.size(); ++a)
    if (b.temp[a] && c.in[a])
      accumulate_grad(*c.in[a], b.temp_tensor[a], c.host);
}

// A store node's partial arrays: the kept block (c.partials, of the variables with gradients, one
// per distinct variable) and its version check in `saves` (which keeps it); where the forward
// pass writes all K * NA of them (output-major) in `all`, those of variables without gradients
// and of a repeated variable's later uses in the returned tensor, to be dropped afterwards (the
// latter once added to the first use's: merge_repeated).
template <class T>
[[gnu::noinline]] tensor<T> alloc_partials(arena &mem, fused_core<T> &c,
                                           arena_array<saved_tensor> &saves, std::size_t k,
                                           view<T> *all) {
  shape const s = c.s; // (once: each view made from the compact shape made a shape of it)
  std::size_t const na = c.in.size(), len = std::size_t(s.size());
  std::size_t const kept = slotted_count(c, na);
  tensor<T> block = tensor<T>::empty(shape{index_t(k * kept * len)}, c.dev);
  tensor<T> dropped = tensor<T>::empty(shape{index_t(k * (na - kept) * len)}, c.dev);
  c.partials = block.raw_data();
  saves = arena_array<saved_tensor>(mem, 1);
  saves[0] = save(block, "partials");
  for (std::size_t o = 0, u = 0; o < k; ++o)
    for (std::size_t a = 0, j = 0; a < na; ++a)
      all[o * na + a] = kept_partial(c, a)
                            ? view<T>(c.partials + (o * kept + j++) * len, s) // (partial_at)
                            : view<T>(dropped.raw_data() + len * u++, s);
  return dropped;
}

// Compiled once per element type in the compiled component (core/compiled.hpp).
#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE fused_args_info inspect_args<T>(char const *, arg_ref<T> const *,           \
                                                       std::size_t);                               \
  DUALCAST_INSTANTIATE fused_core<T> make_core<T>(arena &, arg_ref<T> const *, std::size_t,        \
                                                  arena_array<saved_tensor> &, bool,               \
                                                  device const &, cpu const &, shape const &);     \
  DUALCAST_INSTANTIATE void const *pack_views<T>(arena &, view<T const> const *, std::size_t);     \
  DUALCAST_INSTANTIATE void unpack_views<T>(void const *, view<T const> *, std::size_t);           \
  DUALCAST_INSTANTIATE void gather_ybar<T>(fused_scratch<T> &);                                    \
  DUALCAST_INSTANTIATE void claim_targets<T>(fused_core<T> const &, fused_scratch<T> &);           \
  DUALCAST_INSTANTIATE void place_targets<T>(fused_core<T> const &, fused_scratch<T> &);           \
  DUALCAST_INSTANTIATE bool place_flat_targets<T>(fused_core<T> const &, fused_scratch<T> &);      \
  DUALCAST_INSTANTIATE void check_flat_targets<T>(fused_core<T> const &, fused_scratch<T> const &, \
                                                  T const *const *, int const *, std::size_t,      \
                                                  T const *const *, index_t const *, std::size_t); \
  DUALCAST_INSTANTIATE bool flat_ybar<T>(fused_core<T> const &, fused_scratch<T> const &,          \
                                         T const **, index_t *);                                   \
  DUALCAST_INSTANTIATE void finish_targets<T>(fused_core<T> const &, fused_scratch<T> const &);    \
  DUALCAST_INSTANTIATE fused_backward<T>::fused_backward(fused_core<T> const &, out_slots_ref<T>); \
  DUALCAST_INSTANTIATE fused_backward<T>::~fused_backward();                                       \
  DUALCAST_INSTANTIATE view<T> partial_at<T>(fused_core<T> const &, std::size_t, std::size_t);     \
  DUALCAST_INSTANTIATE tensor<T> alloc_partials<T>(                                                \
      arena &, fused_core<T> &, arena_array<saved_tensor> &, std::size_t, view<T> *);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X

} // namespace dualcast::detail

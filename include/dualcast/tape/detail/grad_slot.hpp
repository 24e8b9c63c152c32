// dualcast/tape/detail/grad_slot.hpp: the gradient side of a tape variable, and how backward writes
// into it.
//
// Nodes hold slots, never values, so a node keeps alive exactly the tensors it saved. A slot's
// gradient is created lazily by the first operation that writes it, in the cheapest form that
// operation allows: uninitialised when it writes every element (grad_target), zero-filled when it
// writes only some (grad_zeroed). A view variable (a slice) has no gradient of its own: it is the
// same view of its base's gradient, so consumers of the four gate slices of an LSTM write into
// one gradient in place.
#pragma once

#include <dualcast/arrays/compact_shape.hpp>
#include <dualcast/arrays/shape.hpp>
#include <dualcast/arrays/view.hpp>
#include <dualcast/arrays/view_overlap.hpp>
#include <dualcast/backend/device.hpp>
#include <dualcast/backend/seam.hpp>
#include <dualcast/core/compiled.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/tensor/detail/device_dispatch.hpp>
#include <dualcast/tensor/detail/recycling_allocator.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace dualcast::detail {
inline namespace DUALCAST_TAPE_ABI { // see tensor/detail/device_dispatch.hpp

// The backward running on this thread: a serial number (0: none), which the gradients it
// allocates carry (grad_tensor::made_by). Set by tape::backward for its sweep (backward_scope).
inline std::uint64_t &running_backward() {
  thread_local std::uint64_t serial = 0;
  return serial;
}
class backward_scope {
public:
  backward_scope() : outer_(running_backward()) {
    static std::atomic<std::uint64_t> last{0};
    running_backward() = ++last;
  }
  backward_scope(backward_scope const &) = delete;
  backward_scope &operator=(backward_scope const &) = delete;
  ~backward_scope() { running_backward() = outer_; } // (a backward run from a hook of another)

private:
  std::uint64_t outer_;
};

// A slot's gradient: a tensor, held through a pointer to a header made when the gradient is
// (recycled, as the slots' blocks are). A tape's slots are nearly all intermediates, whose
// gradient exists only while backward runs from the node that writes it to the node that reads
// it, so the 160-byte header in every slot was mostly unused (issue 36: it was 160 of a slot's 264
// bytes). Reads as the tensor (an undefined one when there is none); written by assignment.
//
// made_by: the backward (running_backward) whose gradient allocation made the tensor's memory,
// or 0 -- any tensor assigned otherwise (a seed, a hook's, a copy) is 0 until told (made). Such a
// gradient was allocated while every array its node reads was alive, so it shares no element with
// them, and a node's backward skips comparing it with them (check_flat_targets).
template <class T> class grad_tensor {
public:
  grad_tensor() = default;
  grad_tensor(grad_tensor const &) = delete;
  grad_tensor &operator=(grad_tensor const &) = delete;
  ~grad_tensor() { reset(); }

  bool defined() const { return p_ != nullptr; }
  tensor<T> const &get() const { return p_ ? p_->t : none(); }
  operator tensor<T> const &() const { return get(); } // NOLINT(google-explicit-constructor)
  tensor<T> const *operator->() const { return &get(); }
  std::uint64_t made_by() const { return p_ ? p_->made_by : 0; }
  grad_tensor &operator=(tensor<T> const &t) { return set(t, 0); }
  grad_tensor &operator=(tensor<T> &&t) { return set(std::move(t), 0); }
  // t, whose memory the backward `by` allocated as a gradient (or a slice of one).
  void made(tensor<T> &&t, std::uint64_t by) { set(std::move(t), by); }
  // The tensor, leaving none.
  tensor<T> take() {
    if (!p_)
      return tensor<T>{};
    tensor<T> t = std::move(p_->t);
    reset();
    return t;
  }
  void reset() {
    if (!p_)
      return;
    p_->~held();
    recycling_allocator<held>{}.deallocate(p_, 1);
    p_ = nullptr;
  }

private:
  struct held {
    tensor<T> t;
    std::uint64_t made_by;
  };
  template <class U> grad_tensor &set(U &&t, std::uint64_t by) {
    if (!t.defined()) {
      reset();
    } else if (p_) {
      p_->t = static_cast<U &&>(t), p_->made_by = by;
    } else {
      held *p = recycling_allocator<held>{}.allocate(1);
      p_ = ::new (static_cast<void *>(p)) held{tensor<T>(static_cast<U &&>(t)), by};
    }
    return *this;
  }
  static tensor<T> const &none() {
    static tensor<T> const n;
    return n;
  }
  held *p_ = nullptr;
};

template <class T> struct grad_slot {
  compact_shape dims; // (arrays/compact_shape.hpp: 16 bytes, not 72)
  grad_tensor<T> grad;
  // An intermediate's tape generation (tape::clear() starts a new one): the node that computed it
  // lives only while its generation is the tape's.
  std::uint64_t generation = 0;
  device dev;
  bool is_leaf = true;
  bool retain = false; // keep an intermediate's gradient after backward
  // retain was set when the last backward over this slot's node started: an intermediate it left
  // without a gradient was not reached (reads as zeros, like a leaf), rather than not kept.
  bool retained_at_backward = false;
  // grad is a seed given to backward, shared with the caller: read-only until own_grad copies it.
  bool borrowed = false;
  // A base's gradient just created as zeros, and the regions handed out to its views since then
  // (side_state::handed): a view disjoint from all of them still holds zeros, so its first writer
  // may overwrite it.
  bool zeros_outside_views = false;

  // What only leaves, views and the bases of views use, in a side allocation made for those
  // alone: a tape makes two slots per fused node, nearly all intermediates, and these fields were
  // more than half of the slot's 528 bytes (issue 36).
  struct side_state {
    // A leaf's gradient from before the running backward: set aside while backward writes a
    // fresh one into grad, added back when backward succeeds, put back when it throws. held_zero:
    // it is all zeros (zero_grad), so there is nothing to add. replace_held: a gradient hook
    // wrote the leaf's whole gradient (the fresh one and held together) into grad, which
    // backward keeps.
    tensor<T> held;
    bool held_zero = false;
    bool replace_held = false;
    // A leaf's first use in its tape's current generation (use_generation): the index the tape's
    // next node had when an operation first took the leaf. Every node that can write the leaf's
    // gradient comes at or after it, so backward knows when the gradient is final
    // (tape::on_gradient_ready).
    std::uint64_t use_generation = ~std::uint64_t(0);
    std::size_t first_use = 0;
    // The generation in which its tape last took a reference to it (tape::hold_leaf).
    std::uint64_t held_generation = ~std::uint64_t(0);
    // A view variable: its gradient is base->grad.slice(region).
    std::shared_ptr<grad_slot> base;
    struct slice_of_base {
      int dim;
      index_t begin, end, step;
    } region{};
    std::vector<view<T const>> handed; // (see zeros_outside_views)
  };
  std::unique_ptr<side_state> side_;
  side_state &side() {
    if (!side_)
      side_ = std::make_unique<side_state>();
    return *side_;
  }
  // The slot this view's gradient is a slice of; null for a slot that is not a view.
  grad_slot *base() const { return side_ ? side_->base.get() : nullptr; }
};

// A new slot (its control block recycled: tapes make one per operation output).
template <class T> std::shared_ptr<grad_slot<T>> make_slot() {
  return std::allocate_shared<grad_slot<T>>(recycling_allocator<grad_slot<T>>{});
}

// The bytes of the block make_slot allocates (the slot with its control block): a node's
// bookkeeping outside the tape's arena, one per output (tape_memory_tests, bench/tape_overhead).
// Measured with an empty allocator, as recycling_allocator is, that records the size it is asked
// for (the control block's type is the standard library's).
inline std::size_t &slot_probe_bytes() {
  thread_local std::size_t b = 0;
  return b;
}
template <class U> struct slot_size_probe {
  using value_type = U;
  slot_size_probe() = default;
  template <class V> slot_size_probe(slot_size_probe<V> const &) noexcept {}
  U *allocate(std::size_t n) {
    slot_probe_bytes() = n * sizeof(U);
    return std::allocator<U>{}.allocate(n);
  }
  void deallocate(U *p, std::size_t n) noexcept { std::allocator<U>{}.deallocate(p, n); }
  friend bool operator==(slot_size_probe const &, slot_size_probe const &) { return true; }
};
template <class T> std::size_t slot_block_bytes() {
  (void)std::allocate_shared<grad_slot<T>>(slot_size_probe<grad_slot<T>>{});
  return slot_probe_bytes();
}

// Makes a borrowed gradient (a seed, tape::backward) the slot's own before anything writes it.
template <class T> void own_grad(grad_slot<T> &s) {
  if (s.borrowed) {
    s.grad.made(s.grad->clone(), running_backward());
    s.borrowed = false;
  }
}

// Creates s's gradient if it has none: zeros, or for a view the view of its base's gradient
// (created the same way). true: it was created now, holds zeros and no other view of the same
// base shares an element with it (so that its first writer may overwrite it).
template <class T> bool ensure_grad(grad_slot<T> &s) {
  if (s.grad.defined()) {
    own_grad(s);
    return false;
  }
  grad_slot<T> *const base = s.base();
  if (!base) {
    s.grad.made(tensor<T>::zeros(s.dims, s.dev), running_backward());
    s.zeros_outside_views = true;
    if (s.side_)
      s.side_->handed.clear();
    return true;
  }
  ensure_grad(*base);
  auto const &r = s.side_->region;
  s.grad.made(base->grad->slice(r.dim, r.begin, r.end, r.step), base->grad.made_by());
  grad_slot<T> *root = base;
  while (root->base())
    root = root->base();
  if (!root->zeros_outside_views)
    return false;
  auto &handed = root->side().handed;
  bool disjoint = true;
  for (auto const &h : handed)
    disjoint = disjoint && !overlaps(h, s.grad->cview());
  handed.push_back(s.grad->cview());
  return disjoint;
}

// The gradient of a slot for an operation that writes EVERY element, made ready in s.grad (no copy
// of the tensor: a fused node's backward asks this for each of its inputs); returns whether to
// accumulate (false: its elements are free to overwrite -- freshly allocated, or a view into a
// base gradient that was just created as zeros). s.grad may be a strided view (the gradient of a
// slice).
template <class T> bool grad_target_in(grad_slot<T> &s) {
  if (!s.base()) {
    s.zeros_outside_views = false; // written everywhere now
    if (s.grad.defined()) {
      own_grad(s);
      return true;
    }
    s.grad.made(tensor<T>::empty(s.dims, s.dev), running_backward());
    return false;
  }
  if (s.grad.defined())
    return true;
  return !ensure_grad(s);
}
// The same, returning the gradient tensor with the flag.
template <class T> std::pair<tensor<T>, bool> grad_target(grad_slot<T> &s) {
  bool const acc = grad_target_in(s);
  return {s.grad.get(), acc};
}

// The gradient tensor of a slot, zero-initialised if new (for operations that write some
// elements: scatters).
template <class T> tensor<T> grad_zeroed(grad_slot<T> &s) {
  ensure_grad(s);
  if (!s.base())
    s.zeros_outside_views = false;
  return s.grad.get();
}

// grad += g, where g has the slot's shape or a shape the slot broadcasts to (then summed over the
// broadcast dimensions), on the slot's device.
template <class T> void accumulate_grad(grad_slot<T> &s, tensor<T> const &g, cpu const &host) {
  char const *op = "dualcast::tape (gradient accumulation)";
  common_device(op, s.dev, g.dev());
  if (g.dims() == s.dims) {
    auto [t, acc] = grad_target(s);
    if (acc)
      add_into(t, g);
    else
      t.assign_raw(g);
    return;
  }
  if constexpr (is_dual_v<T>) { // (a tape over duals: plain loops, tensor/detail/dual_elements.hpp)
    dual_host_only(op, s.dev);
    auto const target = grad_target(s);
    view<T> const t = target.first.raw_view();
    if (!target.second)
      each_element(
          t.dims(), [](T &y) { y = T(0); }, t);
    each_element(
        g.dims(), [](T &y, T const &x) { y = y + x; }, t.broadcast_to(g.dims()), g.cview());
  } else if constexpr (is_float16_v<T>) {
    // (16-bit gradients: summed over the broadcast dimensions in float, read in 16 bits, and
    // rounded once)
    tensor<T> const gc = g.contiguous();
    auto sum = tensor<float>::empty(s.dims, s.dev);
    on_device(op, s.dev, host, [&](auto const &ex) {
      backend_reduce(hook{}, ex, gc.dims(), static_cast<T const *>(gc.data()), sum.raw_view(),
                     false);
    });
    auto const target = grad_target(s); // (no structured binding: clang 14 cannot capture it)
    tensor<T> const &t = target.first;
    if (target.second)
      on_device(op, s.dev, host, [&](auto const &ex) {
        apply(ex, add_kernel, out(t.raw_view()), t.cview(), sum.cview());
      });
    else
      t.assign_raw(converted<T>(sum, host));
  } else {
    tensor<T> gc = g.contiguous();
    auto const target = grad_target(s);
    on_device(op, s.dev, host, [&](auto const &ex) {
      backend_reduce(hook{}, ex, gc.dims(), static_cast<T const *>(gc.data()),
                     target.first.raw_view(), target.second);
    });
  }
}

// The seed of backward for output slot s: an intermediate's gradient that backward frees after
// its node ran borrows the seed's storage (its nodes only read it; a writer copies it first,
// own_grad) instead of a copy -- 1.4 ms of a 10^7-element cumsum's 8.7 ms backward. A leaf's or a
// kept gradient outlives backward and is the caller's to change, so it gets a copy.
template <class T> void seed_grad(grad_slot<T> &s, tensor<T> const &seed, cpu const &host) {
  if (!s.is_leaf && !s.retain && !s.base() && !s.grad.defined() && seed.dims() == s.dims &&
      seed.dev() == s.dev && seed.is_contiguous()) {
    s.grad = seed;
    s.borrowed = true;
    s.zeros_outside_views = false;
    return;
  }
  accumulate_grad(s, seed, host);
}

// grad += g for a temporary the caller gives up (custom_op's g.add with an rvalue): a fresh whole
// gradient (none yet, not a slice of a base's) takes g's storage itself, instead of a new tensor
// and a copy, when g is contiguous, has the slot's shape and device, and nothing else holds its
// storage. Otherwise as above.
template <class T> void accumulate_grad(grad_slot<T> &s, tensor<T> &&g, cpu const &host) {
  if (!s.base() && !s.grad.defined() && g.dims() == s.dims && g.dev() == s.dev &&
      g.is_contiguous() && g.store() && g.store().use_count() == 1) {
    s.zeros_outside_views = false; // written everywhere now (as grad_target)
    s.grad = std::move(g);
    return;
  }
  accumulate_grad(s, static_cast<tensor<T> const &>(g), host);
}

// The gradient of an output slot, or a zero tensor (stride 0) of its shape when backward did not
// reach it. On the host that zero is one per thread and element type, made again if anything
// wrote to it, so an unreached output costs no allocation.
template <class T> tensor<T> out_grad(grad_slot<T> const &s) {
  if (s.grad.defined())
    return s.grad.get();
  if (s.dev.is_host()) {
    thread_local tensor<T> zero;
    thread_local std::uint64_t version = 0;
    if (!zero.defined() || zero.version() != version) {
      zero = tensor<T>::zeros(shape{});
      version = zero.version();
    }
    return zero.broadcast_to(s.dims);
  }
  return tensor<T>::zeros(shape{}, s.dev).broadcast_to(s.dims);
}

// The compiled component's instantiations (dualcast/core/compiled.hpp).
#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE bool ensure_grad<T>(grad_slot<T> &);                                        \
  DUALCAST_INSTANTIATE bool grad_target_in<T>(grad_slot<T> &);                                     \
  DUALCAST_INSTANTIATE tensor<T> grad_zeroed<T>(grad_slot<T> &);                                   \
  DUALCAST_INSTANTIATE void accumulate_grad<T>(grad_slot<T> &, tensor<T> const &, cpu const &);    \
  DUALCAST_INSTANTIATE void accumulate_grad<T>(grad_slot<T> &, tensor<T> &&, cpu const &);         \
  DUALCAST_INSTANTIATE void seed_grad<T>(grad_slot<T> &, tensor<T> const &, cpu const &);          \
  DUALCAST_INSTANTIATE tensor<T> out_grad<T>(grad_slot<T> const &);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X

} // namespace DUALCAST_TAPE_ABI
} // namespace dualcast::detail

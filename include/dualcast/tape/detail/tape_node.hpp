// dualcast/tape/detail/tape_node.hpp: one recorded operation of a tape.
//
// A node lives in its tape's arena (tape/detail/arena.hpp): recording one is a bump allocation, no
// std::function and no heap closure. It knows its name (for messages), the tensors it saved for
// backward with their storage versions at save time (checked before its backward runs: an
// in-place write in between would make backward read new values), and its output slots, through
// which backward decides whether it was reached. The concrete node types (an operation's backward
// over a fixed number of outputs) are class templates deriving from it.
#pragma once

#include <dualcast/tape/detail/grad_slot.hpp>
#include <dualcast/tensor/memory.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace dualcast::detail {
inline namespace DUALCAST_TAPE_ABI { // see tensor/detail/device_dispatch.hpp

// A tensor saved for backward: its storage, held (kept alive until the node is released: a fused
// node needs no other reference to its arguments' memory) and its version at save time (what
// backward checks). `what` names it in version errors ("argument", "operand", "result", ...),
// with `index` appended when >= 0. 32 bytes: the version keeps its low 48 bits (2.8e14 in-place
// writes of one tensor between a save and backward would be needed to miss one) and the index 16
// bits (larger indices are not named), because a fused LSTM cell saves a dozen of these per node.
struct saved_tensor {
  static constexpr std::uint64_t version_mask = (std::uint64_t(1) << 48) - 1;
  std::shared_ptr<storage const> st;
  char const *what = "saved tensor";
  std::uint64_t version_bits : 48 = 0;
  std::uint64_t index_bits : 16 = 0; // index + 1; 0: none

  saved_tensor() = default;
  saved_tensor(std::shared_ptr<storage const> s, std::uint64_t version, char const *w,
               int index = -1)
      : st(std::move(s)), what(w), version_bits(version & version_mask),
        index_bits(index >= 0 && index < 0xffff ? std::uint64_t(index) + 1 : 0) {}
  std::uint64_t version() const { return version_bits; }
  // Whether the storage was written in place since the save.
  bool stale() const { return (st->version() & version_mask) != version_bits; }
  int index() const { return int(index_bits) - 1; }
  std::string describe() const {
    return index() >= 0 ? std::string(what) + " " + std::to_string(index()) : std::string(what);
  }
};
static_assert(sizeof(saved_tensor) <= 32);
template <class T> saved_tensor save(tensor<T> const &t, char const *what, int index = -1) {
  return {t.store(), t.version(), what, index};
}

class node {
public:
  explicit node(char const *name) : name_(name) {}
  node(node const &) = delete;
  node &operator=(node const &) = delete;
  virtual ~node() = default;

  char const *name() const { return name_; }
  // Does any output have a gradient?
  virtual bool reached() const = 0;
  // Reads the outputs' gradients and writes the inputs'.
  virtual void backward() = 0;
  // Drops what backward needed (saved tensors, closure state), after a backward without
  // keep_graph.
  virtual void release() = 0;
  // Drops the outputs' gradients (intermediates); kept ones (retain_grad) only if `kept_too` (a
  // backward starts, or one that threw ends), which also notes which outputs backward keeps.
  virtual void clear_outputs(bool kept_too) = 0;
  // Ask the memory system for what this node's backward reads first, in two steps a few nodes
  // apart (backward's sweep; on a long tape all of it was written long before and is out of
  // cache): prefetch_records, the arrays in the tape's arena the node points to (its saved-tensor
  // records, a fused node's slot list); then prefetch, what those point to (the saved storages'
  // headers, whose versions are checked before backward runs, a fused node's variables' slots and
  // arguments).
  virtual void prefetch_records() const = 0;
  virtual void prefetch() const = 0;
  // Then, one node ahead, the saved storages' elements (the headers prefetch asked for hold
  // their addresses; up to 16 lines each): on a tape larger than the last-level cache the D-LSTM's
  // backward per layer-step 1.37 -> 1.20 us (AMD Zen 4, l = 2, c = 32768), where a short tape
  // whose memory was evicted runs as slowly as a long one: its time is loads of memory written
  // long before.
  virtual void prefetch_data() const = 0;
  // The same before the node is destroyed (tape::clear, ~tape): its output slots, which it frees
  // (their blocks written as they go back to their free list).
  virtual void prefetch_outputs() const = 0;
  // The tensors saved for backward.
  virtual saved_tensor const *saved_begin() const = 0;
  virtual saved_tensor const *saved_end() const = 0;

  bool freed = false;

protected:
  std::uint32_t n_saved_ = 0; // (here: in the padding after `freed`)

private:
  char const *name_; // in the tape's arena, or a literal
};

// The node of an operation with K outputs of element type T whose backward is the function
// object `bwd` (it captures the slots and tensors it needs). The saved tensors are an array in the
// tape's arena, destroyed with the node.
template <class T, std::size_t K, class Bwd> class fn_node final : public node {
public:
  fn_node(char const *name, std::array<std::shared_ptr<grad_slot<T>>, K> outs, Bwd &&bwd,
          saved_tensor *saved, std::size_t n_saved)
      : node(name), outs_(std::move(outs)), bwd_(std::move(bwd)), saved_(saved) {
    n_saved_ = std::uint32_t(n_saved);
  }
  ~fn_node() override { destroy_saved(); }

  bool reached() const override {
    for (auto const &s : outs_)
      if (s && s->grad.defined())
        return true;
    return false;
  }
  // (A function taking the output slots reads them from here: a fused node keeps no copy.)
  void backward() override {
    if constexpr (std::is_invocable_v<Bwd &, decltype(outs_) const &>)
      (*bwd_)(outs_);
    else
      (*bwd_)();
  }
  void prefetch_records() const override {
    __builtin_prefetch(saved_);
    if constexpr (requires(Bwd const &b) { b.prefetch_records(); })
      if (bwd_)
        bwd_->prefetch_records();
  }
  void prefetch() const override {
    for (std::size_t i = 0; i < n_saved_; ++i)
      __builtin_prefetch(saved_[i].st.get());
    if constexpr (requires(Bwd const &b) { b.prefetch(); })
      if (bwd_)
        bwd_->prefetch();
  }
  void prefetch_data() const override {
    for (std::size_t i = 0; i < n_saved_; ++i) {
      auto const *d = static_cast<char const *>(saved_[i].st->data());
      std::size_t const n = std::min<std::size_t>(saved_[i].st->bytes(), 1024);
      for (std::size_t b = 0; b < n; b += 64)
        __builtin_prefetch(d + b);
    }
  }
  void prefetch_outputs() const override {
    for (auto const &s : outs_)
      __builtin_prefetch(s.get(), 1);
  }
  void release() override {
    bwd_.reset();
    destroy_saved();
  }
  void clear_outputs(bool kept_too) override {
    for (auto const &s : outs_) {
      if (s && kept_too)
        s->retained_at_backward = s->retain;
      if (s && (kept_too || !s->retain)) {
        s->grad = tensor<T>{};
        s->borrowed = false;
      }
    }
  }
  saved_tensor const *saved_begin() const override { return saved_; }
  saved_tensor const *saved_end() const override { return saved_ + n_saved_; }

private:
  void destroy_saved() {
    for (std::size_t i = 0; i < n_saved_; ++i)
      saved_[i].~saved_tensor();
    n_saved_ = 0;
  }
  // Weak in effect: an output slot is owned by its variable; the node only reads its gradient.
  // (A shared_ptr keeps the slot, not the variable's value, alive until clear().)
  std::array<std::shared_ptr<grad_slot<T>>, K> outs_;
  std::optional<Bwd> bwd_;
  saved_tensor *saved_;
};

} // namespace DUALCAST_TAPE_ABI
} // namespace dualcast::detail

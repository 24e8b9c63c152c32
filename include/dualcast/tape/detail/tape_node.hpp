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

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>

namespace dualcast::detail {
inline namespace DUALCAST_TAPE_ABI { // see tensor/detail/device_dispatch.hpp

// A tensor saved for backward: its storage and version at save time (the node's state keeps the
// tensor alive; this is what backward checks). `what` names it in version errors ("argument",
// "operand", "result", ...), with `index` appended when >= 0.
struct saved_tensor {
  storage const *st = nullptr;
  std::uint64_t version = 0;
  char const *what = "saved tensor";
  int index = -1;

  std::string describe() const {
    return index >= 0 ? std::string(what) + " " + std::to_string(index) : std::string(what);
  }
};
template <class T> saved_tensor save(tensor<T> const &t, char const *what, int index = -1) {
  return {t.store().get(), t.version(), what, index};
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
  // The tensors saved for backward.
  virtual saved_tensor const *saved_begin() const = 0;
  virtual saved_tensor const *saved_end() const = 0;

  bool freed = false;

private:
  char const *name_; // in the tape's arena
};

// The node of an operation with K outputs of element type T whose backward is the function
// object `bwd` (it captures the slots and tensors it needs). The saved tensors are an array in the
// tape's arena, destroyed with the node.
template <class T, std::size_t K, class Bwd> class fn_node final : public node {
public:
  fn_node(char const *name, std::array<std::shared_ptr<grad_slot<T>>, K> outs, Bwd &&bwd,
          saved_tensor *saved, std::size_t n_saved)
      : node(name), outs_(std::move(outs)), bwd_(std::move(bwd)), saved_(saved), n_saved_(n_saved) {
  }
  ~fn_node() override { destroy_saved(); }

  bool reached() const override {
    for (auto const &s : outs_)
      if (s && s->grad.defined())
        return true;
    return false;
  }
  void backward() override { (*bwd_)(); }
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
  std::size_t n_saved_;
};

} // namespace DUALCAST_TAPE_ABI
} // namespace dualcast::detail

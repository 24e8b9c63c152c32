// dualcast/tape.hpp: a define-by-run reverse-mode tape over whole arrays.
//
//   dualcast::tape tp;
//   auto W = tp.variable(W0);                 // a leaf that requires gradients
//   auto x = tp.constant(X0);                 // a leaf that does not
//   auto loss = dualcast::sum(dualcast::matmul(x, W) * 2.0f);
//   tp.backward(loss);                        // W.grad() holds d loss / d W (accumulated)
//   tp.zero_grad(); tp.clear();               // next iteration
//
// Every operation on variables records ONE node holding what its backward needs (the tensors it
// saved and a closure). Nodes run in reverse recording order, which is a topological order of
// a define-by-run graph. Backward frees the nodes' saved data unless keep_graph is asked for; a
// second backward through freed nodes throws dualcast::tape_error. Each saved tensor's storage
// version is recorded; if it changed when backward reaches the node (an in-place write after the
// save), backward throws dualcast::version_error naming the operation. A backward that throws
// leaves every leaf gradient as it was before it started (each backward writes fresh leaf
// gradients and adds them to the old ones only when it succeeds); the nodes it had already run
// are consumed, as they would have been by a successful backward.
//
// Operations run where their operands live (detail/device_dispatch.hpp): on the tape's CPU
// executor `ex` for host tensors, on the CUDA executor (default stream) for CUDA tensors in
// translation units compiled by nvcc. Gradients live on their variable's device.
#pragma once

#include <dualcast/backend/cpu.hpp>
#include <dualcast/broadcast.hpp>
#include <dualcast/detail/device_dispatch.hpp>
#include <dualcast/errors.hpp>
#include <dualcast/memory.hpp>
#include <dualcast/tensor.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace dualcast {
inline namespace DUALCAST_TAPE_ABI { // see detail/device_dispatch.hpp
class tape;
}

// How a fused elementwise node provides its diagonal Jacobian to backward.
enum class policy : std::uint8_t {
  automatic, // chosen by the cost model (ops/elementwise.hpp)
  store,     // forward writes the partials d y_k / d x_a; backward contracts them
  recompute, // forward stores nothing extra; backward re-evaluates duals (dualcast::vjp)
};

namespace detail {
inline namespace DUALCAST_TAPE_ABI {

// The gradient side of a variable: its shape, device and (during / after backward) its gradient.
// Nodes hold slots, never values, so a node keeps alive exactly the tensors it saved.
template <class T> struct grad_slot {
  shape dims;
  device dev;
  tensor<T> grad;
  bool is_leaf = true;
  bool retain = false; // keep an intermediate's gradient after backward
  // A view variable (a slice): its gradient is the same view of its base's gradient, so the
  // operations that consume the view write into the base's gradient directly, instead of into
  // a gradient of their own that the slice's backward would add into a zero-filled one.
  std::shared_ptr<grad_slot> base;
  std::function<tensor<T>(tensor<T> const &)> view_of_base;
  // A base's gradient just created as zeros, and the regions handed out to its views since then:
  // a view disjoint from all of them still holds zeros, so its first writer may overwrite it.
  bool zeros_outside_views = false;
  std::vector<view<T const>> handed;
};

// What backward does with a leaf's gradient: set aside the gradient from before (backward writes
// a fresh one), then add the two (success) or put the old one back (an exception), so that a
// backward that throws leaves every leaf gradient as it was.
enum class leaf_step : std::uint8_t { zero, stash, commit, rollback };

struct saved_tensor {
  std::shared_ptr<storage> st;
  std::uint64_t version;
  std::string what;
};

struct node {
  std::string name;
  std::vector<saved_tensor> saved;
  std::function<void()> backward;
  std::function<bool()> reached; // does any output have a gradient?
  // Drops the outputs' gradients (intermediates); kept ones (retain_grad) only if `kept_too`.
  std::function<void(bool kept_too)> clear_outputs;
  bool freed = false;
};

} // namespace DUALCAST_TAPE_ABI
} // namespace detail

inline namespace DUALCAST_TAPE_ABI {

// A tensor on a tape: a value and, if it requires gradients, a gradient slot.
template <class T> class var {
public:
  var() = default;
  var(tensor<T> value, std::shared_ptr<detail::grad_slot<T>> slot, tape *tp)
      : value_(std::move(value)), slot_(std::move(slot)), tape_(tp) {}

  tensor<T> const &value() const { return value_; }
  shape const &dims() const { return value_.dims(); }
  int rank() const { return value_.rank(); }
  index_t size() const { return value_.size(); }
  bool requires_grad() const { return slot_ != nullptr; }
  bool is_leaf() const { return !slot_ || slot_->is_leaf; }
  // The accumulated gradient (undefined tensor if none has reached this variable).
  tensor<T> grad() const { return slot_ ? slot_->grad : tensor<T>{}; }
  // Keep this intermediate's gradient after backward, until the next backward starts (leaves
  // keep theirs and accumulate).
  var const &retain_grad() const {
    if (slot_)
      slot_->retain = true;
    return *this;
  }
  T item() const { return value_.item(); }
  tape *owner() const { return tape_; }
  std::shared_ptr<detail::grad_slot<T>> const &slot() const { return slot_; }

private:
  tensor<T> value_;
  std::shared_ptr<detail::grad_slot<T>> slot_;
  tape *tape_ = nullptr;
};

template <class T> struct is_var : std::false_type {};
template <class T> struct is_var<var<T>> : std::true_type {};
template <class T> inline constexpr bool is_var_v = is_var<std::remove_cvref_t<T>>::value;

class tape {
public:
  tape() = default;
  tape(tape const &) = delete;
  tape &operator=(tape const &) = delete;

  // The executor operations recorded on this tape run on.
  cpu ex{};
  // Default policy of fused elementwise nodes (automatic: the cost model decides).
  policy default_policy = policy::automatic;
  // false: elementwise kernels called on variables are evaluated operation by operation, each
  // recorded as its own node (classic unfused reverse mode), instead of as one fused node.
  bool fused = true;

  // A leaf variable (requires gradients unless told otherwise).
  template <class T> var<T> variable(tensor<T> value, bool requires_grad = true) {
    if (!detail::cuda_tape_available && !value.dev().is_host())
      detail::no_cuda_here("dualcast::tape::variable", value.dev());
    if (!requires_grad)
      return var<T>(std::move(value), nullptr, this);
    auto slot = std::make_shared<detail::grad_slot<T>>();
    slot->dims = value.dims();
    slot->dev = value.dev();
    // held: the gradient from before the running backward; zeroed: the gradient is all zeros
    // (zero_grad), so a backward that reaches the leaf has nothing to add it to.
    leaves_.push_back([w = std::weak_ptr<detail::grad_slot<T>>(slot), held = tensor<T>{},
                       zeroed = false](detail::leaf_step step) mutable {
      auto s = w.lock();
      if (!s)
        return false;
      switch (step) {
      case detail::leaf_step::zero:
        if (s->grad.defined())
          s->grad.fill_(T(0));
        zeroed = true;
        break;
      case detail::leaf_step::stash:
        held = std::move(s->grad);
        s->grad = tensor<T>{};
        break;
      case detail::leaf_step::commit:
        if (!s->grad.defined()) {
          s->grad = std::move(held); // not reached by this backward
        } else {
          if (held.defined() && !zeroed)
            detail::add_into(s->grad, held);
          zeroed = false;
        }
        held = tensor<T>{};
        break;
      case detail::leaf_step::rollback:
        s->grad = std::move(held);
        held = tensor<T>{};
        break;
      }
      return true;
    });
    return var<T>(std::move(value), std::move(slot), this);
  }
  template <class T> var<T> constant(tensor<T> value) { return variable(std::move(value), false); }

  // ---- recording (used by operations) -----------------------------------------------------------
  // An output variable of an operation: requires gradients iff `needs` (some input does).
  template <class T> var<T> make_output(tensor<T> value, bool needs) {
    if (!needs)
      return var<T>(std::move(value), nullptr, this);
    auto slot = std::make_shared<detail::grad_slot<T>>();
    slot->dims = value.dims();
    slot->dev = value.dev();
    slot->is_leaf = false;
    return var<T>(std::move(value), std::move(slot), this);
  }
  // An output that is a view of the variable with slot `base` (same elements, no copy): its
  // gradient will be view_of_base(base's gradient).
  template <class T, class View>
  var<T> make_view_output(tensor<T> value, std::shared_ptr<detail::grad_slot<T>> base,
                          View view_of_base) {
    var<T> r = make_output(std::move(value), true);
    r.slot()->base = std::move(base);
    r.slot()->view_of_base = std::move(view_of_base);
    return r;
  }
  // Records a node. `outs` are its output slots; backward runs only if one of them got a gradient.
  template <class T>
  detail::node &record(std::string name, std::vector<std::shared_ptr<detail::grad_slot<T>>> outs,
                       std::function<void()> backward) {
    auto n = std::make_unique<detail::node>();
    n->name = std::move(name);
    n->backward = std::move(backward);
    n->reached = [outs] {
      for (auto const &s : outs)
        if (s && s->grad.defined())
          return true;
      return false;
    };
    n->clear_outputs = [w = std::vector<std::weak_ptr<detail::grad_slot<T>>>(
                            outs.begin(), outs.end())](bool kept_too) {
      for (auto const &ws : w)
        if (auto s = ws.lock(); s && (kept_too || !s->retain))
          s->grad = tensor<T>{};
    };
    nodes_.push_back(std::move(n));
    return *nodes_.back();
  }
  // Saves a tensor for backward in node n: its version is checked when backward reaches n.
  template <class T> static void save(detail::node &n, tensor<T> const &t, std::string what) {
    if (t.defined())
      n.saved.push_back({t.store(), t.version(), std::move(what)});
  }

  // ---- backward
  // ----------------------------------------------------------------------------------- d loss / d
  // leaves for a single-element loss (seed 1).
  template <class T> void backward(var<T> const &loss, bool keep_graph = false) {
    if (loss.size() != 1)
      throw tape_error("dualcast::tape::backward: the output has shape " + to_string(loss.dims()) +
                       "; a non-scalar output needs seeds: backward({outputs}, {seeds})");
    backward(std::vector<var<T>>{loss},
             std::vector<tensor<T>>{tensor<T>::full(loss.dims(), T(1), loss.value().dev())},
             keep_graph);
  }
  // A lazy elementwise expression (ops/expression.hpp) is materialised first.
  template <class E>
  requires requires(E const &e) { e.eval(); }
  void backward(E const &loss, bool keep_graph = false) { backward(loss.eval(), keep_graph); }
  // Vector-Jacobian product: seeds[i] is d L / d outputs[i].
  template <class T>
  void backward(std::vector<var<T>> const &outputs, std::vector<tensor<T>> const &seeds,
                bool keep_graph = false) {
    if (outputs.size() != seeds.size())
      throw tape_error("dualcast::tape::backward: " + std::to_string(outputs.size()) +
                       " outputs but " + std::to_string(seeds.size()) + " seeds");
    // Every argument is checked before any gradient changes.
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      auto const &o = outputs[i];
      if (o.owner() != this)
        throw tape_error("dualcast::tape::backward: output " + std::to_string(i) +
                         " belongs to another tape");
      if (!o.requires_grad())
        throw tape_error("dualcast::tape::backward: output " + std::to_string(i) +
                         " does not depend on any variable that requires gradients");
      if (!(seeds[i].dims() == o.dims()))
        throw shape_error("dualcast::tape::backward: seed " + std::to_string(i) + " has shape " +
                          to_string(seeds[i].dims()) + " but output " + std::to_string(i) +
                          " has shape " + to_string(o.dims()));
      if (!(seeds[i].dev() == o.value().dev()))
        throw device_error("dualcast::tape::backward: seed " + std::to_string(i) + " is on " +
                           to_string(seeds[i].dev()) + " but output " + std::to_string(i) +
                           " is on " + to_string(o.value().dev()));
    }
    // An intermediate's kept gradient is that of the last backward: a gradient left from an
    // earlier one must not make its (possibly freed) node look reached.
    for (auto &n : nodes_)
      n->clear_outputs(true);
    each_leaf(detail::leaf_step::stash);
    try {
      for (std::size_t i = 0; i < outputs.size(); ++i)
        accumulate_grad(outputs[i].slot(), seeds[i]);
      for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it)
        run_node(**it, keep_graph);
    } catch (...) {
      // Nodes already run stay consumed (as after a successful backward: without keep_graph
      // their saved tensors are freed as backward goes, which bounds its memory), the leaf
      // gradients go back to what they were and the intermediate ones are dropped.
      for (auto &n : nodes_)
        n->clear_outputs(true);
      each_leaf(detail::leaf_step::rollback);
      throw;
    }
    each_leaf(detail::leaf_step::commit);
  }

  // Sets the gradients of all leaves of this tape to zero.
  void zero_grad() { each_leaf(detail::leaf_step::zero); }
  // Forgets all recorded nodes (the next iteration of a training loop). Variables stay valid.
  void clear() { nodes_.clear(); }

  std::size_t node_count() const { return nodes_.size(); }
  // Bytes of the distinct storages the live nodes hold for backward.
  std::size_t saved_bytes() const {
    std::unordered_set<storage const *> seen;
    std::size_t b = 0;
    for (auto const &n : nodes_)
      for (auto const &s : n->saved)
        if (seen.insert(s.st.get()).second)
          b += s.st->bytes();
    return b;
  }

  // ---- gradient helpers (used by operations' backward) ----------------------------------------
  // The gradient tensor of a slot for an operation that writes EVERY element: returns it and
  // whether to accumulate (false: its elements are free to overwrite -- freshly allocated, or a
  // view into a base gradient that was just created as zeros). The tensor may be a strided view
  // (the gradient of a slice).
  template <class T> static std::pair<tensor<T>, bool> grad_target(detail::grad_slot<T> &s) {
    if (!s.base) {
      s.zeros_outside_views = false; // written everywhere now
      if (s.grad.defined())
        return {s.grad, true};
      s.grad = tensor<T>::empty(s.dims, s.dev);
      return {s.grad, false};
    }
    if (s.grad.defined())
      return {s.grad, true};
    bool zeros = ensure_grad(s);
    return {s.grad, !zeros};
  }
  // The gradient tensor of a slot, zero-initialised if new (for partial writes).
  template <class T> static tensor<T> grad_zeroed(detail::grad_slot<T> &s) {
    ensure_grad(s);
    if (!s.base)
      s.zeros_outside_views = false;
    return s.grad;
  }
  // grad += g (g broadcast to the slot's shape... or reduced from a broadcast shape).
  template <class T>
  static void accumulate_grad(std::shared_ptr<detail::grad_slot<T>> const &s, tensor<T> const &g);
  // The gradient of an output slot, or a zero tensor (stride 0) of its shape.
  template <class T> static tensor<T> out_grad(std::shared_ptr<detail::grad_slot<T>> const &s) {
    if (s && s->grad.defined())
      return s->grad;
    return tensor<T>::zeros(shape{}, s ? s->dev : device::host())
        .broadcast_to(s ? s->dims : shape{});
  }

private:
  // Creates s's gradient if it has none: zeros, or for a view the view of its base's gradient
  // (created the same way). true: it was created now, holds zeros and no other view of the same
  // base shares an element with it (so that its first writer may overwrite it).
  template <class T> static bool ensure_grad(detail::grad_slot<T> &s) {
    if (s.grad.defined())
      return false;
    if (!s.base) {
      s.grad = tensor<T>::zeros(s.dims, s.dev);
      s.zeros_outside_views = true;
      s.handed.clear();
      return true;
    }
    ensure_grad(*s.base);
    s.grad = s.view_of_base(s.base->grad);
    detail::grad_slot<T> *root = s.base.get();
    while (root->base)
      root = root->base.get();
    if (!root->zeros_outside_views)
      return false;
    bool disjoint = true;
    for (auto const &h : root->handed)
      disjoint = disjoint && !detail::overlaps(h, s.grad.cview());
    root->handed.push_back(s.grad.cview());
    return disjoint;
  }
  // One step of backward: the node's gradient if any of its outputs got one.
  static void run_node(detail::node &n, bool keep_graph) {
    if (!n.reached())
      return;
    if (n.freed)
      throw tape_error(
          "dualcast::tape::backward: the graph through '" + n.name +
          "' was already freed by an earlier backward; pass keep_graph = true to the first "
          "backward to run backward twice");
    for (auto const &s : n.saved)
      if (s.st->version() != s.version)
        throw version_error("dualcast::tape::backward: " + s.what + " saved by '" + n.name +
                            "' was modified in place after it was saved (version " +
                            std::to_string(s.version) + ", now " + std::to_string(s.st->version()) +
                            ")");
    n.backward();
    if (!keep_graph) {
      n.freed = true;
      n.backward = nullptr;
      n.saved.clear();
    }
    n.clear_outputs(false);
  }
  // Applies a step to every live leaf and forgets the leaves whose variables are gone.
  void each_leaf(detail::leaf_step step) {
    std::erase_if(leaves_, [step](auto &f) { return !f(step); });
  }

  std::vector<std::unique_ptr<detail::node>> nodes_;
  std::vector<std::function<bool(detail::leaf_step)>> leaves_;
};

template <class T>
void tape::accumulate_grad(std::shared_ptr<detail::grad_slot<T>> const &s, tensor<T> const &g) {
  if (!s)
    return;
  char const *op = "dualcast::tape (gradient accumulation)";
  detail::common_device(op, s->dev, g.dev());
  shape const &d = s->dims;
  if (g.dims() == d) {
    auto [t, acc] = grad_target(*s);
    if (acc)
      detail::add_into(t, g);
    else
      t.assign_raw(g);
    return;
  }
  // g has a broadcast shape of d: sum over the broadcast dimensions.
  tensor<T> gc = g.contiguous();
  auto const target = grad_target(*s);
  detail::on_device(op, s->dev, cpu{}, [&](auto const &ex) {
    backend_reduce(detail::hook{}, ex, gc.dims(), static_cast<T const *>(gc.data()),
                   target.first.raw_view(), target.second);
  });
}

} // namespace DUALCAST_TAPE_ABI

// Finds the tape of the variables among args (all must share it); nullptr if there are none.
namespace detail {
template <class... A> tape *tape_of(char const *op, A const &...a) {
  tape *t = nullptr;
  auto one = [&](auto const &x) {
    if constexpr (is_var_v<decltype(x)>) {
      if (t && x.owner() != t)
        throw tape_error(std::string(op) + ": arguments are variables of different tapes");
      t = x.owner();
    }
  };
  (one(a), ...);
  return t;
}
} // namespace detail

} // namespace dualcast

// dualcast/tape/tape.hpp: a define-by-run reverse-mode tape over whole arrays.
//
//   dualcast::tape tp;
//   auto W = tp.variable(W0);                 // a leaf that requires gradients
//   auto x = tp.constant(X0);                 // a leaf that does not
//   auto loss = dualcast::sum(dualcast::matmul(x, W) * 2.0f);
//   tp.backward(loss);                        // W.grad() holds d loss / d W (accumulated)
//   tp.zero_grad(); tp.clear();               // next iteration
//
// Every operation on variables records ONE node holding what its backward needs (the tensors it
// saved and a closure), in the tape's arena (tape/detail/tape_node.hpp). Nodes run in reverse
// recording order, which is a topological order of a define-by-run graph. Backward frees the nodes'
// saved data unless keep_graph is asked for; a second backward through freed nodes throws
// dualcast::tape_error. Each saved tensor's storage version is recorded; if it changed when
// backward reaches the node (an in-place write after the save), backward throws
// dualcast::version_error naming the operation. A backward that throws leaves every leaf gradient
// as it was before it started (each backward writes fresh leaf gradients and adds them to the old
// ones only when it succeeds); the nodes it had already run are consumed, as they would have been
// by a successful backward.
//
// Operations run where their operands live (tensor/detail/device_dispatch.hpp): on the tape's CPU
// executor `ex` for host tensors, on the CUDA executor for CUDA tensors in translation units
// compiled by nvcc. Gradients live on their variable's device. A tape may have a CUDA stream
// (`dualcast::tape tp{s}` or `tp.stream = s`, backend/stream.hpp): its operations on CUDA
// tensors, backward, zero_grad and var::item then run on s (each opens a stream_scope of s around
// its work, so the tensors they allocate, copy and fill are on s too); without one (null) they run
// on the thread's current stream. Host tensors ignore it.
//
// Operations are recorded through dualcast::custom_op (tape/custom_op.hpp), the public way to add
// one; the fused elementwise node (ops/fused.hpp) and slices record their own node types.
// dualcast::no_grad (tape/no_grad.hpp) turns recording off for a scope (grad_enabled() below).
#pragma once

#include <dualcast/backend/seam.hpp>
#include <dualcast/backend/stream.hpp>
#include <dualcast/core/compiled.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/tape/detail/arena.hpp>
#include <dualcast/tape/detail/grad_slot.hpp>
#include <dualcast/tape/detail/tape_node.hpp>
#include <dualcast/tape/policy.hpp>
#include <dualcast/tensor/detail/device_dispatch.hpp>
#include <dualcast/tensor/detail/recycling_allocator.hpp>
#include <dualcast/tensor/memory.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

namespace dualcast {
inline namespace DUALCAST_TAPE_ABI { // see tensor/detail/device_dispatch.hpp
class tape;
}

namespace detail {
inline namespace DUALCAST_TAPE_ABI {
// What backward does with a leaf's gradient: set aside the gradient from before (backward writes
// a fresh one), then add the two (success) or put the old one back (an exception), so that a
// backward that throws leaves every leaf gradient as it was.
enum class leaf_step : std::uint8_t { zero, stash, commit, rollback };
} // namespace DUALCAST_TAPE_ABI
} // namespace detail

inline namespace DUALCAST_TAPE_ABI {

// A tensor on a tape: a value and, if it requires gradients, a gradient slot.
//
// A variable is a handle: its value, slot and tape live in one shared block that copies share
// and nothing modifies (assigning a variable rebinds the handle), so a copy is 16 bytes and one
// reference count. Lazy expressions copy a variable into every expression that uses it
// (ops/lazy/expr.hpp); at 184 bytes and two reference counts per copy, building the four gates
// of an LSTM step cost about as much as recording its nodes (issue 36).
template <class T> class var {
  static_assert(!std::is_integral_v<T>,
                "dualcast::var: integer tensors (indices) are never differentiable and cannot be "
                "tape variables; pass them to the index operations as plain tensors");

public:
  using value_type = T;
  var() = default;
  var(tensor<T> value, std::shared_ptr<detail::grad_slot<T>> slot, tape *tp)
      : c_(std::allocate_shared<core>(detail::recycling_allocator<core>{}, std::move(value),
                                      std::move(slot), tp)) {}

  tensor<T> const &value() const { return c_ ? c_->value : empty().value; }
  shape const &dims() const { return value().dims(); }
  int rank() const { return value().rank(); }
  index_t size() const { return value().size(); }
  bool requires_grad() const { return c_ && c_->slot != nullptr; }
  bool is_leaf() const { return !requires_grad() || c_->slot->is_leaf; }
  // The accumulated gradient. A variable that requires gradients but that no backward reached has
  // zeros; one that requires none (a constant) an undefined tensor; an intermediate's gradient is
  // kept only when asked for with retain_grad() before backward (else tape_error), and reads as
  // zeros when that backward did not reach it.
  tensor<T> grad() const {
    auto const &s = slot();
    if (!s)
      return tensor<T>{};
    if (s->grad.defined())
      return s->grad.get();
    if (s->is_leaf || s->retained_at_backward)
      return zeros_on_tape_stream();
    if (s->retain)
      throw tape_error("dualcast::var::grad: this intermediate variable has no gradient: no "
                       "backward over it has run since retain_grad() was called on it (call "
                       "retain_grad() before backward)");
    throw tape_error("dualcast::var::grad: this intermediate variable has no gradient: backward "
                     "keeps an intermediate's gradient only after retain_grad() was called on it");
  }
  // Whether a gradient is held (a leaf that backward reached, or a retained intermediate).
  bool has_grad() const { return requires_grad() && c_->slot->grad.defined(); }
  // Keep this intermediate's gradient after backward, until the next backward starts (leaves
  // keep theirs and accumulate).
  var const &retain_grad() const {
    if (requires_grad())
      c_->slot->retain = true;
    return *this;
  }
  // The value of a one-element variable (a CUDA one: copied on the tape's stream, which it waits
  // for).
  T item() const;
  tape *owner() const { return c_ ? c_->tp : nullptr; }
  std::shared_ptr<detail::grad_slot<T>> const &slot() const { return c_ ? c_->slot : empty().slot; }

private:
  tensor<T> zeros_on_tape_stream() const;

  struct core {
    core() = default;
    core(tensor<T> v, std::shared_ptr<detail::grad_slot<T>> s, tape *t)
        : value(std::move(v)), slot(std::move(s)), tp(t) {}
    tensor<T> value;
    std::shared_ptr<detail::grad_slot<T>> slot;
    tape *tp = nullptr;
  };
  static core const &empty() { // what a default-constructed (or moved-from) variable reads
    static core const e{};
    return e;
  }
  std::shared_ptr<core const> c_;
};

class tape {
public:
  tape() = default;
  // A tape whose work on CUDA tensors runs on stream s (see the file comment).
  explicit tape(stream_handle s) : stream(s) {}
  tape(tape const &) = delete;
  tape &operator=(tape const &) = delete;
  ~tape() { destroy_nodes(); }

  // The executor operations recorded on this tape run on.
  cpu ex{};
  // The CUDA stream of its operations on CUDA tensors, backward, zero_grad and var::item; null:
  // the thread's current stream (backend/stream.hpp). Ignored by host tensors.
  stream_handle stream{};
  // Default policy of fused elementwise nodes (automatic: the cost model decides).
  policy_kind default_policy = policy_kind::automatic;
  // false: elementwise kernels called on variables are evaluated operation by operation, each
  // recorded as its own node (classic unfused reverse mode), instead of as one fused node.
  bool fused = true;

  // A leaf variable (requires gradients unless told otherwise).
  template <class T> var<T> variable(tensor<T> value, bool requires_grad = true);
  template <class T> var<T> constant(tensor<T> value) { return variable(std::move(value), false); }

  // ---- gradient mode (tape/no_grad.hpp)
  // -------------------------------------------------------------- While false, operations on this
  // tape's variables record nothing and their outputs require no gradients (every operation asks
  // grad_enabled() before it computes what backward would need; make_output and record check it
  // too). dualcast::no_grad sets it for a scope.
  bool grad_enabled() const { return grad_enabled_; }
  void set_grad_enabled(bool on) { grad_enabled_ = on; }

  // ---- recording (used by operations) ----------------------------------------------------------
  // An output variable of an operation: requires gradients iff `needs` (some input does) and
  // gradients are enabled.
  template <class T> var<T> make_output(tensor<T> value, bool needs);
  // An output that is a slice of the variable with slot `base` (same elements, no copy): its
  // gradient will be the same slice of base's gradient.
  template <class T>
  var<T> make_view_output(tensor<T> value, std::shared_ptr<detail::grad_slot<T>> base, int dim,
                          index_t begin, index_t end, index_t step) {
    var<T> r = make_output(std::move(value), true);
    if (!r.slot())
      return r;
    auto &side = r.slot()->side();
    side.base = std::move(base);
    side.region = {dim, begin, end, step};
    return r;
  }
  // Records a node: backward calls bwd() (or bwd(outs), when bwd takes the std::array of output
  // slots: the node's, so that bwd need not keep a copy) once one of the output slots `outs` has
  // a gradient; the tensors in `saves` are kept alive and version-checked before it runs. The
  // name is copied. Nothing is recorded while gradients are disabled.
  template <class T, std::size_t K, class Bwd>
  void record(std::string_view name, std::array<std::shared_ptr<detail::grad_slot<T>>, K> outs,
              Bwd bwd, std::initializer_list<detail::saved_tensor> saves = {}) {
    record_node<T, K>(name, std::move(outs), std::move(bwd), saves.begin(), saves.size());
  }
  template <class T, std::size_t K, class Bwd>
  void record(std::string_view name, std::array<std::shared_ptr<detail::grad_slot<T>>, K> outs,
              Bwd bwd, detail::saved_tensor const *saves, std::size_t n_saves) {
    record_node<T, K>(name, std::move(outs), std::move(bwd), saves, n_saves);
  }
  // The same without copies, for nodes recorded by the library in bulk (fused elementwise): the
  // name is a literal (not copied) and the saved tensors are already in node_memory() (the node
  // takes them over). A fused LSTM cell's node spent 384 of its 1.5 KiB on the copies.
  template <class T, std::size_t K, class Bwd>
  void record_static(char const *literal_name,
                     std::array<std::shared_ptr<detail::grad_slot<T>>, K> outs, Bwd bwd,
                     detail::arena_array<detail::saved_tensor> &&saves) {
    if (!grad_enabled_)
      return;
    std::size_t const n = saves.size();
    detail::saved_tensor *saved = saves.release();
    nodes_.push_back(arena_.make<detail::fn_node<T, K, std::decay_t<Bwd>>>(
        literal_name, std::move(outs), std::move(bwd), saved, n));
  }

  // ---- backward --------------------------------------------------------------------------------
  // d loss / d leaves for a single-element loss (seed 1).
  template <class T> void backward(var<T> const &loss, bool keep_graph = false);
  // A lazy elementwise expression (ops/lazy/) is materialised first.
  template <class E>
  requires requires(E const &e) { e.eval(); }
  void backward(E const &loss, bool keep_graph = false) { backward(loss.eval(), keep_graph); }
  // Vector-Jacobian product: seeds[i] is d L / d outputs[i].
  // (Defined below the class: not inline, so that the compiled component can hold it.)
  template <class T>
  void backward(std::vector<var<T>> const &outputs, std::vector<tensor<T>> const &seeds,
                bool keep_graph = false);

  // Sets the gradients of all leaves of this tape to zero.
  void zero_grad() {
    detail::stream_scope_if const scope(stream, !stream.is_default());
    each_leaf(detail::leaf_step::zero);
  }
  // Forgets all recorded nodes (the next iteration of a training loop). Leaf variables stay
  // valid; an intermediate computed before clear() keeps its value but has lost the graph behind
  // it: backward from it, or recording an operation on it, throws tape_error (detach() it to carry
  // its value on as a constant, as a truncated backpropagation through time does).
  void clear() {
    destroy_nodes();
    held_leaves_.clear();
    arena_.reset();
    ++generation_;
  }
  // How many times clear() has run: an intermediate records the generation it was computed in.
  std::uint64_t generation() const { return generation_; }

  std::size_t node_count() const { return nodes_.size(); }

  // ---- gradient hooks (data parallelism: distributed/data_parallel.hpp) ------------------------
  // Calls f during every backward, once the gradient that backward computes for the leaf v is
  // final (no node left to run can add to it): v.grad() then reads this backward's contribution
  // alone -- the gradient from before is added after the last node, when backward succeeds -- and
  // f may replace it (e.g. by the mean over processes). A leaf that backward does not reach gets
  // its call too, before the first node runs (its gradient undefined: zeros). Returns an id for
  // remove_hook. The hooks of one backward run in an order that depends on the graph.
  using hook_id = std::uint64_t;
  template <class T> hook_id on_gradient_ready(var<T> const &v, std::function<void()> f) {
    if (!v.requires_grad() || !v.is_leaf() || v.owner() != this)
      throw tape_error("dualcast::tape::on_gradient_ready: the variable must be a leaf of this "
                       "tape that requires gradients");
    std::weak_ptr<detail::grad_slot<T>> w = v.slot();
    // When the leaf's gradient is final in generation g: after the node at this index ran.
    auto ready_after = [w](std::uint64_t g, std::size_t n_nodes) -> std::size_t {
      auto s = w.lock();
      return s && s->side_ && s->side_->use_generation == g ? std::min(s->side_->first_use, n_nodes)
                                                            : n_nodes;
    };
    grad_hooks_.push_back({++last_hook_, std::move(ready_after), std::move(f)});
    return last_hook_;
  }
  // Calls f at the end of every successful node sweep of backward, after every gradient hook and
  // before the gradients from before are added back.
  hook_id on_backward_end(std::function<void()> f) {
    end_hooks_.push_back({++last_hook_, std::move(f)});
    return last_hook_;
  }
  void remove_hook(hook_id id) {
    std::erase_if(grad_hooks_, [id](auto const &h) { return h.id == id; });
    std::erase_if(end_hooks_, [id](auto const &h) { return h.id == id; });
  }
  // Internal: memory that lives until clear() (where operations keep their nodes' state).
  detail::arena &node_memory() { return arena_; }
  // Internal: keeps a leaf's gradient slot alive until clear(), from its first use by an operation
  // recorded in the current generation (check_graph_alive), so that the nodes of the generation
  // may refer to it with a plain pointer (ops/fused/core.hpp) even when its variable is gone
  // before backward. (Not under no_grad: an inference loop's leaves are not kept.)
  void hold_leaf(std::shared_ptr<void> slot) { held_leaves_.push_back(std::move(slot)); }
  // Bytes of node bookkeeping in the tape's arena since the last clear() (the nodes, their
  // operand references, names, shapes and version checks; not the tensors they save).
  std::size_t node_memory_bytes() const { return arena_.bytes_used(); }
  // How many saved-tensor records the live nodes hold (their version checks, part of
  // node_memory_bytes()).
  std::size_t saved_count() const {
    std::size_t n = 0;
    for (detail::node const *nd : nodes_)
      n += std::size_t(nd->saved_end() - nd->saved_begin());
    return n;
  }
  // Bytes of the distinct storages the live nodes hold for backward.
  std::size_t saved_bytes() const {
    std::unordered_set<storage const *> seen;
    std::size_t b = 0;
    for (detail::node const *n : nodes_)
      for (auto s = n->saved_begin(); s != n->saved_end(); ++s)
        if (seen.insert(s->st.get()).second)
          b += s->st->bytes();
    return b;
  }

private:
  template <class T, std::size_t K, class Bwd>
  void record_node(std::string_view name, std::array<std::shared_ptr<detail::grad_slot<T>>, K> outs,
                   Bwd &&bwd, detail::saved_tensor const *saves, std::size_t n_saves) {
    if (!grad_enabled_)
      return;
    if (n_saves > 0xffffffffu)
      throw tape_error("dualcast::tape::record: more than 2^32 saved tensors in one operation");
    auto *text = static_cast<char *>(arena_.allocate(name.size() + 1, 1));
    std::memcpy(text, name.data(), name.size());
    text[name.size()] = '\0';
    detail::saved_tensor *saved = nullptr;
    if (n_saves > 0) {
      saved = static_cast<detail::saved_tensor *>(
          arena_.allocate(n_saves * sizeof(detail::saved_tensor), alignof(detail::saved_tensor)));
      std::uninitialized_copy_n(saves, n_saves, saved);
    }
    nodes_.push_back(arena_.make<detail::fn_node<T, K, std::decay_t<Bwd>>>(
        text, std::move(outs), std::forward<Bwd>(bwd), saved, n_saves));
  }
  // The sweep's prefetches, for node i - prefetch_distance ahead of node i - 2 prefetch_distance
  // ahead of node i - 3 prefetch_distance: its first lines in the arena, then the arrays it points
  // to, then what those point to (node::prefetch_records, node::prefetch), and for node i - 1 the
  // saved storages' elements (node::prefetch_data). A node's backward on small arrays takes a
  // microsecond or more, so a few nodes ahead covers a miss to memory.
  static constexpr std::size_t prefetch_distance = 2;
  void prefetch_ahead(std::size_t i) const {
    if (i >= 3 * prefetch_distance) {
      auto const *p = reinterpret_cast<char const *>(nodes_[i - 3 * prefetch_distance]);
      for (int line = 0; line < 4; ++line)
        __builtin_prefetch(p + 64 * line);
    }
    if (i >= 2 * prefetch_distance)
      nodes_[i - 2 * prefetch_distance]->prefetch_records();
    if (i >= prefetch_distance)
      nodes_[i - prefetch_distance]->prefetch();
    if (i >= 1)
      nodes_[i - 1]->prefetch_data();
  }
  // One step of backward: the node's gradient if any of its outputs got one.
  static void run_node(detail::node &n, bool keep_graph) {
    if (!n.reached())
      return;
    if (n.freed)
      throw tape_error(
          std::string("dualcast::tape::backward: the graph through '") + n.name() +
          "' was already freed by an earlier backward; pass keep_graph = true to the first "
          "backward to run backward twice");
    for (auto s = n.saved_begin(); s != n.saved_end(); ++s)
      if (s->stale())
        throw version_error("dualcast::tape::backward: " + s->describe() + " saved by '" +
                            n.name() + "' was modified in place after it was saved (version " +
                            std::to_string(s->version()) + ", now " +
                            std::to_string(s->st->version()) + ")");
    n.backward();
    if (!keep_graph) {
      n.freed = true;
      n.release();
    }
    n.clear_outputs(false);
  }
  // The node sweep of backward, calling each gradient hook right after the last node that could
  // write its leaf's gradient, then the end hooks.
  void sweep_with_hooks(bool keep_graph) {
    std::size_t const n = nodes_.size();
    std::vector<std::pair<std::size_t, std::size_t>> order; // (ready after node, hook)
    order.reserve(grad_hooks_.size());
    for (std::size_t h = 0; h < grad_hooks_.size(); ++h)
      order.emplace_back(grad_hooks_[h].ready_after(generation_, n), h);
    std::stable_sort(order.begin(), order.end(),
                     [](auto const &a, auto const &b) { return a.first > b.first; });
    std::size_t k = 0;
    auto fire_ready = [&](std::size_t i) {
      for (; k < order.size() && order[k].first >= i; ++k)
        grad_hooks_[order[k].second].fire();
    };
    fire_ready(n);
    for (std::size_t i = n; i-- > 0;) {
      prefetch_ahead(i);
      run_node(*nodes_[i], keep_graph);
      fire_ready(i);
    }
    for (auto &h : end_hooks_)
      h.fire();
  }
  // Applies a step to every live leaf and forgets the leaves whose variables are gone.
  void each_leaf(detail::leaf_step step) {
    std::erase_if(leaves_, [step](auto &f) { return !f(step); });
  }
  void destroy_nodes() {
    // (asking for a node's slots a few nodes ahead: on a long tape they were written long before)
    std::size_t const n = nodes_.size();
    for (std::size_t i = 0; i < n; ++i) {
      if (i + 2 * prefetch_distance < n)
        nodes_[i + 2 * prefetch_distance]->prefetch_outputs();
      nodes_[i]->~node();
    }
    nodes_.clear();
  }

  detail::arena arena_;
  std::uint64_t generation_ = 0;
  bool grad_enabled_ = true;
  std::vector<detail::node *> nodes_;              // in the arena
  std::vector<std::shared_ptr<void>> held_leaves_; // (hold_leaf)
  std::vector<std::function<bool(detail::leaf_step)>> leaves_;
  struct grad_hook {
    hook_id id;
    std::function<std::size_t(std::uint64_t, std::size_t)> ready_after;
    std::function<void()> fire;
  };
  struct end_hook {
    hook_id id;
    std::function<void()> fire;
  };
  std::vector<grad_hook> grad_hooks_;
  std::vector<end_hook> end_hooks_;
  hook_id last_hook_ = 0;
};

template <class T>
void tape::backward(std::vector<var<T>> const &outputs, std::vector<tensor<T>> const &seeds,
                    bool keep_graph) {
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
    if (!o.slot()->is_leaf && o.slot()->generation != generation_)
      throw tape_error("dualcast::tape::backward: output " + std::to_string(i) +
                       " was computed before tape::clear(), which freed the operations "
                       "behind it; compute it again after clear() (or call backward before "
                       "clear())");
    if (!(seeds[i].dims() == o.dims()))
      throw shape_error("dualcast::tape::backward: seed " + std::to_string(i) + " has shape " +
                        to_string(seeds[i].dims()) + " but output " + std::to_string(i) +
                        " has shape " + to_string(o.dims()));
    if (!(seeds[i].dev() == o.value().dev()))
      throw device_error("dualcast::tape::backward: seed " + std::to_string(i) + " is on " +
                         to_string(seeds[i].dev()) + " but output " + std::to_string(i) +
                         " is on " + to_string(o.value().dev()));
  }
  // On the tape's stream (one thread-local write per backward; none without a stream).
  detail::stream_scope_if const scope(stream, !stream.is_default());
  // An intermediate's kept gradient is that of the last backward: a gradient left from an
  // earlier one must not make its (possibly freed) node look reached.
  for (detail::node *n : nodes_)
    n->clear_outputs(true);
  each_leaf(detail::leaf_step::stash);
  detail::backward_scope const running; // (the gradients it allocates: grad_tensor::made_by)
  try {
    for (std::size_t i = 0; i < outputs.size(); ++i)
      detail::seed_grad(*outputs[i].slot(), seeds[i], ex);
    if (grad_hooks_.empty() && end_hooks_.empty()) {
      for (std::size_t i = nodes_.size(); i-- > 0;) {
        prefetch_ahead(i);
        run_node(*nodes_[i], keep_graph);
      }
    } else {
      sweep_with_hooks(keep_graph);
    }
  } catch (...) {
    // Nodes already run stay consumed (as after a successful backward: without keep_graph
    // their saved tensors are freed as backward goes, which bounds its memory), the leaf
    // gradients go back to what they were and the intermediate ones are dropped.
    for (detail::node *n : nodes_)
      n->clear_outputs(true);
    each_leaf(detail::leaf_step::rollback);
    throw;
  }
  each_leaf(detail::leaf_step::commit);
}
template <class T> var<T> tape::variable(tensor<T> value, bool requires_grad) {
  if (!detail::cuda_tape_available && !value.dev().is_host())
    detail::no_cuda_here("dualcast::tape::variable", value.dev());
  if (!requires_grad)
    return var<T>(std::move(value), nullptr, this);
  auto slot = detail::make_slot<T>();
  slot->dims = value.dims();
  slot->dev = value.dev();
  slot->side(); // (a leaf's held / held_zero / replace_held / first_use: see grad_slot)
  leaves_.push_back([w = std::weak_ptr<detail::grad_slot<T>>(slot)](detail::leaf_step step) {
    auto const s = w.lock();
    if (!s)
      return false;
    auto &h = *s->side_; // (made above)
    switch (step) {
    case detail::leaf_step::zero:
      if (s->grad.defined())
        s->grad->fill_(T(0));
      h.held_zero = true;
      break;
    case detail::leaf_step::stash:
      h.held = s->grad.take();
      h.replace_held = false;
      break;
    case detail::leaf_step::commit:
      if (!s->grad.defined()) {
        s->grad = std::move(h.held); // not reached by this backward
      } else {
        if (h.held.defined() && !h.held_zero && !h.replace_held)
          detail::add_into(s->grad.get(), h.held);
        h.held_zero = false;
      }
      h.held = tensor<T>{};
      h.replace_held = false;
      break;
    case detail::leaf_step::rollback:
      s->grad = std::move(h.held);
      h.held = tensor<T>{};
      h.replace_held = false;
      break;
    }
    return true;
  });
  return var<T>(std::move(value), std::move(slot), this);
}

template <class T> var<T> tape::make_output(tensor<T> value, bool needs) {
  if (!needs || !grad_enabled_)
    return var<T>(std::move(value), nullptr, this);
  auto slot = detail::make_slot<T>();
  slot->dims = value.dims();
  slot->dev = value.dev();
  slot->is_leaf = false;
  slot->generation = generation_;
  return var<T>(std::move(value), std::move(slot), this);
}

template <class T> void tape::backward(var<T> const &loss, bool keep_graph) {
  detail::stream_scope_if const scope(stream, !stream.is_default());
  if (loss.size() != 1)
    throw tape_error("dualcast::tape::backward: the output has shape " + to_string(loss.dims()) +
                     "; a non-scalar output needs seeds: backward({outputs}, {seeds})");
  backward(std::vector<var<T>>{loss},
           std::vector<tensor<T>>{tensor<T>::full(loss.dims(), T(1), loss.value().dev())},
           keep_graph);
}
#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE void tape::backward<T>(std::vector<var<T>> const &,                         \
                                              std::vector<tensor<T>> const &, bool);               \
  DUALCAST_INSTANTIATE void tape::backward<T>(var<T> const &, bool);                               \
  DUALCAST_INSTANTIATE var<T> tape::variable<T>(tensor<T>, bool);                                  \
  DUALCAST_INSTANTIATE var<T> tape::make_output<T>(tensor<T>, bool);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X

} // namespace DUALCAST_TAPE_ABI

namespace detail {
// Opens tp's stream (a stream_scope) around an operation's work on device d when tp has a stream
// and d is a CUDA device; otherwise nothing (host tensors' paths touch no thread-local state).
inline stream_scope_if tape_stream_scope(tape const *tp, device const &d) {
  bool const on = tp && !d.is_host() && !tp->stream.is_default();
  return stream_scope_if(on ? tp->stream : stream_handle{}, on);
}
// The same for the tape of the first variable among args (for an operation that uploads indices
// or reads values before its custom_op, which checks that the variables share one tape).
template <class... A> stream_scope_if operands_stream_scope(device const &d, A const &...a) {
  tape *tp = nullptr;
  auto one = [&](auto const &x) {
    if constexpr (requires { x.owner(); })
      tp = tp ? tp : x.owner();
  };
  (one(a), ...);
  return tape_stream_scope(tp, d);
}
} // namespace detail

inline namespace DUALCAST_TAPE_ABI {
template <class T> T var<T>::item() const {
  auto const scope = detail::tape_stream_scope(owner(), value().dev());
  return value().item();
}
template <class T> tensor<T> var<T>::zeros_on_tape_stream() const {
  auto const scope = detail::tape_stream_scope(owner(), value().dev());
  return tensor<T>::zeros(dims(), value().dev());
}
} // namespace DUALCAST_TAPE_ABI

template <class T> struct is_var : std::false_type {};
template <class T> struct is_var<var<T>> : std::true_type {};
template <class T> inline constexpr bool is_var_v = is_var<std::remove_cvref_t<T>>::value;

// A variable or a lazy elementwise expression over variables (ops/lazy/expr.hpp), which every
// operation accepts and materialises (ONE fused node) first.
template <class X>
concept lazy_expr = requires {
  std::remove_cvref_t<X>::is_dualcast_expr;
};
template <class X>
concept var_like = is_var_v<X> || lazy_expr<X>;
namespace detail {
template <class X> decltype(auto) as_var(X const &x) {
  if constexpr (lazy_expr<X>)
    return x.eval();
  else
    return (x);
}
template <class X>
using var_of_t = std::remove_cvref_t<decltype(as_var(std::declval<X const &>()))>;
// Whether operand X (a variable, a lazy expression or a tensor) holds plain numbers: an operation
// that a tape over duals does not support yet refuses dual elements with it at compile time,
// naming itself (docs/higher-order.md lists the operations that take them).
template <class X> constexpr bool plain_operand() {
  if constexpr (is_tensor_v<X>)
    return !is_dual_v<typename std::remove_cvref_t<X>::value_type>;
  else if constexpr (var_like<X>)
    return !is_dual_v<typename var_of_t<X>::value_type>;
  else
    return true;
}
} // namespace detail

namespace detail {
// An operand of an operation being recorded must still have the graph behind it: an intermediate
// computed before its tape's last clear() lost its node, so a gradient reaching it would stop
// there without a word (an RNN's hidden state carried into the next iteration). Nothing is
// recorded while gradients are disabled, so its value may be used there.
[[noreturn, gnu::noinline]] inline void graph_freed(char const *op) {
  throw tape_error(std::string(op) +
                   ": an operand was computed before tape::clear(), which freed the "
                   "operations behind it, so no gradient could flow through it; pass "
                   "dualcast::detach(x) to use its value as a constant (the gradient stops "
                   "there, as in truncated backpropagation through time), or call clear() "
                   "only after the last backward that should reach it");
}
// A leaf's first use in its tape's generation (see grad_slot::first_use), and from its first use
// by an operation that records, the tape's reference to its slot (a node's plain pointer to it).
template <class T>
[[gnu::noinline]] void leaf_first_use(std::shared_ptr<grad_slot<T>> const &slot, tape &tp) {
  auto &side = slot->side();
  if (side.use_generation != tp.generation()) {
    side.use_generation = tp.generation();
    side.first_use = tp.node_count();
  }
  if (side.held_generation != tp.generation() && tp.grad_enabled()) {
    side.held_generation = tp.generation();
    tp.hold_leaf(slot);
  }
}
// (inline, the rare work out of line: it runs for every operand of every operation -- a lazy
// expression's every variable, too -- and as a call with the message built in place it took 2 %
// of the GradBench lstm jacobian)
template <class T> inline void check_graph_alive(char const *op, var<T> const &x) {
  auto *const s = x.slot().get();
  tape *const tp = x.owner();
  if (!s || !tp)
    return;
  if (s->is_leaf) {
    auto const *side = s->side_.get();
    std::uint64_t const g = tp->generation();
    if (!side || side->use_generation != g || (side->held_generation != g && tp->grad_enabled()))
      leaf_first_use(x.slot(), *tp);
  } else if (s->generation != tp->generation() && tp->grad_enabled()) {
    graph_freed(op);
  }
}

// Finds the tape of the variables among args (all must share it); nullptr if there are none.
template <class... A> tape *tape_of(char const *op, A const &...a) {
  tape *t = nullptr;
  auto one = [&](auto const &x) {
    if constexpr (is_var_v<decltype(x)>) {
      if (t && x.owner() != t)
        throw tape_error(std::string(op) + ": arguments are variables of different tapes");
      check_graph_alive(op, x);
      t = x.owner();
    }
  };
  (one(a), ...);
  return t;
}
} // namespace detail

} // namespace dualcast

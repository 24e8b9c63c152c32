// dualcast/tape/custom_op.hpp: the public way to add an operation to the tape -- a forward on
// tensors, what it saves, and a backward that receives the output cotangents and writes the input
// gradients, run on the device the operands live on. Every operation of the library that is not
// the fused elementwise node is written with it (ops/), and so can yours:
//
//   template <class T> dualcast::var<T> cube(dualcast::var<T> const &x) {
//     return dualcast::custom_op(
//         "cube",
//         [](auto const &ex, auto &ctx, dualcast::tensor<T> const &xv) {      // forward
//           ctx.save(xv, "input");                                           // version-checked
//           auto y = dualcast::tensor<T>::empty(xv.dims(), xv.dev());
//           dualcast::apply(ex, cube_kernel, dualcast::out(y.raw_view()), xv.cview());
//           return y;
//         },
//         [](auto const &ex, auto const &ctx, auto &g) {                       // backward
//           if (g.needs(0))   // d/dx x^3 = 3 x^2, times the output's cotangent
//             g.add(0, ...g.out(0) and ctx.saved(0)..., ex);
//         },
//         x);
//   }
//
// Arguments after the two functions are the operation's inputs: variables (differentiated when
// they require gradients), lazy expressions (materialised first) or tensors (constants). A
// std::vector of variables gives an operation with a run-time number of inputs.
//
// forward(ex, ctx, values...) runs at once on the executor of the inputs' device (`ex`: the tape's
// dualcast::cpu for host tensors; dualcast::cuda for CUDA tensors in nvcc translation units) with
// the inputs' values, and returns the output value: a tensor<T>, or std::array<tensor<T>, K> for K
// outputs (then custom_op returns std::array<var<T>, K>). Through ctx it saves tensors for backward
// (ctx.save(t, what): kept alive, and checked before backward that nothing wrote them in place
// since; tensors captured by the functions instead are not checked) and sets ctx.data, a value of
// the optional first template argument State, for whatever else backward needs (indices it
// computed, say). ctx.requires_grad() says whether backward will run at all.
//
// backward(ex, ctx, g) runs during tape::backward on the same device, once some output has a
// gradient (each node at most once per backward). g gives:
//   g.out(k)       the cotangent d L / d y_k (zeros, broadcast with stride 0, where y_k has none)
//   g.reached(k)   whether y_k has a gradient
//   g.needs(i)     whether input i requires a gradient (write nothing for the others)
//   g.add(i, t)    input i's gradient += t (t of input i's shape or of a shape it broadcasts to:
//                  then summed over the broadcast dimensions); a temporary given as an rvalue
//                  becomes the gradient itself when it is the first (no copy)
//   g.target(i)    {tensor, accumulate} for a backward that writes EVERY element of input i's
//                  gradient itself: add into it when accumulate, else overwrite it
//   g.zeroed(i)    input i's gradient, zero-filled when new: for backwards that write some
//                  elements (scatters)
// Gradients may be strided views (the gradient of a slice is a view of its base's gradient).
//
// Recording is cheap (the node lives in the tape's arena); when no input requires a gradient, or
// gradients are disabled on the tape (dualcast::no_grad), nothing is recorded, ctx.requires_grad()
// is false and the outputs are variables without gradients.
#pragma once

#include <dualcast/core/errors.hpp>
#include <dualcast/tape/detail/arena.hpp>
#include <dualcast/tape/detail/grad_slot.hpp>
#include <dualcast/tape/detail/tape_node.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/detail/device_dispatch.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace dualcast {

// custom_op computes in its element type, so it refuses bfloat16 / half variables: a user's
// operation stops here. The library's own operations refuse them earlier, each naming itself
// (DUALCAST_REFUSE_FLOAT16, ops/detail/float16_tape.hpp); docs/mixed-precision.md lists the
// operations that take them.
#define DUALCAST_FLOAT16_REFUSED                                                                   \
  "dualcast::custom_op: this tape operation does not take bfloat16 / half variables "              \
  "(docs/mixed-precision.md lists the ones that do: elementwise and fused nodes, the cells, "      \
  "slice, sum, mean, matmul, softmax, log_softmax, logsumexp, cast); cast the operand to float "   \
  "first: dualcast::cast<float>(x)"

// No state beyond saved tensors (the default State of custom_op).
struct no_state {};

inline namespace DUALCAST_TAPE_ABI { // see tensor/detail/device_dispatch.hpp

// What forward hands to backward: saved tensors (version-checked) and a State value.
template <class T, class State = no_state> class op_context {
public:
  explicit op_context(bool requires_grad, cpu const &host)
      : requires_grad_(requires_grad), host_(host) {}

  State data{};

  // Keeps t for backward; backward throws version_error if t was written in place since (the
  // message names the operation and `what`). Returns t.
  tensor<T> const &save(tensor<T> const &t, char const *what = nullptr) {
    if (requires_grad_ && t.defined()) {
      saved_.push_back(t);
      what_.push_back(what);
    }
    return t;
  }
  // The i-th saved tensor (in save order).
  tensor<T> const &saved(std::size_t i) const { return kept_.size() ? kept_[i] : saved_[i]; }
  std::size_t saved_count() const { return kept_.size() + saved_.size(); }
  // Whether backward will run (some input requires a gradient): forward may skip saving when not.
  bool requires_grad() const { return requires_grad_; }
  // The tape's CPU executor (what host tensors' work runs on).
  cpu const &host() const { return host_; }

  // Internal: room for n saves (an operation with a run-time number of inputs saving each: the
  // fused node on duals saves its 13 arrays, which grew both vectors five times).
  void reserve_saves(std::size_t n) {
    if (requires_grad_) {
      saved_.reserve(n);
      what_.reserve(n);
    }
  }
  // Internal: the version checks of the saved tensors.
  std::vector<detail::saved_tensor> checks() const {
    std::vector<detail::saved_tensor> r;
    r.reserve(saved_.size());
    for (std::size_t i = 0; i < saved_.size(); ++i)
      r.push_back(what_[i] ? detail::save(saved_[i], what_[i])
                           : detail::save(saved_[i], "saved tensor", int(i)));
    return r;
  }
  // Internal: moves the saved tensors into the tape's memory once forward is done, so that a
  // recorded node holds no heap blocks of its own (a matmul's node kept two: 368 bytes).
  void keep_in(detail::arena &mem) {
    if (saved_.empty())
      return;
    kept_ = detail::arena_array<tensor<T>>(mem, saved_.size());
    for (std::size_t i = 0; i < saved_.size(); ++i)
      kept_[i] = std::move(saved_[i]);
    std::vector<tensor<T>>().swap(saved_);
    std::vector<char const *>().swap(what_);
  }

private:
  bool requires_grad_;
  cpu host_;
  std::vector<tensor<T>> saved_; // while forward runs
  std::vector<char const *> what_;
  detail::arena_array<tensor<T>> kept_; // after keep_in
};

// The gradient side of one operation with NI inputs (a run-time number when NI is
// dynamic_inputs) and NO outputs, as backward sees it.
inline constexpr std::size_t dynamic_inputs = std::size_t(-1);

template <class T, std::size_t NI, std::size_t NO> class op_grads {
  using slot_ptr = std::shared_ptr<detail::grad_slot<T>>;
  using in_slots = std::conditional_t<NI == dynamic_inputs, std::vector<slot_ptr>,
                                      std::array<slot_ptr, NI == dynamic_inputs ? 1 : NI>>;

public:
  op_grads(in_slots const &in, std::array<slot_ptr, NO> const &out, cpu const &host)
      : in_(in), out_(out), host_(host) {}

  std::size_t inputs() const { return in_.size(); }
  static constexpr std::size_t outputs() { return NO; }

  bool reached(std::size_t k) const { return out_[k] && out_[k]->grad.defined(); }
  tensor<T> out(std::size_t k) const { return detail::out_grad(*out_[k]); }
  bool needs(std::size_t i) const { return in_[i] != nullptr; }
  shape input_shape(std::size_t i) const { return in_[i]->dims.get(); }

  void add(std::size_t i, tensor<T> const &t) const {
    if (in_[i])
      detail::accumulate_grad(*in_[i], t, host_);
  }
  // A temporary given up: a fresh gradient may take its storage instead of a copy.
  void add(std::size_t i, tensor<T> &&t) const {
    if (in_[i])
      detail::accumulate_grad(*in_[i], std::move(t), host_);
  }
  std::pair<tensor<T>, bool> target(std::size_t i) const { return detail::grad_target(*in_[i]); }
  tensor<T> zeroed(std::size_t i) const { return detail::grad_zeroed(*in_[i]); }
  cpu const &host() const { return host_; }

private:
  in_slots const &in_;
  std::array<slot_ptr, NO> const &out_;
  cpu const &host_;
};

} // namespace DUALCAST_TAPE_ABI

namespace detail {

template <class T, class X> tensor<T> const &value_of_input(X const &x) {
  if constexpr (is_var_v<X>)
    return x.value();
  else
    return x;
}
template <class X> struct input_elem { using type = void; };
template <class T> struct input_elem<var<T>> { using type = T; };
template <class T> struct input_elem<tensor<T>> { using type = T; };

template <class R> struct outputs_of {
  static constexpr std::size_t count = 1;
  template <class T> static std::array<tensor<T>, 1> list(tensor<T> const &y) { return {y}; }
};
template <class T, std::size_t K> struct outputs_of<std::array<tensor<T>, K>> {
  static constexpr std::size_t count = K;
  static std::array<tensor<T>, K> const &list(std::array<tensor<T>, K> const &y) { return y; }
};

// Records the node of a custom operation whose forward has run: outputs `ys`, input slots `in`.
template <class T, class State, std::size_t NI, std::size_t NO, class Slots, class Bwd>
auto record_custom(std::string_view name, tape *tp, device const &dev, cpu const &host,
                   std::array<tensor<T>, NO> const &ys, Slots in, op_context<T, State> &&ctx,
                   Bwd &&bwd, bool needs) {
  std::array<var<T>, NO> r;
  if (!tp || !needs) {
    for (std::size_t k = 0; k < NO; ++k)
      r[k] = var<T>(ys[k], nullptr, tp);
    return r;
  }
  std::array<std::shared_ptr<grad_slot<T>>, NO> outs;
  for (std::size_t k = 0; k < NO; ++k) {
    r[k] = tp->make_output(ys[k], true);
    outs[k] = r[k].slot();
  }
  auto checks = ctx.checks();
  ctx.keep_in(tp->node_memory());
  // (the output slots: the node's, handed to backward)
  tp->record<T, NO>(
      name, outs,
      [bwd = std::forward<Bwd>(bwd), ctx = std::move(ctx), in = std::move(in), host,
       dev](std::array<std::shared_ptr<grad_slot<T>>, NO> const &outs) {
        op_grads<T, NI, NO> g(in, outs, host);
        on_device("dualcast::custom_op (backward)", dev, host,
                  [&](auto const &ex) { bwd(ex, ctx, g); });
      },
      checks.data(), checks.size());
  return r;
}

template <std::size_t NO, class T> auto unwrap(std::array<var<T>, NO> &&r) {
  if constexpr (NO == 1)
    return std::move(r[0]);
  else
    return std::move(r);
}

} // namespace detail

// A new tape operation from a forward and a backward (see the file comment), with fixed inputs.
template <class State = no_state, class Fwd, class Bwd, class... In>
requires((var_like<In> || is_tensor_v<In>)&&...) auto custom_op(std::string_view name, Fwd &&fwd,
                                                                Bwd &&bwd, In const &...in) {
  if constexpr ((lazy_expr<In> || ...)) {
    return custom_op<State>(name, std::forward<Fwd>(fwd), std::forward<Bwd>(bwd),
                            detail::as_var(in)...);
  } else {
    using T = typename std::common_type<typename detail::input_elem<In>::type...>::type;
    static_assert(((std::is_same_v<typename detail::input_elem<In>::type, T>)&&...),
                  "dualcast::custom_op: all inputs must have one element type");
    static_assert(!is_float16_v<T>, DUALCAST_FLOAT16_REFUSED);
    constexpr std::size_t NI = sizeof...(In);
    std::string const op(name);
    tape *tp = detail::tape_of(op.c_str(), in...);
    device const devs[] = {detail::value_of_input<T>(in).dev()...};
    for (std::size_t i = 1; i < NI; ++i)
      if (!(devs[i] == devs[0]))
        detail::devices_differ(op.c_str(), 0, devs[0], int(i), devs[i]);
    device const dev = devs[0];
    std::array<std::shared_ptr<detail::grad_slot<T>>, NI> slots{};
    bool needs = false;
    {
      std::size_t i = 0;
      auto one = [&](auto const &x) {
        if constexpr (is_var_v<decltype(x)>)
          slots[i] = x.slot();
        needs = needs || slots[i] != nullptr;
        ++i;
      };
      (one(in), ...);
    }
    needs = needs && tp && tp->grad_enabled(); // (no_grad: nothing recorded)
    cpu const host = tp ? tp->ex : detail::ambient_cpu();
    auto const on_stream = detail::tape_stream_scope(tp, dev); // (CUDA tensors: the tape's stream)
    op_context<T, State> ctx(needs && tp, host);
    auto y = detail::on_device(op, dev, host, [&](auto const &ex) {
      return fwd(ex, ctx, detail::value_of_input<T>(in)...);
    });
    using R = std::remove_cvref_t<decltype(y)>;
    constexpr std::size_t NO = detail::outputs_of<R>::count;
    std::array<tensor<T>, NO> ys = detail::outputs_of<R>::list(y);
    return detail::unwrap<NO>(detail::record_custom<T, State, NI, NO>(
        name, tp, dev, host, ys, std::move(slots), std::move(ctx), std::forward<Bwd>(bwd), needs));
  }
}

// The same with a run-time number of inputs: forward receives std::vector<tensor<T>> const &.
template <class State = no_state, class T, class Fwd, class Bwd>
auto custom_op(std::string_view name, Fwd &&fwd, Bwd &&bwd, std::vector<var<T>> const &in) {
  static_assert(!is_float16_v<T>, DUALCAST_FLOAT16_REFUSED);
  std::string const op(name);
  tape *tp = nullptr;
  std::vector<std::shared_ptr<detail::grad_slot<T>>> slots(in.size());
  std::vector<tensor<T>> values(in.size());
  bool needs = false;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i].owner()) {
      if (tp && tp != in[i].owner())
        throw tape_error(op + ": inputs of different tapes");
      detail::check_graph_alive(op.c_str(), in[i]);
      tp = in[i].owner();
    }
    if (!(in[i].value().dev() == in[0].value().dev()))
      detail::devices_differ(op.c_str(), 0, in[0].value().dev(), int(i), in[i].value().dev());
    slots[i] = in[i].slot();
    values[i] = in[i].value();
    needs = needs || slots[i] != nullptr;
  }
  if (in.empty())
    throw shape_error(op + ": no inputs");
  needs = needs && tp && tp->grad_enabled(); // (no_grad: nothing recorded)
  device const dev = in[0].value().dev();
  cpu const host = tp ? tp->ex : detail::ambient_cpu();
  auto const on_stream = detail::tape_stream_scope(tp, dev); // (CUDA tensors: the tape's stream)
  op_context<T, State> ctx(needs && tp, host);
  ctx.reserve_saves(in.size());
  auto y = detail::on_device(op, dev, host, [&](auto const &ex) { return fwd(ex, ctx, values); });
  using R = std::remove_cvref_t<decltype(y)>;
  constexpr std::size_t NO = detail::outputs_of<R>::count;
  std::array<tensor<T>, NO> ys = detail::outputs_of<R>::list(y);
  return detail::unwrap<NO>(detail::record_custom<T, State, dynamic_inputs, NO>(
      name, tp, dev, host, ys, std::move(slots), std::move(ctx), std::forward<Bwd>(bwd), needs));
}

} // namespace dualcast

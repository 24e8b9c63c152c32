// dualcast/nn/optim.hpp: optimizers that update tape variables in place -- SGD (momentum,
// dampening, Nesterov, weight decay) and Adam (bias-corrected; L2 or decoupled weight decay:
// AdamW), with PyTorch's update rules.
//
//   dualcast::tape tp;
//   dualcast::parameters<float> ps;
//   auto w = ps.add("w", tp.variable(W0));       // once: variables outlive tp.clear()
//   dualcast::adam opt(ps, {.lr = 1e-2});        // or dualcast::sgd opt(ps, {.lr = 0.1, .momentum
//   = 0.9}) for (int it = 0; it < steps; ++it) {
//     auto loss = model(w, x);                   // forward: records nodes
//     tp.backward(loss);                         // w.grad()
//     opt.step();                                // w.value() updated in place
//     tp.zero_grad();                            // (or opt.zero_grad() / ps.zero_grad())
//     tp.clear();                                // forget this iteration's nodes
//   }
//
// step() reads each variable's gradient and writes its value in place (on the value's device, on
// the optimizer's executor `ex` for host tensors): the variable keeps its identity (its gradient
// slot, its place in the list), so the next forward uses the new value. The write bumps the
// value's storage version, as every in-place write does: a graph recorded before step() that
// saved the value (matmul saves its operands) is stale and backward through it throws
// dualcast::version_error -- call backward before step(), clear() after it. Optimizer state (the
// momentum buffer, Adam's moments) is plain tensors of the optimizer, never seen by a tape.
// Variables that require no gradient, and variables that no backward has reached yet (no
// gradient held: has_grad() false), are skipped, as PyTorch skips parameters whose grad is None.
// Values that are not contiguous (a transposed view) are updated through a contiguous copy.
// A CUDA variable's update (and zero_grad, and its state's creation) runs on the stream of the
// variable's tape when that tape has one (dualcast::tape::stream), else on the current stream.
//
// SGD, per element (g the gradient, p the value, b the momentum buffer):
//   g += weight_decay * p
//   if momentum != 0: b = (first step ? g : momentum * b + (1 - dampening) * g)
//                     g = nesterov ? g + momentum * b : b
//   p -= lr * g
// Adam, per element at step t = 1, 2, ...:
//   if weight_decay != 0: decoupled ? p *= 1 - lr * weight_decay : g += weight_decay * p
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
//   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Hyperparameters are doubles, rounded to T in the update. options() may be changed between
// steps (a learning-rate schedule).
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/arrays/stored_view.hpp>
#include <dualcast/backend/seam.hpp>
#include <dualcast/broadcast/for_each.hpp>
#include <dualcast/core/compiled.hpp>
#include <dualcast/core/config.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/nn/parameters.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/detail/device_dispatch.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dualcast {

struct sgd_options {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};
struct adam_options {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled_weight_decay = false; // true: AdamW
};

namespace detail {
// One SGD step over n contiguous elements (function objects: nvcc runs them on the GPU too).
template <class T> struct sgd_update {
  T *p;
  T const *g;
  T *buf; // null without momentum
  T lr, momentum, dampening, weight_decay;
  bool nesterov, first;
  DUALCAST_HD void operator()(index_t i) const {
    T gi = g[i];
    if (weight_decay != T(0))
      gi += weight_decay * p[i];
    if (buf) {
      T const b = first ? gi : momentum * buf[i] + (T(1) - dampening) * gi;
      buf[i] = b;
      gi = nesterov ? gi + momentum * b : b;
    }
    p[i] -= lr * gi;
  }
};
template <class T> struct adam_update {
  T *p;
  T const *g;
  T *m, *v;
  T lr, beta1, beta2, eps, weight_decay;
  T step_size, bc2_sqrt; // lr / (1 - beta1^t), sqrt(1 - beta2^t)
  bool decoupled;
  DUALCAST_HD void operator()(index_t i) const {
    using std::sqrt;
    T gi = g[i];
    if (weight_decay != T(0) && decoupled)
      p[i] *= T(1) - lr * weight_decay;
    else if (weight_decay != T(0))
      gi += weight_decay * p[i];
    m[i] = beta1 * m[i] + (T(1) - beta1) * gi;
    v[i] = beta2 * v[i] + (T(1) - beta2) * gi * gi;
    p[i] -= step_size * m[i] / (sqrt(v[i]) / bc2_sqrt + eps);
  }
};

inline void check_hyper(char const *op, char const *name, double x, bool ok) {
  if (!ok || std::isnan(x))
    throw error(std::string(op) + ": invalid " + name + " " + std::to_string(x));
}

inline namespace DUALCAST_TAPE_ABI { // see tensor/detail/device_dispatch.hpp
// The variables an optimizer updates (a copy of the handles) and their per-variable state.
template <class T> class optimizer_base {
  static_assert(!is_float16_v<T>,
                "dualcast optimizers update float or double parameters: keep bfloat16 / half "
                "models' parameters as float master weights and cast them on the tape "
                "(docs/mixed-precision.md)");

public:
  // The executor host tensors' updates run on.
  cpu ex{};

  // Sets the gradients of the optimizer's variables to zero.
  void zero_grad() const {
    for (auto const &v : vars_)
      if (v.has_grad()) {
        auto const on_stream = tape_stream_scope(v.owner(), v.value().dev());
        v.grad().fill_(T(0));
      }
  }
  // The number of step() calls so far.
  std::int64_t step_count() const { return steps_; }
  std::size_t size() const { return vars_.size(); }

protected:
  explicit optimizer_base(parameters<T> const &ps) {
    for (auto const &p : ps)
      vars_.push_back(p.v);
  }
  explicit optimizer_base(std::vector<var<T>> vars) : vars_(std::move(vars)) {}

  // For each variable with a gradient: f(ex, i, p, g) with p its value (contiguous; written back
  // if the value is not) and g its gradient (contiguous), on the value's device. The value's
  // version is bumped.
  template <class F> void each_update(char const *op, F const &f) {
    for (std::size_t i = 0; i < vars_.size(); ++i) {
      var<T> const &v = vars_[i];
      if (!v.requires_grad() || !v.has_grad())
        continue;
      auto const on_stream = tape_stream_scope(v.owner(), v.value().dev()); // (CUDA: its stream)
      tensor<T> const &value = v.value();
      tensor<T> const g = v.grad().contiguous();
      common_device(op, value.dev(), g.dev());
      tensor<T> work = value.is_contiguous() ? value : value.clone();
      work.bump_version();
      on_device(op, value.dev(), ex, [&](auto const &e) { f(e, i, work, g); });
      if (!value.is_contiguous())
        value.copy_(work);
    }
    ++steps_;
  }
  // Per-variable state: a zero tensor shaped like variable i, made on first use.
  tensor<T> &state(std::vector<tensor<T>> &s, std::size_t i) {
    if (s.size() < vars_.size())
      s.resize(vars_.size());
    if (!s[i].defined())
      s[i] = tensor<T>::zeros(vars_[i].dims(), vars_[i].value().dev());
    return s[i];
  }

  std::vector<var<T>> vars_;
  std::int64_t steps_ = 0;
};
} // namespace DUALCAST_TAPE_ABI
} // namespace detail

inline namespace DUALCAST_TAPE_ABI { // see tensor/detail/device_dispatch.hpp

// Stochastic gradient descent with momentum (see the file comment).
template <class T> class sgd : public detail::optimizer_base<T> {
public:
  sgd(parameters<T> const &ps, sgd_options o);
  sgd(std::vector<var<T>> vars, sgd_options o);
  sgd(sgd const &) = default;
  sgd(sgd &&) noexcept = default;
  sgd &operator=(sgd const &) = default;
  sgd &operator=(sgd &&) noexcept = default;
  ~sgd(); // (these three defined below the class: not inline, see step)

  // (Defined below the class: not inline, so that the compiled component can hold it.)
  void step();

  sgd_options &options() { return opt_; }
  sgd_options const &options() const { return opt_; }
  // The momentum buffer of variable i (undefined before its first step with momentum).
  tensor<T> momentum_buffer(std::size_t i) const { return i < buf_.size() ? buf_[i] : tensor<T>{}; }

private:
  void check() const {
    char const *op = "dualcast::sgd";
    detail::check_hyper(op, "lr", opt_.lr, opt_.lr >= 0);
    detail::check_hyper(op, "momentum", opt_.momentum, opt_.momentum >= 0);
    detail::check_hyper(op, "dampening", opt_.dampening, true);
    detail::check_hyper(op, "weight_decay", opt_.weight_decay, opt_.weight_decay >= 0);
    if (opt_.nesterov && (opt_.momentum <= 0 || opt_.dampening != 0))
      throw error("dualcast::sgd: Nesterov momentum needs momentum > 0 and dampening 0");
  }
  sgd_options opt_;
  std::vector<tensor<T>> buf_;
};

// Adam (see the file comment).
template <class T> class adam : public detail::optimizer_base<T> {
public:
  adam(parameters<T> const &ps, adam_options o);
  adam(std::vector<var<T>> vars, adam_options o);
  adam(adam const &) = default;
  adam(adam &&) noexcept = default;
  adam &operator=(adam const &) = default;
  adam &operator=(adam &&) noexcept = default;
  ~adam(); // (these three defined below the class: not inline, see step)

  // (Defined below the class: not inline, so that the compiled component can hold it.)
  void step();

  adam_options &options() { return opt_; }
  adam_options const &options() const { return opt_; }
  // Variable i's first and second moment estimates (undefined before its first step).
  tensor<T> first_moment(std::size_t i) const { return i < m_.size() ? m_[i] : tensor<T>{}; }
  tensor<T> second_moment(std::size_t i) const { return i < v_.size() ? v_[i] : tensor<T>{}; }

private:
  void check() const {
    char const *op = "dualcast::adam";
    detail::check_hyper(op, "lr", opt_.lr, opt_.lr >= 0);
    detail::check_hyper(op, "beta1", opt_.beta1, opt_.beta1 >= 0 && opt_.beta1 < 1);
    detail::check_hyper(op, "beta2", opt_.beta2, opt_.beta2 >= 0 && opt_.beta2 < 1);
    detail::check_hyper(op, "eps", opt_.eps, opt_.eps >= 0);
    detail::check_hyper(op, "weight_decay", opt_.weight_decay, opt_.weight_decay >= 0);
  }
  adam_options opt_;
  std::vector<tensor<T>> m_, v_;
  std::vector<std::int64_t> t_;
};

template <class T>
sgd<T>::sgd(parameters<T> const &ps, sgd_options o) : detail::optimizer_base<T>(ps), opt_(o) {
  check();
}
template <class T>
sgd<T>::sgd(std::vector<var<T>> vars, sgd_options o)
    : detail::optimizer_base<T>(std::move(vars)), opt_(o) {
  check();
}
// (An empty body, not `= default`: g++ 12 rejects the explicit instantiation of a destructor
// defaulted outside its class template.)
template <class T> sgd<T>::~sgd() {} // NOLINT(modernize-use-equals-default)

template <class T>
adam<T>::adam(parameters<T> const &ps, adam_options o) : detail::optimizer_base<T>(ps), opt_(o) {
  check();
}
template <class T>
adam<T>::adam(std::vector<var<T>> vars, adam_options o)
    : detail::optimizer_base<T>(std::move(vars)), opt_(o) {
  check();
}
template <class T> adam<T>::~adam() {} // NOLINT(modernize-use-equals-default)

template <class T> void sgd<T>::step() {
  check();
  sgd_options const o = opt_;
  this->each_update("dualcast::sgd::step", [&](auto const &e, std::size_t i, tensor<T> const &p,
                                               tensor<T> const &g) {
    T *buf = nullptr;
    bool first = false;
    if (o.momentum != 0) {
      first = buf_.size() <= i || !buf_[i].defined();
      buf = this->state(buf_, i).raw_data();
    }
    dualcast::for_each(e, p.size(),
                       detail::sgd_update<T>{p.raw_data(), g.data(), buf, T(o.lr), T(o.momentum),
                                             T(o.dampening), T(o.weight_decay), o.nesterov, first});
  });
}

template <class T> void adam<T>::step() {
  check();
  adam_options const o = opt_;
  if (t_.size() < this->vars_.size())
    t_.resize(this->vars_.size(), 0);
  this->each_update("dualcast::adam::step", [&](auto const &e, std::size_t i, tensor<T> const &p,
                                                tensor<T> const &g) {
    // Each variable counts its own steps (a variable skipped while it had no gradient starts
    // its bias correction when it first gets one).
    double const t = double(++t_[i]);
    double const bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
    dualcast::for_each(e, p.size(),
                       detail::adam_update<T>{p.raw_data(), g.data(), this->state(m_, i).raw_data(),
                                              this->state(v_, i).raw_data(), T(o.lr), T(o.beta1),
                                              T(o.beta2), T(o.eps), T(o.weight_decay),
                                              T(o.lr / bc1), T(std::sqrt(bc2)),
                                              o.decoupled_weight_decay});
  });
}

#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE void sgd<T>::step();                                                        \
  DUALCAST_INSTANTIATE sgd<T>::sgd(parameters<T> const &, sgd_options);                            \
  DUALCAST_INSTANTIATE sgd<T>::sgd(std::vector<var<T>>, sgd_options);                              \
  DUALCAST_INSTANTIATE sgd<T>::~sgd();                                                             \
  DUALCAST_INSTANTIATE void adam<T>::step();                                                       \
  DUALCAST_INSTANTIATE adam<T>::adam(parameters<T> const &, adam_options);                         \
  DUALCAST_INSTANTIATE adam<T>::adam(std::vector<var<T>>, adam_options);                           \
  DUALCAST_INSTANTIATE adam<T>::~adam();
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X

template <class T> sgd(parameters<T> const &, sgd_options) -> sgd<T>;
template <class T> adam(parameters<T> const &, adam_options) -> adam<T>;

} // namespace DUALCAST_TAPE_ABI
} // namespace dualcast

// bench/gradbench/modules/particle.hpp: GradBench's `particle` (evals/particle/README.md): a
// charged particle starting at (0, 8) with velocity (0.75, 0) in the field of two unit charges
// at (10, 10 - w) and (10, 0), integrated by Euler steps of 0.1 until it crosses the x axis;
// gradient descent finds the w for which it crosses at the origin (the crossing's x squared,
// by linear interpolation, is minimised). The force is minus the gradient of the potential
// p(x; w) = sum 1 / |x - charge| with respect to x (the inner derivative); the descent needs the
// derivative of the whole trajectory with respect to w (the outer one): nested AD.
//   input {w}; ff, fr, rf, rr -> double (the final w); the first letter is the outer mode.
//
//   ff: both forward: the trajectory on dual<double, 1> (d/dw), the force from a dual<that, 2>.
//   rf: outer reverse: each Euler step is ONE fused node on dualcast's tape (a kernel whose body
//       takes the force by forward mode, dual<., 2>); backward runs over the steps, the nodes'
//       partials coming from the kernel on duals (so dual<dual<., 5>, 2> inside).
//   fr: outer forward, inner reverse: the trajectory on dual<double, 1> (d/dw); each step's force
//       by backward on a tape over those duals (docs/higher-order.md), the potential one fused
//       node of the position's variables, so the force carries its derivative in w.
//   rr: refused with the reason: reverse over reverse needs a tape that records its own backward,
//       and dualcast's gradients are tensors, not tape variables.
#pragma once

#include "common.hpp"
#include "descent.hpp"

#include <dualcast/math/functions.hpp>
#include <dualcast/numbers/dual.hpp>

#include <algorithm>
#include <string>

namespace gradbench::particle {

struct input {
  double w = 0;
};
inline input parse(json const &in) { return {number(field(in, "w"), "w")}; }

constexpr double dt = 0.1;

// grad_x p(x; w) by forward mode: x seeded as the two partials of a dual over T (T itself may
// be a dual of the outer derivative, or of the tape's partials).
template <class X0, class X1, class W> auto force_gradient(X0 const &x0, X1 const &x1, W const &w) {
  using T = decltype(x0 + x1 + w);
  using D = dc::dual<T, 2>;
  D const a = D::variable(T(x0), 0), b = D::variable(T(x1), 1);
  // (inlined: returned through memory, its nested dual was read back whole right after the
  // narrower stores that wrote it, a store-forwarding stall per call: 23 % of the gradient)
  // (rsqrt: one square root and one division per nesting level; 1 / sqrt took a division more
  // at each, in the step's chain of dependent operations: 12 % of the trajectory)
  auto inverse_distance = [&](auto const &cx, auto const &cy) __attribute__((always_inline)) {
    auto const u = cx - a, v = cy - b;
    return dc::rsqrt(u * u + v * v);
  };
  D const p = inverse_distance(T(10.0), T(10.0) - T(w)) + inverse_distance(T(10.0), T(0.0));
  return std::pair<T, T>{p.d[0], p.d[1]};
}

// One Euler step: the position moves by the old velocity, the velocity by the old position's
// force (-grad p).
constexpr auto euler_step = dc::kernel([](auto x0, auto x1, auto v0, auto v1, auto w) {
  auto const [g0, g1] = force_gradient(x0, x1, w);
  return dc::outputs(x0 + dt * v0, x1 + dt * v1, v0 - dt * g0, v1 - dt * g1);
});

// Where the last step crossed the x axis, linearly interpolated: its x, squared.
constexpr auto crossing = dc::kernel([](auto x0, auto x1, auto v0, auto v1) {
  auto const tf = -x1 / v1;
  auto const xf = x0 + tf * v0;
  return xf * xf;
});

// (a bound: with some w the particle never reaches the axis)
inline void check_steps(long step) {
  long const limit = long(std::min(1e5, input_limits().max_elements));
  if (step == limit)
    throw input_error("the particle does not cross the x axis within " + std::to_string(limit) +
                      " Euler steps");
}

// The objective on any value type: the trajectory by Euler steps, stopping at the first step
// that ends on or below the x axis.
template <class T> T trajectory(T const &w) {
  T x0(0.0), x1(8.0), v0(0.75), v1(0.0);
  for (long step = 0;; ++step) {
    check_steps(step);
    auto [n0, n1, nv0, nv1] = euler_step(x0, x1, v0, v1, w);
    if (!(n1 > 0.0))
      return crossing(n0, n1, v0, v1);
    x0 = n0, x1 = n1, v0 = nv0, v1 = nv1;
  }
}

// d trajectory / dw on the tape: one fused node per step, then backward.
inline double trajectory_reverse(double w) {
  dc::tape tp;
  use_executor(tp);
  auto const one = [](double v) { return dc::tensor<double>::full({1}, v); };
  auto wv = tp.variable(one(w));
  dc::var<double> x0 = tp.constant(one(0.0)), x1 = tp.constant(one(8.0));
  dc::var<double> v0 = tp.constant(one(0.75)), v1 = tp.constant(one(0.0));
  for (long step = 0;; ++step) {
    check_steps(step);
    auto s = dc::fused(euler_step, x0, x1, v0, v1, wv);
    if (!(s[1].item() > 0.0)) {
      tp.backward(dc::fused(crossing, s[0], s[1], v0, v1));
      return wv.grad().item();
    }
    x0 = s[0], x1 = s[1], v0 = s[2], v1 = s[3];
  }
}

// The potential p(x; w) = sum 1 / |x - charge| as a kernel (the fr variant's inner tape).
constexpr auto potential = dc::kernel([](auto x0, auto x1, auto w) {
  using T = decltype(x0 + x1 + w);
  using dc::sqrt, std::sqrt;
  auto inverse_distance = [&](T const &cx, T const &cy) {
    T const u = cx - T(x0), v = cy - T(x1);
    return 1.0 / sqrt(u * u + v * v);
  };
  return inverse_distance(T(10.0), T(10.0) - T(w)) + inverse_distance(T(10.0), T(0.0));
});

// grad_x p(x; w) by reverse mode: backward on a tape over D (the outer derivative's duals), so
// the gradient's partials are its derivatives along the outer direction.
template <class D> std::pair<D, D> force_gradient_reverse(D const &x0, D const &x1, D const &w) {
  dc::tape tp;
  auto const one = [](D const &v) { return dc::tensor<D>::full({1}, v); };
  auto a = tp.variable(one(x0)), b = tp.variable(one(x1));
  tp.backward(dc::fused(potential, a, b, one(w)));
  return {a.grad().item(), b.grad().item()};
}

// The trajectory with each step's force by force_gradient_reverse (the fr variant).
template <class D> D trajectory_inner_reverse(D const &w) {
  D x0(0.0), x1(8.0), v0(0.75), v1(0.0);
  for (long step = 0;; ++step) {
    check_steps(step);
    auto const [g0, g1] = force_gradient_reverse(x0, x1, w);
    D const n0 = x0 + dt * v0, n1 = x1 + dt * v1;
    if (!(n1 > 0.0))
      return crossing(n0, n1, v0, v1);
    v0 = v0 - dt * g0, v1 = v1 - dt * g1;
    x0 = n0, x1 = n1;
  }
}

using vec = std::vector<double>;
inline double objective(vec const &w) { return trajectory(w[0]); }

struct ff : job {
  input const &in;
  double w = 0;
  explicit ff(input const &i) : in(i) {}
  void run() override {
    using d1 = dc::dual<double, 1>;
    auto grad = [](vec const &v) { return vec{trajectory(d1::variable(v[0], 0)).d[0]}; };
    w = descent::argmin(objective, grad, vec{in.w})[0];
  }
  json output() const override { return w; }
};

struct rf : job {
  input const &in;
  double w = 0;
  explicit rf(input const &i) : in(i) {}
  void run() override {
    auto grad = [](vec const &v) { return vec{trajectory_reverse(v[0])}; };
    w = descent::argmin(objective, grad, vec{in.w})[0];
  }
  json output() const override { return w; }
};

struct fr : job {
  input const &in;
  double w = 0;
  explicit fr(input const &i) : in(i) {}
  void run() override {
    using d1 = dc::dual<double, 1>;
    auto grad = [](vec const &v) {
      return vec{trajectory_inner_reverse(d1::variable(v[0], 0)).d[0]};
    };
    w = descent::argmin(objective, grad, vec{in.w})[0];
  }
  json output() const override { return w; }
};

// A variant this tool cannot run honestly: refused with the reason, before any work.
inline input refuse(json const &) {
  throw input_error("not implemented: reverse over reverse needs a tape that records its own "
                    "backward; dualcast's gradients are tensors, not tape variables (fr runs the "
                    "inner reverse pass on a tape over duals instead)");
}

inline void add(registry &r) {
  r.add("particle", "ff", make_function<input, ff>(parse));
  r.add("particle", "rf", make_function<input, rf>(parse));
  r.add("particle", "fr", make_function<input, fr>(parse));
  r.add("particle", "rr", make_function<input, ff>(refuse));
}

} // namespace gradbench::particle

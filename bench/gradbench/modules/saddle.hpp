// bench/gradbench/modules/saddle.hpp: GradBench's `saddle` (evals/saddle/README.md): the saddle
// point of f(p, q) = (p1^2 + p2^2) - (q1^2 + q2^2) by nested gradient descent: p = argmin_p
// max_q f(p, q) (the max by an inner descent from `start`, differentiated through with respect
// to p), then q = argmax_q f(p, q); both from `start`.
//   input {start: double[2]}; ff, fr, rf, rr -> double[4] (p then q); first letter: outer mode.
//
//   ff: the outer gradient on dual<double, 2> (both directions in one pass) through the inner
//       descent, whose gradient is a dual<that, 2>.
//   rf: outer reverse: the inner descent's accepted steps and the final value are fused nodes on
//       dualcast's tape (a kernel whose body takes the inner gradient by forward mode), then
//       backward to p.
//   fr: outer forward (p on dual<double, 2>), the inner gradient grad_q f by backward on a tape
//       over those duals (docs/higher-order.md), so it carries its derivatives in p.
//   rr: refused, as in particle.hpp (no tape that records its own backward).
#pragma once

#include "common.hpp"
#include "descent.hpp"

#include <dualcast/numbers/dual.hpp>

#include <cmath>
#include <string>
#include <utility>

namespace gradbench::saddle {

struct input {
  std::vector<double> start;
};
inline input parse(json const &in) { return {numbers(field(in, "start"), "start", 2)}; }

// GradBench's f(x1, y1, x2, y2) = (x1^2 + y1^2) - (x2^2 + y2^2), called as f(p1, p2, q1, q2).
// (inlined: returned through memory, its nested dual was read back whole right after the narrower
// stores that wrote it, a store-forwarding stall per call)
template <class P, class Q>
DUALCAST_FORCEINLINE auto value(P const &p1, P const &p2, Q const &q1, Q const &q2) {
  using T = decltype(p1 + q1);
  auto const a = T(p1) * T(p1) + T(p2) * T(p2), b = T(q1) * T(q1) + T(q2) * T(q2);
  return a - b;
}
constexpr auto f = dc::kernel([](auto p1, auto p2, auto q1, auto q2) {
  using T = decltype(p1 + p2 + q1 + q2);
  return value(T(p1), T(p2), T(q1), T(q2));
});

// grad_q f(p, q) by forward mode over the value type T of p and q (inlined, as value).
template <class P1, class P2, class Q1, class Q2>
DUALCAST_FORCEINLINE auto q_gradient(P1 const &p1, P2 const &p2, Q1 const &q1, Q2 const &q2) {
  using T = decltype(p1 + p2 + q1 + q2);
  using D = dc::dual<T, 2>;
  D const r = value(D(T(p1)), D(T(p2)), D::variable(T(q1), 0), D::variable(T(q2), 1));
  return std::pair<T, T>{r.d[0], r.d[1]};
}

template <class T> using vec = std::vector<T>;

// max_q f(p, q) from `start` by the inner descent, on any value type T of p.
template <class T> T inner_max(vec<T> const &p, vec<double> const &start) {
  auto fq = [&](vec<T> const &q) { return value(p[0], p[1], q[0], q[1]); };
  auto gq = [&](vec<T> const &q) {
    auto [g1, g2] = q_gradient(p[0], p[1], q[0], q[1]);
    return vec<T>{g1, g2};
  };
  auto q = descent::argmax(fq, gq, vec<T>{T(start[0]), T(start[1])});
  return fq(q);
}

// grad_q f(p, q) by reverse mode on a tape over T (dual<double, 2>: the outer derivative).
template <class T> vec<T> q_gradient_reverse(vec<T> const &p, vec<T> const &q) {
  dc::tape tp;
  auto const one = [](T const &v) { return dc::tensor<T>::full({1}, v); };
  auto q1 = tp.variable(one(q[0])), q2 = tp.variable(one(q[1]));
  tp.backward(dc::fused(f, one(p[0]), one(p[1]), q1, q2));
  return {q1.grad().item(), q2.grad().item()};
}
// max_q f(p, q) by the inner descent with that gradient (the fr variant).
template <class T> T inner_max_inner_reverse(vec<T> const &p, vec<double> const &start) {
  auto fq = [&](vec<T> const &q) { return value(p[0], p[1], q[0], q[1]); };
  auto gq = [&](vec<T> const &q) { return q_gradient_reverse(p, q); };
  auto q = descent::argmax(fq, gq, vec<T>{T(start[0]), T(start[1])});
  return fq(q);
}

// The same inner maximum recorded on the tape, p being variables: each accepted step of the inner
// descent is one fused node q' = q + eta grad_q f(p, q) (the gradient inside the kernel by forward
// mode), the result f(p, q*) another; the descent's tests read the nodes' values. Returns the
// gradient of the maximum with respect to p.
constexpr auto ascent_step = dc::kernel([](auto p1, auto p2, auto q1, auto q2, auto eta) {
  auto const [g1, g2] = q_gradient(p1, p2, q1, q2);
  return dc::outputs(q1 + eta * g1, q2 + eta * g2);
});
inline vec<double> inner_max_reverse(vec<double> const &p, vec<double> const &start) {
  dc::tape tp;
  use_executor(tp);
  auto const one = [](double v) { return dc::tensor<double>::full({1}, v); };
  auto p1 = tp.variable(one(p[0])), p2 = tp.variable(one(p[1]));
  // The descent of descent.hpp on -f, written out over tape variables (the same tests in the
  // same order, on the values).
  dc::var<double> q1 = tp.constant(one(start[0])), q2 = tp.constant(one(start[1]));
  auto minus_f = [&](dc::var<double> const &a, dc::var<double> const &b) {
    return -dc::fused(f, p1, p2, a, b).item();
  };
  auto gradient = [&](dc::var<double> const &a, dc::var<double> const &b) {
    auto [g1, g2] = q_gradient(p[0], p[1], a.item(), b.item());
    return std::pair<double, double>{-g1, -g2};
  };
  double fx = minus_f(q1, q2);
  auto g = gradient(q1, q2);
  double eta = 1e-5;
  for (long iteration = 0, accepted = 0;; ++iteration) {
    if (iteration == descent::iteration_limit())
      throw input_error("gradient descent did not converge in " +
                        std::to_string(descent::iteration_limit()) + " iterations");
    if (std::sqrt(g.first * g.first + g.second * g.second) <= 1e-5)
      break;
    if (accepted == 10) {
      eta *= 2, accepted = 0;
      continue;
    }
    // (eta as a constant of the node: the step q - eta * (-grad f) = q + eta * grad f)
    auto s = dc::fused(ascent_step, p1, p2, q1, q2, tp.constant(one(eta)));
    double const d1 = s[0].item() - q1.item(), d2 = s[1].item() - q2.item();
    if (std::sqrt(d1 * d1 + d2 * d2) <= 1e-5)
      break;
    double const fnext = minus_f(s[0], s[1]);
    if (fnext < fx) {
      q1 = s[0], q2 = s[1], fx = fnext, g = gradient(q1, q2), ++accepted;
    } else {
      eta /= 2, accepted = 0;
    }
  }
  tp.backward(dc::fused(f, p1, p2, q1, q2));
  return {p1.grad().item(), p2.grad().item()};
}

template <class Variant> struct solve : job {
  input const &in;
  vec<double> out;
  explicit solve(input const &i) : in(i) {}
  void run() override {
    auto const &start = in.start;
    auto outer = [&](vec<double> const &p) { return inner_max(p, start); };
    auto p = descent::argmin(outer, Variant::outer_gradient(start), start);
    // q = argmax_q f(p, q), its gradient in the variant's outer mode
    auto fq = [&](vec<double> const &q) { return value(p[0], p[1], q[0], q[1]); };
    auto q = descent::argmax(fq, Variant::q_gradient(p), start);
    out = {p[0], p[1], q[0], q[1]};
  }
  json output() const override { return out; }
};

struct forward_forward {
  static auto outer_gradient(vec<double> const &start) {
    return [&start](vec<double> const &p) {
      using d2 = dc::dual<double, 2>;
      d2 const m = inner_max(vec<d2>{d2::variable(p[0], 0), d2::variable(p[1], 1)}, start);
      return vec<double>{m.d[0], m.d[1]};
    };
  }
  static auto q_gradient(vec<double> const &p) {
    return [&p](vec<double> const &q) {
      auto [g1, g2] = saddle::q_gradient(p[0], p[1], q[0], q[1]);
      return vec<double>{g1, g2};
    };
  }
};

struct forward_reverse {
  static auto outer_gradient(vec<double> const &start) {
    return [&start](vec<double> const &p) {
      using d2 = dc::dual<double, 2>;
      d2 const m =
          inner_max_inner_reverse(vec<d2>{d2::variable(p[0], 0), d2::variable(p[1], 1)}, start);
      return vec<double>{m.d[0], m.d[1]};
    };
  }
  // step 2 in the outer mode, forward
  static auto q_gradient(vec<double> const &p) { return forward_forward::q_gradient(p); }
};

struct reverse_forward {
  static auto outer_gradient(vec<double> const &start) {
    return [&start](vec<double> const &p) { return inner_max_reverse(p, start); };
  }
  // step 2 in the outer mode, reverse: grad_q f on the tape
  static auto q_gradient(vec<double> const &p) {
    return [&p](vec<double> const &q) {
      dc::tape tp;
      use_executor(tp);
      auto const one = [](double v) { return dc::tensor<double>::full({1}, v); };
      auto q1 = tp.variable(one(q[0])), q2 = tp.variable(one(q[1]));
      tp.backward(dc::fused(f, one(p[0]), one(p[1]), q1, q2));
      return vec<double>{q1.grad().item(), q2.grad().item()};
    };
  }
};

inline input refuse(json const &) {
  throw input_error("not implemented: reverse over reverse needs a tape that records its own "
                    "backward; dualcast's gradients are tensors, not tape variables (fr runs the "
                    "inner reverse pass on a tape over duals instead)");
}

inline void add(registry &r) {
  r.add("saddle", "ff", make_function<input, solve<forward_forward>>(parse));
  r.add("saddle", "rf", make_function<input, solve<reverse_forward>>(parse));
  r.add("saddle", "fr", make_function<input, solve<forward_reverse>>(parse));
  r.add("saddle", "rr", make_function<input, solve<forward_forward>>(refuse));
}

} // namespace gradbench::saddle

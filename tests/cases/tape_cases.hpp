// tests/cases/tape_cases.hpp: tape test bodies written once and run on every device (the CPU test
// and, where a GPU exists, the CUDA test in tests/cuda/cases_gpu.cu). Each case builds a scalar
// loss from host inputs moved to the device, and checks the tape's gradients under the three
// evaluation modes (fused store, fused recompute, unfused) against central finite differences in
// double precision. Returns an empty string on success, else a description of the first mismatch.
#pragma once

#include <dualcast/autodiff.hpp>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace dualcast_tests {

namespace dc = dualcast;
using tensor64 = dc::tensor<double>;
using var64 = dc::var<double>;
using tape_fn = std::function<var64(std::vector<var64> const &)>;

inline tensor64 random_host(dc::shape const &s, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(std::size_t(s.size()));
  for (auto &x : v)
    x = u(g);
  return tensor64::from(s, v);
}

// A scalar from any output: sum(y * W), W fixed and on y's device.
inline var64 weigh(var64 const &y) {
  return dc::sum(y * random_host(y.dims(), 777u + unsigned(y.size())).to(y.value().dev()));
}

// A kernel function object for the fused node (nvcc runs it on the GPU: DUALCAST_HD).
struct tanh_layer {
  template <class X, class B> DUALCAST_HD auto operator()(X x, B b) const {
    return dc::tanh(x + b);
  }
};

enum class tape_mode { store, recompute, unfused };

// weigh(f(xs)) on device d; with gradients into `grads` (host copies) when asked.
inline double run_tape_case(tape_fn const &f, std::vector<tensor64> const &xs, dc::device d,
                            tape_mode mode, std::vector<std::vector<double>> *grads) {
  dc::tape tp;
  tp.default_policy =
      mode == tape_mode::store ? dc::policy_kind::store : dc::policy_kind::recompute;
  tp.fused = mode != tape_mode::unfused;
  std::vector<var64> vs;
  for (auto const &x : xs)
    vs.push_back(tp.variable(x.to(d).clone(), grads != nullptr));
  var64 loss = weigh(f(vs));
  if (grads) {
    tp.backward(loss);
    grads->clear();
    for (auto const &v : vs)
      grads->push_back(v.grad().defined() ? v.grad().to_vector()
                                          : std::vector<double>(std::size_t(v.size()), 0.0));
  }
  return loss.item();
}

inline std::string check_tape_case(std::string const &name, tape_fn const &f,
                                   std::vector<tensor64> const &xs, dc::device d,
                                   double tol = 1e-6) {
  // Central differences (h = 1e-6) on the device, fused recompute mode.
  std::vector<std::vector<double>> fd(xs.size());
  const double h = 1e-6;
  for (std::size_t i = 0; i < xs.size(); ++i)
    for (dc::index_t j = 0; j < xs[i].size(); ++j) {
      std::vector<tensor64> plus, minus;
      for (auto const &x : xs)
        plus.push_back(x.clone()), minus.push_back(x.clone());
      plus[i].mutable_data()[j] += h;
      minus[i].mutable_data()[j] -= h;
      fd[i].push_back((run_tape_case(f, plus, d, tape_mode::recompute, nullptr) -
                       run_tape_case(f, minus, d, tape_mode::recompute, nullptr)) /
                      (2 * h));
    }
  char const *mode_names[] = {"fused store", "fused recompute", "unfused"};
  for (tape_mode m : {tape_mode::store, tape_mode::recompute, tape_mode::unfused}) {
    std::vector<std::vector<double>> g;
    run_tape_case(f, xs, d, m, &g);
    for (std::size_t i = 0; i < xs.size(); ++i)
      for (std::size_t j = 0; j < fd[i].size(); ++j)
        if (!(std::abs(g[i][j] - fd[i][j]) <= tol * (1 + std::abs(fd[i][j]))))
          return name + " (" + mode_names[int(m)] + "): gradient of input " + std::to_string(i) +
                 " element " + std::to_string(j) + " is " + std::to_string(g[i][j]) +
                 ", finite differences give " + std::to_string(fd[i][j]);
  }
  return {};
}

// One LSTM cell step with its gate matmuls: gates = x Wx + h Wh + b, then the cell update as
// lazy expressions materialised together (ONE fused node with two outputs; node by node in
// unfused mode).
inline tape_fn lstm_step_fn() {
  constexpr dc::index_t H = 5;
  return [](std::vector<var64> const &v) {
    var64 gates = dc::matmul(v[0], v[3]) + dc::matmul(v[1], v[4]) + v[5];
    var64 i = dc::slice(gates, 1, 0, H), fg = dc::slice(gates, 1, H, 2 * H),
          g = dc::slice(gates, 1, 2 * H, 3 * H), o = dc::slice(gates, 1, 3 * H, 4 * H);
    auto c2 = dc::sigmoid(fg) * v[2] + dc::sigmoid(i) * dc::tanh(g);
    auto h2 = dc::sigmoid(o) * dc::tanh(c2);
    auto [H2, C2] = dc::eval(h2, c2);
    return var64(weigh(H2) + weigh(C2));
  };
}
inline std::vector<tensor64> lstm_step_inputs() {
  constexpr dc::index_t B = 3, I = 4, H = 5;
  return {random_host({B, I}, 1),     random_host({B, H}, 2),     random_host({B, H}, 3),
          random_host({I, 4 * H}, 4), random_host({H, 4 * H}, 5), random_host({4 * H}, 6)};
}
inline std::string lstm_step_case(dc::device d) {
  return check_tape_case("lstm step", lstm_step_fn(), lstm_step_inputs(), d);
}

// A small MLP classifier: tanh hidden layer (a DUALCAST_HD kernel function object through
// dc::call: one fused node, or in unfused mode the functor called on variables, one node per
// operation -- under nvcc that needs --diag-suppress=20011, see tests/CMakeLists.txt),
// log_softmax, the labels' log-probabilities picked with gather, mean negative log-likelihood.
inline tape_fn mlp_fn() {
  return [](std::vector<var64> const &v) {
    constexpr dc::kernel<tanh_layer> layer{tanh_layer{}};
    var64 hidden = dc::call(layer, dc::matmul(v[0], v[1]), v[2]);
    var64 lp = dc::log_softmax(dc::matmul(hidden, v[3]), -1);
    var64 picked = dc::gather(lp, 1, dc::index_array{{4, 1}, {2, 0, 4, 2}});
    return var64(-dc::mean(picked));
  };
}
inline std::vector<tensor64> mlp_inputs() {
  return {random_host({4, 3}, 11), random_host({3, 6}, 12), random_host({6}, 13),
          random_host({6, 5}, 14)};
}
inline std::string mlp_case(dc::device d) {
  return check_tape_case("mlp", mlp_fn(), mlp_inputs(), d);
}

// Reductions, softmax family, shape operations, indexing and a batched matmul with a shared
// operand, on non-contiguous views.
inline std::string ops_case(dc::device d) {
  tape_fn f = [](std::vector<var64> const &v) {
    var64 const &x = v[0];             // (3, 4, 5)
    var64 xt = dc::transpose(x, 0, 2); // (5, 4, 3), a view
    var64 parts[] = {
        dc::sum(x, {1}, true),
        dc::mean(xt, {0, 2}),
        dc::max(x, {2}),
        dc::min(xt, {0}),
        dc::softmax(xt, 1),
        dc::log_softmax(x, 0),
        dc::logsumexp(xt, -1, true),
        dc::reshape(dc::transpose(x, 1, 2), {3, 20}), // a copy
        dc::concat(std::vector<var64>{dc::slice(x, 2, 0, 5, 2),
                                      dc::transpose(dc::slice(xt, 0, 1, 3), 0, 2)},
                   2),
        dc::broadcast_to(dc::sum(x, {0, 1}, true), {2, 4, 5}),
        dc::index_select(x, 1, {2, 0, 2}),
        dc::matmul(x, v[1]), // (3, 4, 5) @ (5, 2), the (5, 2) shared by the batch
        dc::gather(xt, 2, dc::index_array{{5, 4, 2}, {0, 2, 1, 1, 2, 0, 0, 0, 1, 2, 2, 1, 0, 1,
                                                      2, 2, 1, 0, 0, 2, 1, 1, 0, 2, 2, 0, 1, 0,
                                                      1, 2, 0, 1, 2, 2, 1, 0, 0, 1, 2, 0}}),
    };
    var64 total = weigh(parts[0]);
    for (std::size_t i = 1; i < std::size(parts); ++i)
      total = total + weigh(parts[i]);
    return total;
  };
  return check_tape_case("reductions, softmax, shape ops, indexing", f,
                         {random_host({3, 4, 5}, 21), random_host({5, 2}, 22)}, d);
}

} // namespace dualcast_tests

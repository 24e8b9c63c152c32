// tests/cases/tape_cases.hpp: tape test bodies written once and run on every device (the CPU test
// and, where a GPU exists, the CUDA test in tests/cuda/cases_gpu.cu). Each case builds a scalar
// loss from host inputs moved to the device, and checks the tape's gradients under the three
// evaluation modes (fused store, fused recompute, unfused) against central finite differences in
// double precision. Returns an empty string on success, else a description of the first mismatch.
#pragma once

#include <dualcast/autodiff.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
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
                            tape_mode mode, std::vector<std::vector<double>> *grads,
                            dc::cpu const &host_ex = {}) {
  dc::tape tp;
  tp.ex = host_ex;
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

// A case: a function of the inputs and the inputs (host tensors).
struct tape_problem {
  std::string name;
  tape_fn f;
  std::vector<tensor64> inputs;
};
inline std::string check_tape_case(tape_problem const &p, dc::device d) {
  return check_tape_case(p.name, p.f, p.inputs, d);
}

// One LSTM cell step with its gate matmuls: gates = x Wx + h Wh + b, then the cell update as
// lazy expressions materialised together (ONE fused node with two outputs; node by node in
// unfused mode).
inline tape_problem lstm_step_problem() {
  constexpr dc::index_t B = 3, I = 4, H = 5;
  tape_fn f = [](std::vector<var64> const &v) {
    var64 gates = dc::matmul(v[0], v[3]) + dc::matmul(v[1], v[4]) + v[5];
    var64 i = dc::slice(gates, 1, 0, H), fg = dc::slice(gates, 1, H, 2 * H),
          g = dc::slice(gates, 1, 2 * H, 3 * H), o = dc::slice(gates, 1, 3 * H, 4 * H);
    auto c2 = dc::sigmoid(fg) * v[2] + dc::sigmoid(i) * dc::tanh(g);
    auto h2 = dc::sigmoid(o) * dc::tanh(c2);
    auto [H2, C2] = dc::eval(h2, c2);
    return var64(weigh(H2) + weigh(C2));
  };
  return {"lstm step",
          f,
          {random_host({B, I}, 1), random_host({B, H}, 2), random_host({B, H}, 3),
           random_host({I, 4 * H}, 4), random_host({H, 4 * H}, 5), random_host({4 * H}, 6)}};
}
inline std::string lstm_step_case(dc::device d) { return check_tape_case(lstm_step_problem(), d); }

// A small MLP classifier: tanh hidden layer (a DUALCAST_HD kernel function object through
// dc::call: one fused node, or in unfused mode the functor called on variables, one node per
// operation -- under nvcc that needs --diag-suppress=20011, see tests/CMakeLists.txt),
// log_softmax, the labels' log-probabilities picked with gather, mean negative log-likelihood.
inline tape_problem mlp_problem() {
  tape_fn f = [](std::vector<var64> const &v) {
    constexpr dc::kernel<tanh_layer> layer{tanh_layer{}};
    var64 hidden = dc::call(layer, dc::matmul(v[0], v[1]), v[2]);
    var64 lp = dc::log_softmax(dc::matmul(hidden, v[3]), -1);
    var64 picked = dc::gather(lp, 1, dc::index_array{{4, 1}, {2, 0, 4, 2}});
    return var64(-dc::mean(picked));
  };
  return {"mlp",
          f,
          {random_host({4, 3}, 11), random_host({3, 6}, 12), random_host({6}, 13),
           random_host({6, 5}, 14)}};
}
inline std::string mlp_case(dc::device d) { return check_tape_case(mlp_problem(), d); }

// Reductions, softmax family, shape operations, indexing and a batched matmul with a shared
// operand, on non-contiguous views.
inline tape_problem ops_problem() {
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
  return {"reductions, softmax, shape ops, indexing",
          f,
          {random_host({3, 4, 5}, 21), random_host({5, 2}, 22)}};
}
inline std::string ops_case(dc::device d) { return check_tape_case(ops_problem(), d); }

// Operators of the parallel primitives (nvcc runs them on the GPU: DUALCAST_HD; called on plain
// numbers and on duals).
struct log_add_exp_op { // log(exp(a) + exp(b)): associative, commutative; neutral -inf
  template <class A> DUALCAST_HD A operator()(A a, A b) const {
    return dc::log(dc::exp(a) + dc::exp(b));
  }
};
struct mobius_op { // a b + a + b = (1 + a)(1 + b) - 1: associative; neutral 0
  template <class A> DUALCAST_HD A operator()(A a, A b) const { return a * b + a + b; }
};
struct three_point { // a 1-D nonlinear stencil: offsets -1, 0, 2
  template <class A> DUALCAST_HD A operator()(A l, A c, A r) const {
    return c * dc::sigmoid(l) + 0.5 * r;
  }
};
struct laplace_tanh { // the 5-point Laplacian plus a nonlinearity of a neighbour
  template <class A> DUALCAST_HD A operator()(A c, A n, A s, A w, A e) const {
    return (n + s + w + e - 4.0 * c) * 0.25 + dc::tanh(e) * c;
  }
};

// The parallel primitives (reductions with a user operator, scans, a linear recurrence, bins,
// a stencil) and a fused node whose elements take different branches (the HM-LSTM update with
// random masks), conv2d with stride 1 and with stride 2 and padding (image [2, 2, 5, 6], weights
// [3, 2, 3, 3]); reduce_by_index with * and min, stencils with zero and periodic boundaries (2-D
// and 1-D), a gather at argmax's positions and floor (zero gradient).
inline tape_problem primitives_problem() {
  tape_fn f = [](std::vector<var64> const &v) {
    var64 const &x = v[0]; // (4, 6)
    auto dev = x.value().dev();
    static constexpr auto cross = dc::offsets({0, 0}, {-1, 0}, {1, 0}, {0, -1}, {0, 1});
    static constexpr auto line = dc::offsets({-1}, {0}, {2});
    std::vector<double> zs(24), zbs(24);
    std::mt19937 g(5);
    for (std::size_t k = 0; k < zs.size(); ++k)
      zs[k] = double(g() % 2), zbs[k] = double(g() % 2);
    auto z = tensor64::from({4, 6}, zs).to(dev), zb = tensor64::from({4, 6}, zbs).to(dev);
    var64 parts[] = {
        dc::prod(x, {1}),
        dc::reduce(dc::transpose(x, 0, 1), log_add_exp_op{}, -HUGE_VAL, {1}),
        dc::cumsum(x, 0),
        dc::cumprod(x, 1, true),
        dc::cummax(dc::transpose(x, 0, 1), 1),
        dc::scan(x, mobius_op{}, 0.0, -1),
        dc::linear_recurrence(v[1], x, v[2], 1),
        dc::reduce_by_index(x, {2, 0, 2, 1}, 3, dc::bin_op::plus),
        dc::reduce_by_index(dc::transpose(x, 0, 1), {0, 1, 1, 0, 2, 1}, 3, dc::bin_op::max),
        dc::stencil(x, cross, laplace_tanh{}, dc::boundary::clamp),
        dc::stencil(x, cross, laplace_tanh{}, dc::boundary::zero, dc::policy::recompute),
        dc::stencil(dc::reshape(x, {24}), line, three_point{}, dc::boundary::periodic,
                    dc::policy::recompute),
        dc::reduce_by_index(x, {1, 0, 1, 2}, 3, dc::bin_op::times),
        dc::reduce_by_index(x, {0, 0, 2, 1}, 3, dc::bin_op::min),
        dc::gather(x, 1, dc::argmax(x, 1, true)),
        dc::floor(x * 3.0) * x,
        dc::hmlstm_update(z, zb, v[1], x, v[3], v[4]),
        dc::conv2d(v[5], v[6], v[7]),
        dc::conv2d(v[5], v[6], {.stride = 2, .padding = 1}),
    };
    var64 total = weigh(parts[0]);
    for (std::size_t i = 1; i < std::size(parts); ++i)
      total = total + weigh(parts[i]);
    return total;
  };
  return {"parallel primitives, divergent fused node",
          f,
          {random_host({4, 6}, 31), random_host({4, 6}, 32), random_host({4}, 33),
           random_host({4, 6}, 37), random_host({4, 6}, 38), random_host({2, 2, 5, 6}, 39),
           random_host({3, 2, 3, 3}, 40), random_host({3}, 43)}};
}
inline std::string primitives_case(dc::device d) {
  return check_tape_case(primitives_problem(), d);
}

// The PyTorch-style operations: maximum / minimum, clamp, where, atan2, hypot, a lazy exp,
// variance, norm (p = 3: CUDA's pow), repeat, flip, index_add, scatter_add and masked_select
// (masks and indices fixed, on the device); and on rows longer than a warp (2 x 75): softmax,
// logsumexp, index_select with 80 indices colliding within and across 32-position chunks (its
// adjoint a scatter-add), scatter (the last duplicate wins), stddev, cummin, permute / squeeze /
// split, the packed LSTM and GRU cells, the D-LSTM cell (11 inputs), log_softmax over both axes
// together, and a matmul whose batch dimensions broadcast.
inline tape_problem torch_ops_problem() {
  tape_fn f = [](std::vector<var64> const &v) {
    var64 const &x = v[0], &y = v[1]; // (3, 4) each
    auto dev = x.value().dev();
    auto mask = tensor64::from({3, 4}, {1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 1}).to(dev);
    var64 const &w = v[2]; // (2, 75)
    std::vector<dc::index_t> colliding, scatter_at;
    for (dc::index_t k = 0; k < 80; ++k)
      colliding.push_back((k * k + 3) % 75);
    for (dc::index_t k = 0; k < 80; ++k)
      scatter_at.push_back((k * 7) % 33);
    auto [h2, c2] = dc::lstm_cell(dc::slice(w, 1, 0, 12), dc::slice(w, 1, 60, 63));
    auto part = [&w](dc::index_t i) { return dc::slice(w, 1, 6 * i, 6 * i + 6); }; // (2, 6)
    auto [dh, ds] = dc::dlstm_cell(part(0), part(1), part(2), part(3), part(4), part(5), part(6),
                                   part(7), part(8), part(9), part(10));
    var64 cells[] = {h2, c2, dh, ds};
    var64 parts[] = {
        dc::maximum(x, y) + dc::minimum(x, 0.1),
        dc::clamp(x * 2.0, -0.5, 0.75),
        dc::where(mask, x * y, y * 0.5),
        dc::atan2(x, y) + dc::hypot(x, y * 2.0),
        dc::exp(x * 0.5),
        dc::variance(x, {1}),
        dc::norm(x, 3.0, {1}),
        dc::repeat(x, {2, 1}),
        dc::flip(y, {1}),
        dc::index_add(x, 1, {2, 0, 2}, dc::slice(y, 1, 0, 3)),
        dc::scatter_add(x, 0, dc::index_array{{1, 4}, {2, 0, 1, 2}}, dc::slice(y, 0, 0, 1)),
        dc::masked_select(x * y, mask),
        dc::softmax(w, 1),
        dc::logsumexp(w, 1),
        dc::index_select(w, 1, colliding),
        dc::scatter(w, 1, dc::index_array{{2, 40}, scatter_at}, dc::slice(w, 1, 10, 50) * 0.5),
        dc::stddev(w, {1}),
        dc::cummin(w, 1),
        dc::squeeze(dc::permute(dc::unsqueeze(dc::split(w, 25, 1)[1], 0), {1, 0, 2}), 1),
        cells[0] * 2.0 + cells[1],
        cells[2] - cells[3] * 0.5,
        dc::log_softmax(w, {0, 1}),
        dc::gru_cell(dc::slice(w, 1, 0, 9), dc::slice(w, 1, 20, 29), dc::slice(w, 1, 40, 43)),
        dc::matmul(dc::reshape(dc::slice(w, 1, 0, 6), {2, 1, 2, 3}),
                   dc::reshape(dc::slice(w, 1, 20, 29), {3, 3, 2})), // batches (2, 1) and (3)
    };
    var64 total = weigh(parts[0]);
    for (std::size_t i = 1; i < std::size(parts); ++i)
      total = total + weigh(parts[i]);
    return total;
  };
  return {"PyTorch-style operations",
          f,
          {random_host({3, 4}, 41), random_host({3, 4}, 42), random_host({2, 75}, 44)}};
}
inline std::string torch_ops_case(dc::device d) { return check_tape_case(torch_ops_problem(), d); }

// The index operations with integer index tensors made on the device (tensor<std::int32_t> /
// <std::int64_t>, uploaded once or produced there by argmax): index_select, gather at argmax's
// positions, index_add, scatter_add, scatter (duplicates: the last wins), reduce_by_index (plus
// privatized and sorted, max) -- the kernels read the indices from the device's memory.
inline tape_problem index_tensors_problem() {
  tape_fn f = [](std::vector<var64> const &v) {
    var64 const &x = v[0], &w = v[1]; // (3, 4), (2, 75)
    auto dev = x.value().dev();
    using i32 = dc::tensor<std::int32_t>;
    using i64 = dc::tensor<std::int64_t>;
    std::vector<std::int32_t> colliding;
    for (std::int32_t k = 0; k < 80; ++k)
      colliding.push_back((k * k + 3) % 75 - (k % 3 == 0 ? 75 : 0)); // some counted from the end
    std::vector<std::int64_t> scatter_at;
    for (std::int64_t k = 0; k < 80; ++k)
      scatter_at.push_back((k * 7) % 33);
    std::vector<std::int32_t> bins(75);
    for (std::size_t k = 0; k < bins.size(); ++k)
      bins[k] = std::int32_t((k * 5) % 4) - (k == 7 ? 2 : 0); // 3 bins, some rows outside
    var64 parts[] = {
        dc::index_select(w, 1, i32::from({80}, colliding).to(dev)),
        dc::gather(x, 1, dc::argmax<std::int64_t>(x, 1, true)),
        dc::gather(w, 0, dc::argmin<std::int32_t>(w, 0, true)),
        dc::index_add(x, 1, i64::from({3}, {2, 0, -2}).to(dev), dc::slice(x, 1, 0, 3) * 0.5),
        dc::scatter_add(x, 0, i32::from({1, 4}, {2, 0, 1, 2}).to(dev), dc::slice(x, 0, 1, 2)),
        dc::scatter(w, 1, i64::from({2, 40}, scatter_at).to(dev).slice(0, 0, 2),
                    dc::slice(w, 1, 10, 50) * 0.5),
        dc::reduce_by_index(dc::transpose(w, 0, 1), i32::from({75}, bins).to(dev), 3,
                            dc::bin_op::plus),
        dc::reduce_by_index(dc::transpose(w, 0, 1), i32::from({75}, bins).to(dev), 3,
                            dc::bin_op::max),
    };
    var64 total = weigh(parts[0]);
    for (std::size_t i = 1; i < std::size(parts); ++i)
      total = total + weigh(parts[i]);
    return total;
  };
  return {"index operations with integer index tensors on the device",
          f,
          {random_host({3, 4}, 45), random_host({2, 75}, 46)}};
}
inline std::string index_tensors_case(dc::device d) {
  return check_tape_case(index_tensors_problem(), d);
}

// The sorted paths of reduce_by_index (more bins than rows: no privatized `plus`) with integer
// index tensors on the device, int32 and int64, some outside [0, bins): `plus` of 1-D values
// (on CUDA with cuda_primitives::sorted_histogram == cub: CUB's radix sort and segmented sum),
// `plus` of rows and times / min / max (the rows sorted by bin: on the host, or on the device by
// CUB's radix sort); and cumsum of few rows along the innermost axis, inclusive and exclusive (on
// CUDA with cuda_primitives::scan == cub: cub::DeviceScan, forward and backward).
inline tape_problem sorted_bins_problem() {
  tape_fn f = [](std::vector<var64> const &v) {
    var64 const &x = v[0], &w = v[1]; // (40), (40, 3)
    auto dev = x.value().dev();
    using i32 = dc::tensor<std::int32_t>;
    using i64 = dc::tensor<std::int64_t>;
    // 60 bins (plus, times: empty bins give 0 / 1) and 5 (min / max: none empty, no infinities)
    std::vector<std::int32_t> k32(40), m32(40);
    std::vector<std::int64_t> k64(40), m64(40);
    for (std::size_t k = 0; k < 40; ++k) {
      k32[k] = std::int32_t((k * 7) % 23) - (k % 9 == 4 ? 30 : 0); // some negative
      k64[k] = std::int64_t((k * 11) % 61);                        // 60: outside
      m32[k] = std::int32_t((k * 5) % 6) - 1;                      // -1: outside
      m64[k] = std::int64_t((k * 7) % 6);                          // 5: outside
    }
    auto const b32 = i32::from({40}, k32).to(dev), c32 = i32::from({40}, m32).to(dev);
    auto const b64 = i64::from({40}, k64).to(dev), c64 = i64::from({40}, m64).to(dev);
    var64 parts[] = {
        dc::reduce_by_index(x, b64, 60, dc::bin_op::plus),
        dc::reduce_by_index(x * x, b32, 60, dc::bin_op::plus),
        dc::reduce_by_index(w, b32, 60, dc::bin_op::plus),
        dc::reduce_by_index(w, b64, 60, dc::bin_op::times),
        dc::reduce_by_index(x, c32, 5, dc::bin_op::min),
        dc::reduce_by_index(w, c64, 5, dc::bin_op::max),
        dc::cumsum(x),
        dc::cumsum(x, 0, true),
        dc::cumsum(dc::transpose(w, 0, 1), 1),
        dc::cumsum(dc::transpose(w, 0, 1), 1, true),
    };
    var64 total = weigh(parts[0]);
    for (std::size_t i = 1; i < std::size(parts); ++i)
      total = total + weigh(parts[i]);
    return total;
  };
  return {"sorted histograms with device indices, cumsum of few rows",
          f,
          {random_host({40}, 47), random_host({40, 3}, 48)}};
}
inline std::string sorted_bins_case(dc::device d) {
  return check_tape_case(sorted_bins_problem(), d);
}

// Problems run on the host with a 1-thread executor and on device d with a 2-thread one (for the
// host tensors), mode by mode (fused store, fused recompute, unfused), the losses and gradients
// compared: bit for bit when `rel` is 0, else within rel times max(|a|, |b|, 1).
inline std::string same_on(std::vector<tape_problem> const &problems, dc::device d, double rel) {
  char const *mode_names[] = {"fused store", "fused recompute", "unfused"};
  auto agree = [rel](double a, double b) {
    if (rel == 0)
      return std::memcmp(&a, &b, sizeof a) == 0;
    return std::abs(a - b) <= rel * std::max({std::abs(a), std::abs(b), 1.0});
  };
  for (auto const &p : problems)
    for (tape_mode m : {tape_mode::store, tape_mode::recompute, tape_mode::unfused}) {
      std::vector<std::vector<double>> ga, gb;
      double const la = run_tape_case(p.f, p.inputs, dc::device::host(), m, &ga, dc::cpu{1});
      double const lb = run_tape_case(p.f, p.inputs, d, m, &gb, dc::cpu{2});
      std::string const where = p.name + " (" + mode_names[int(m)] + "): ";
      if (!agree(la, lb))
        return where + "loss " + std::to_string(la) + " on the host, " + std::to_string(lb) +
               " on " + dc::to_string(d);
      for (std::size_t i = 0; i < ga.size(); ++i)
        for (std::size_t j = 0; j < ga[i].size(); ++j)
          if (!agree(ga[i][j], gb[i][j]))
            return where + "gradient of input " + std::to_string(i) + " element " +
                   std::to_string(j) + ": " + std::to_string(ga[i][j]) + " on the host, " +
                   std::to_string(gb[i][j]) + " on " + dc::to_string(d);
    }
  return {};
}

// CPU == GPU, the tape's side: every case, within `ulps` units of double's epsilon (0: bit for
// bit -- the host's law: thread counts do not change a bit). The inputs and gradients are of
// order 1; GPU reductions add in another order, and CUDA's libm rounds differently from the
// CPU's.
inline std::string tape_law(dc::device d, int ulps) {
  return same_on({lstm_step_problem(), mlp_problem(), ops_problem(), primitives_problem(),
                  torch_ops_problem(), index_tensors_problem(), sorted_bins_problem()},
                 d, ulps * std::numeric_limits<double>::epsilon());
}

// Few long rows, the primitives' paths for them (issue 13): a whole-array sum and a sum over
// the last axis cut into chunks (CUDA), max / min over chunks, scans and the linear recurrence
// split into pieces along the axis. Each is checked against central differences at small sizes
// elsewhere; here the device's losses and gradients must equal the host's (1 thread) within
// `rel` (0: bit for bit, the host with 2 threads), in every mode.
inline std::string long_rows_law(dc::device d, double rel) {
  tape_fn f = [](std::vector<var64> const &v) {
    var64 const &x = v[0], &a = v[1]; // (3, 40000): 3 long rows
    return dc::sum(x) + weigh(dc::sum(x, {1})) + dc::max(x) + weigh(dc::min(x, {1})) +
           weigh(dc::linear_recurrence(a * 0.9, x, 1)) * 1e-2 + weigh(dc::cumsum(x, 1)) * 1e-3 +
           weigh(dc::cummax(x, 1)) * 1e-3;
  };
  return same_on({{"long rows", f, {random_host({3, 40000}, 51), random_host({3, 40000}, 52)}}}, d,
                 rel);
}

} // namespace dualcast_tests

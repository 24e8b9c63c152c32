// examples/models/dlstm.hpp: ADBench's diagonal LSTM (D-LSTM) objective, written with dualcast's
// public API the way a user would -- each layer-step ONE fused kernel with mixed-mode gradients,
// the loss over all steps as a few whole-array operations -- plus a plain double-precision
// reference and a reader of ADBench's input files. Used by examples/dlstm.cpp,
// bench/tape_overhead.cpp and the GradBench tool.
//
// The model (../shared/notes/adbench-dlstm.md): per layer k with input x and state (h, s),
//   f = sigmoid(x w_f + b_f), i = sigmoid(h w_i + b_i), o = sigmoid(x w_o + b_o),
//   g = tanh(h w_g + b_g), s' = s f + i g, h' = o tanh(s')            (all products elementwise)
// the first layer's input is seq[t] * in_weight, each layer's output h' the next one's input, and
// the prediction y_t = h'_last out_weight + out_bias. The loss is
//   L = -1 / ((c - 1) b) sum_{t < c-1} sum_i seq[t+1][i] (y_t[i] - log(2 + sum_j exp(y_t[j]))).
#pragma once

#include <dualcast/autodiff.hpp>

#include <cmath>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dlstm {

namespace dc = dualcast;

// An ADBench D-LSTM input: l layers, c characters of b bits.
struct problem {
  int l = 0, c = 0, b = 0;
  std::vector<double> main;  // 2l rows of 4b: per layer weights [f, i, o, g], then biases
  std::vector<double> extra; // 3 rows of b: in_weight, out_weight, out_bias
  std::vector<double> state; // 2l rows of b: per layer hidden, then cell
  std::vector<double> seq;   // c rows of b
};

inline problem read_adbench(std::string const &path) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("dlstm::read_adbench: cannot open " + path);
  problem p;
  in >> p.l >> p.c >> p.b;
  if (!in || p.l < 1 || p.c < 2 || p.b < 1)
    throw std::runtime_error("dlstm::read_adbench: bad header in " + path);
  auto read = [&](std::vector<double> &v, std::size_t n) {
    v.resize(n);
    for (auto &x : v)
      if (!(in >> x))
        throw std::runtime_error("dlstm::read_adbench: " + path + " ends early");
  };
  std::size_t l = std::size_t(p.l), c = std::size_t(p.c), b = std::size_t(p.b);
  read(p.main, 2 * l * 4 * b);
  read(p.extra, 3 * b);
  read(p.state, 2 * l * b);
  read(p.seq, c * b);
  return p;
}

// ---- the plain reference: double precision, straight loops ----------------------------------
inline double objective_plain(problem const &p) {
  std::size_t const l = std::size_t(p.l), b = std::size_t(p.b);
  std::vector<double> state = p.state, x(b), y(b);
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  double total = 0;
  for (int t = 0; t + 1 < p.c; ++t) {
    for (std::size_t i = 0; i < b; ++i)
      x[i] = p.seq[std::size_t(t) * b + i] * p.extra[i];
    for (std::size_t k = 0; k < l; ++k) {
      double const *w = &p.main[2 * k * 4 * b], *bias = &p.main[(2 * k + 1) * 4 * b];
      double *h = &state[2 * k * b], *s = &state[(2 * k + 1) * b];
      for (std::size_t i = 0; i < b; ++i) {
        double f = sig(x[i] * w[i] + bias[i]);
        double in = sig(h[i] * w[b + i] + bias[b + i]);
        double o = sig(x[i] * w[2 * b + i] + bias[2 * b + i]);
        double g = std::tanh(h[i] * w[3 * b + i] + bias[3 * b + i]);
        s[i] = s[i] * f + in * g;
        h[i] = o * std::tanh(s[i]);
        x[i] = h[i];
      }
    }
    double se = 0;
    for (std::size_t i = 0; i < b; ++i) {
      y[i] = x[i] * p.extra[b + i] + p.extra[2 * b + i];
      se += std::exp(y[i]);
    }
    double lse = std::log(se + 2);
    for (std::size_t i = 0; i < b; ++i)
      total += p.seq[std::size_t(t + 1) * b + i] * (y[i] - lse);
  }
  return -total / (double(p.c - 1) * double(p.b));
}

// ---- with dualcast ----------------------------------------------------------------------------
// One layer-step, as one fused kernel: (x, h, s, w_f, w_i, w_o, w_g, b_f, b_i, b_o, b_g) -> (h',
// s'): the library's ready D-LSTM cell (dualcast/kernel/cells.hpp), a function object nvcc can run
// too.
using layer_step = dc::cells::dlstm_fn;
// The first layer, whose input is the character's bits times in_weight.
struct first_layer_step {
  static constexpr bool sparse_partials = layer_step::sparse_partials; // (kernel/kernel.hpp)
  template <class C, class IW, class... R>
  DUALCAST_HD auto operator()(C const &bits, IW const &in_weight, R const &...rest) const {
    return layer_step{}(bits * in_weight, rest...);
  }
};
inline constexpr dc::kernel<layer_step> layer{layer_step{}};
inline constexpr dc::kernel<first_layer_step> first_layer{first_layer_step{}};

// The parameters as tape variables: main (2l, 4b) and extra (3, b), and the views the steps use.
template <class T> struct params {
  dc::var<T> main, extra;
  std::vector<std::array<dc::var<T>, 8>> layer; // per layer w_f, w_i, w_o, w_g, b_f, b_i, b_o, b_g
  dc::var<T> in_weight, out_weight, out_bias;
};
template <class T> params<T> make_params(dc::var<T> main, dc::var<T> extra, int l, int b) {
  params<T> p{main, extra, {}, {}, {}, {}};
  auto row = [b](dc::var<T> const &m, int r, int j) { // (b,): part j of row r
    return dc::reshape(dc::slice(dc::slice(m, 0, r, r + 1), 1, j * b, (j + 1) * b), {b});
  };
  for (int k = 0; k < l; ++k) {
    std::array<dc::var<T>, 8> w;
    for (int j = 0; j < 4; ++j) {
      w[std::size_t(j)] = row(main, 2 * k, j);
      w[std::size_t(4 + j)] = row(main, 2 * k + 1, j);
    }
    p.layer.push_back(w);
  }
  p.in_weight = row(extra, 0, 0);
  p.out_weight = row(extra, 1, 0);
  p.out_bias = row(extra, 2, 0);
  return p;
}

// Every layer's initial hidden and cell state, as constants on tp.
template <class T>
std::pair<std::vector<dc::var<T>>, std::vector<dc::var<T>>> initial_state(problem const &p,
                                                                          dc::tape &tp) {
  int const l = p.l, b = p.b;
  std::vector<dc::var<T>> h(static_cast<std::size_t>(l)), s(static_cast<std::size_t>(l));
  for (int k = 0; k < l; ++k) {
    std::vector<T> hk(p.state.begin() + 2 * k * b, p.state.begin() + (2 * k + 1) * b);
    std::vector<T> sk(p.state.begin() + (2 * k + 1) * b, p.state.begin() + (2 * k + 2) * b);
    h[std::size_t(k)] = tp.constant(dc::tensor<T>::from({b}, hk));
    s[std::size_t(k)] = tp.constant(dc::tensor<T>::from({b}, sk));
  }
  return {std::move(h), std::move(s)};
}
// The character sequence, (c, b).
template <class T> dc::tensor<T> characters(problem const &p) {
  std::vector<T> seq_values(p.seq.begin(), p.seq.end());
  return dc::tensor<T>::from({p.c, p.b}, seq_values);
}
// The loss of the top layer's outputs at each step (`last`) against the next characters: the
// predictions of all steps stacked and the loss as a few whole-array operations.
template <class T>
dc::var<T> prediction_loss(problem const &p, params<T> const &prm,
                           std::vector<dc::var<T>> const &last, dc::tensor<T> const &seq) {
  int const b = p.b, c = p.c;
  auto y = dc::stack(last, 0) * prm.out_weight + prm.out_bias; // (c - 1, b)
  // lse materialised (a var, one log per row): left lazy, it would join the (c - 1, b) expression
  // below and its log would run b times per row, in the values pass and again in the VJP.
  dc::var<T> lse = dc::log(dc::sum(dc::exp(y), {1}, true) + 2.0); // (c - 1, 1)
  auto total = dc::sum((y - lse) * seq.slice(0, 1, c));           // the next characters
  using S = dc::scalar_of_t<T>; // (T itself for float / double; a tape over duals: its real part)
  return total * (S(-1) / (S(c - 1) * S(b)));
}

// The loss on the tape of `main` and `extra` (variables; constants when no gradient is wanted):
// (c - 1) * l fused layer-steps, then the predictions of all steps stacked and the loss as a few
// whole-array operations.
template <class T>
dc::var<T> loss(problem const &p, dc::var<T> const &main, dc::var<T> const &extra) {
  int const l = p.l, b = p.b, c = p.c;
  auto prm = make_params(main, extra, l, b);
  auto state = initial_state<T>(p, *main.owner());
  auto &h = state.first, &s = state.second;
  auto const seq = characters<T>(p);
  std::vector<dc::var<T>> last; // the top layer's output at each step
  for (int t = 0; t + 1 < c; ++t) {
    for (int k = 0; k < l; ++k) {
      auto const &w = prm.layer[std::size_t(k)];
      std::array<dc::var<T>, 2> hs;
      if (k == 0)
        hs = dc::call(first_layer, seq.select(0, t), prm.in_weight, h[0], s[0], w[0], w[1], w[2],
                      w[3], w[4], w[5], w[6], w[7]);
      else
        hs = dc::call(layer, h[std::size_t(k - 1)], h[std::size_t(k)], s[std::size_t(k)], w[0],
                      w[1], w[2], w[3], w[4], w[5], w[6], w[7]);
      h[std::size_t(k)] = hs[0];
      s[std::size_t(k)] = hs[1];
    }
    last.push_back(h[std::size_t(l - 1)]);
  }
  return prediction_loss(p, prm, last, seq);
}

// The same loss written with plain tape operators, the way a PyTorch user writes it: the gates
// are lazy expressions like sigmoid(x * w + b), the state update and the output are assigned to
// the state variables (materialised there: two fused nodes per layer-step, each gate joining the
// node that consumes it). With each_statement, every gate is assigned to a variable of its own
// as well (one fused node per statement: 6 per layer-step, 7 in the first layer), as in an eager
// framework. No dc::kernel is written; bench/tape_overhead times both beside loss() (one fused
// node per layer-step).
template <class T>
dc::var<T> loss_operators(problem const &p, dc::var<T> const &main, dc::var<T> const &extra,
                          bool each_statement = false) {
  int const l = p.l, b = p.b, c = p.c;
  auto prm = make_params(main, extra, l, b);
  auto state = initial_state<T>(p, *main.owner());
  auto &h = state.first, &s = state.second;
  auto const seq = characters<T>(p);
  std::vector<dc::var<T>> last;
  for (int t = 0; t + 1 < c; ++t) {
    for (int k = 0; k < l; ++k) {
      auto const &w = prm.layer[std::size_t(k)];
      auto &hk = h[std::size_t(k)];
      auto &sk = s[std::size_t(k)];
      auto step = [&](auto const &x) { // x: a variable, or the first layer's lazy input
        if (each_statement) {
          dc::var<T> const xv = x;
          dc::var<T> f = dc::sigmoid(xv * w[0] + w[4]);
          dc::var<T> i = dc::sigmoid(hk * w[1] + w[5]);
          dc::var<T> o = dc::sigmoid(xv * w[2] + w[6]);
          dc::var<T> g = dc::tanh(hk * w[3] + w[7]);
          sk = sk * f + i * g;
          hk = o * dc::tanh(sk);
        } else {
          auto f = dc::sigmoid(x * w[0] + w[4]);
          auto i = dc::sigmoid(hk * w[1] + w[5]);
          auto o = dc::sigmoid(x * w[2] + w[6]);
          auto g = dc::tanh(hk * w[3] + w[7]);
          sk = sk * f + i * g;
          hk = o * dc::tanh(sk);
        }
      };
      if (k == 0)
        step(seq.select(0, t) * prm.in_weight);
      else
        step(h[std::size_t(k - 1)]);
    }
    last.push_back(h[std::size_t(l - 1)]);
  }
  return prediction_loss(p, prm, last, seq);
}

} // namespace dlstm

// bench/gradbench/modules/gmm.hpp: GradBench's `gmm` (evals/gmm/README.md; the reference is
// cpp/gradbench/evals/gmm.hpp there): the log-posterior of a Gaussian mixture with a Wishart
// prior, and its gradient with respect to alpha, mu, q and l, as whole-array operations on the
// tape (the Q (x - mu) products of all points and components as one batched matmul).
//   input {d, k, n, alpha: k, mu: k x d, q: k x d, l: k x d(d-1)/2, x: n x d, m, gamma}
//   objective -> double; jacobian -> {alpha, mu, q, l} (the input's shapes)
#pragma once

#include "common.hpp"

#include <cmath>
#include <numbers>

namespace gradbench::gmm {

struct input {
  long d = 0, k = 0, n = 0, m = 0;
  double gamma = 0;
  dc::tensor<double> alpha, mu, q, l, x;
  std::vector<dc::index_t> l_index; // (k, d, d): where each entry of L sits in [l, 0]
};

inline input parse(json const &in) {
  input r;
  r.d = integer(field(in, "d"), "d", 1), r.k = integer(field(in, "k"), "k", 1);
  r.n = integer(field(in, "n"), "n", 1), r.m = integer(field(in, "m"), "m", 0);
  r.gamma = number(field(in, "gamma"), "gamma");
  std::size_t k = std::size_t(r.k), d = std::size_t(r.d), n = std::size_t(r.n);
  std::size_t tri = d * (d - 1) / 2, rows = k, cols = d;
  auto mat = [&](char const *name, std::size_t nr, std::size_t nc) {
    rows = nr, cols = nc;
    auto v = matrix(field(in, name), name, rows, cols);
    if (v.size() != nr * nc)
      throw input_error(std::string(name) + " must be " + std::to_string(nr) + " x " +
                        std::to_string(nc));
    return dc::tensor<double>::from({dc::index_t(nr), dc::index_t(nc)}, v);
  };
  r.alpha = dc::tensor<double>::from({r.k}, numbers(field(in, "alpha"), "alpha", k));
  r.mu = mat("mu", k, d), r.q = mat("q", k, d), r.x = mat("x", n, d);
  if (tri > 0)
    r.l = mat("l", k, tri);
  // L's strictly lower part is filled column by column: entry (row j, column i), i < j, is
  // l[i (2d - i - 1) / 2 + j - i - 1]; everything else points at the zero appended to l.
  for (std::size_t c = 0; c < k; ++c)
    for (std::size_t j = 0; j < d; ++j)
      for (std::size_t i = 0; i < d; ++i)
        r.l_index.push_back(dc::index_t(i < j ? i * (2 * d - i - 1) / 2 + j - i - 1 : tri));
  return r;
}

// log Gamma_d(a), the multivariate gamma function of the Wishart normaliser.
inline double log_gamma_d(double a, long d) {
  double out = 0.25 * double(d * (d - 1)) * std::log(std::numbers::pi);
  for (long j = 1; j <= d; ++j)
    out += std::lgamma(a + 0.5 * double(1 - j));
  return out;
}

// The log-posterior on the tape of alpha, mu, q and l (variables or constants).
inline dc::var<double> log_posterior(input const &in, dc::var<double> const &alpha,
                                     dc::var<double> const &mu, dc::var<double> const &q,
                                     dc::var<double> const &l) {
  auto &tp = *alpha.owner();
  long const d = in.d, k = in.k, n = in.n;
  auto x = tp.constant(in.x);
  // x_i - mu_c for every component c and point i: (k, n, d)
  auto diff = dc::reshape(x, {1, n, d}) - dc::reshape(mu, {k, 1, d});
  // Q_c (x_i - mu_c) = exp(q_c) * diff + L_c diff, L_c strictly lower triangular
  dc::var<double> qdiff = diff * dc::reshape(dc::exp(q), {k, 1, d});
  if (d > 1) {
    auto padded = dc::concat(
        std::vector<dc::var<double>>{l, tp.constant(dc::tensor<double>::zeros({k, 1}))}, 1);
    auto lower = dc::reshape(dc::gather(padded, 1, {dc::shape{k, d * d}, in.l_index}),
                             {k, d, d}); // (k, d, d)
    qdiff = qdiff + dc::matmul(diff, dc::transpose(lower, 1, 2));
  }
  auto sum_q = dc::sum(q, {1}, true);                                                      // (k, 1)
  auto main_term = dc::reshape(alpha, {k, 1}) + sum_q - 0.5 * dc::sum(qdiff * qdiff, {2}); // (k, n)
  auto slse = dc::sum(dc::logsumexp(main_term, 0));
  double const constant = -double(n * d) * 0.5 * std::log(2 * std::numbers::pi);
  // the Wishart prior
  // (in double: m is any non-negative integer the input states)
  double const dof = double(d) + double(in.m) + 1;
  double const c_prior =
      dof * double(d) * (std::log(in.gamma) - 0.5 * std::log(2.0)) - log_gamma_d(0.5 * dof, d);
  dc::var<double> frobenius = dc::sum(dc::exp(2.0 * q));
  if (d > 1)
    frobenius = frobenius + dc::sum(l * l);
  auto prior =
      double(k) * c_prior - 0.5 * in.gamma * in.gamma * frobenius + double(in.m) * dc::sum(sum_q);
  return slse - double(n) * dc::logsumexp(alpha) + prior + constant;
}

struct objective : job {
  input const &in;
  double y = 0;
  explicit objective(input const &i) : in(i) {}
  void run() override {
    dc::tape tp;
    use_executor(tp);
    auto l = in.d > 1 ? tp.constant(in.l) : tp.constant(dc::tensor<double>::zeros({in.k, 0}));
    y = log_posterior(in, tp.constant(in.alpha), tp.constant(in.mu), tp.constant(in.q), l).item();
  }
  json output() const override { return y; }
};

struct jacobian : job {
  input const &in;
  std::vector<double> alpha, mu, q, l;
  explicit jacobian(input const &i) : in(i) {}
  void run() override {
    dc::tape tp;
    use_executor(tp);
    auto va = tp.variable(in.alpha), vm = tp.variable(in.mu), vq = tp.variable(in.q);
    auto vl = in.d > 1 ? tp.variable(in.l) : tp.constant(dc::tensor<double>::zeros({in.k, 0}));
    tp.backward(log_posterior(in, va, vm, vq, vl));
    alpha = va.grad().to_vector(), mu = vm.grad().to_vector(), q = vq.grad().to_vector();
    l = in.d > 1 ? vl.grad().to_vector() : std::vector<double>();
  }
  json output() const override {
    json lrows = json::array();
    for (long c = 0; c < in.k; ++c) // (rows_of cannot split into empty rows when d = 1)
      lrows.push_back(std::vector<double>(l.begin() + c * in.d * (in.d - 1) / 2,
                                          l.begin() + (c + 1) * in.d * (in.d - 1) / 2));
    return {{"alpha", alpha},
            {"mu", rows_of(mu, std::size_t(in.d))},
            {"q", rows_of(q, std::size_t(in.d))},
            {"l", lrows}};
  }
};

// A plain double-precision objective (straight loops, as in GradBench's reference), for the
// timings only.
struct objective_plain : job {
  input const &in;
  double y = 0;
  explicit objective_plain(input const &i) : in(i) {}
  void run() override {
    long const d = in.d, k = in.k, n = in.n, tri = d * (d - 1) / 2;
    double const *alpha = in.alpha.data(), *mu = in.mu.data(), *q = in.q.data(), *x = in.x.data(),
                 *l = d > 1 ? in.l.data() : nullptr;
    std::size_t const ks = std::size_t(k), ds = std::size_t(d);
    std::vector<double> qexp(ds * ks), sum_q(ks), main_term(ks), xc(ds), qx(ds);
    for (long c = 0; c < k; ++c)
      for (long j = 0; j < d; ++j) {
        qexp[std::size_t(c * d + j)] = std::exp(q[c * d + j]);
        sum_q[std::size_t(c)] += q[c * d + j];
      }
    auto lse = [](std::vector<double> const &v, std::size_t count, double const *p) {
      double m = p ? p[0] : v[0];
      for (std::size_t i = 0; i < count; ++i)
        m = std::max(m, p ? p[i] : v[i]);
      double s = 0;
      for (std::size_t i = 0; i < count; ++i)
        s += std::exp((p ? p[i] : v[i]) - m);
      return m + std::log(s);
    };
    double slse = 0;
    for (long i = 0; i < n; ++i) {
      for (long c = 0; c < k; ++c) {
        for (long j = 0; j < d; ++j) {
          xc[std::size_t(j)] = x[i * d + j] - mu[c * d + j];
          qx[std::size_t(j)] = qexp[std::size_t(c * d + j)] * xc[std::size_t(j)];
        }
        long idx = 0;
        for (long a = 0; a < d; ++a)
          for (long b = a + 1; b < d; ++b)
            qx[std::size_t(b)] += l[c * tri + idx++] * xc[std::size_t(a)];
        double sq = 0;
        for (long j = 0; j < d; ++j)
          sq += qx[std::size_t(j)] * qx[std::size_t(j)];
        main_term[std::size_t(c)] = alpha[c] + sum_q[std::size_t(c)] - 0.5 * sq;
      }
      slse += lse(main_term, std::size_t(k), nullptr);
    }
    long const dof = d + in.m + 1;
    double const c_prior = double(dof * d) * (std::log(in.gamma) - 0.5 * std::log(2.0)) -
                           log_gamma_d(0.5 * double(dof), d);
    double prior = 0;
    for (long c = 0; c < k; ++c) {
      double frob = 0;
      for (long j = 0; j < d; ++j)
        frob += qexp[std::size_t(c * d + j)] * qexp[std::size_t(c * d + j)];
      for (long j = 0; j < tri; ++j)
        frob += l[c * tri + j] * l[c * tri + j];
      prior += 0.5 * in.gamma * in.gamma * frob - double(in.m) * sum_q[std::size_t(c)];
    }
    y = -double(n * d) * 0.5 * std::log(2 * std::numbers::pi) + slse -
        double(n) * lse(main_term, std::size_t(k), alpha) - prior + double(k) * c_prior;
  }
  json output() const override { return y; }
};

inline void add(registry &r) {
  r.add("gmm", "objective", make_function<input, objective>(parse));
  r.add("gmm", "jacobian", make_function<input, jacobian>(parse));
  r.add("gmm", "objective_plain", make_function<input, objective_plain>(parse));
}

} // namespace gradbench::gmm

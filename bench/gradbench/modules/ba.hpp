// bench/gradbench/modules/ba.hpp: GradBench's `ba` (evals/ba/README.md; the reference is
// cpp/gradbench/evals/ba.hpp there): bundle adjustment's reprojection errors and their sparse
// Jacobian. The per-observation 2 x 15 Jacobian blocks come from ONE kernel (the reprojection
// error of one observation, written once) broadcast over all observations by dualcast::apply with
// its 15 parameters active: dual numbers, no derivative written by hand.
//   input {n, m, p, cam: 11, x: 3, w, feat: 2}: n cameras, m points, p observations, all copies
//   of the given ones; observation i sees camera i % n and point i % m (GradBench's expansion).
//   objective -> {"reproj_error": {"elements": obs 0's 2 errors, "repeated": p},
//                 "w_err": {"element": 1 - w^2, "repeated": p}}
//   jacobian  -> the (3p) x (11n + 3m + p) Jacobian in CSR form {rows, cols, vals}, each array cut
//                to its first 30 entries and its last one, as the eval compares it
#pragma once

#include "common.hpp"

#include <dualcast/broadcast/broadcast.hpp>
#include <dualcast/math/functions.hpp>

#include <utility>

namespace gradbench::ba {

struct input {
  long n = 0, m = 0, p = 0;
  std::vector<double> cams, points, weights, feats; // n x 11, m x 3, p, p x 2
};
inline input parse(json const &in) {
  input r;
  r.n = integer(field(in, "n"), "n", 1), r.m = integer(field(in, "m"), "m", 1);
  r.p = integer(field(in, "p"), "p", 1);
  check_size(double(r.n) * 11 + double(r.m) * 3 + double(r.p) * 3,
             "n x 11 cameras, m x 3 points and p x 3 observations");
  auto cam = numbers(field(in, "cam"), "cam", 11), x = numbers(field(in, "x"), "x", 3);
  double w = number(field(in, "w"), "w");
  auto feat = numbers(field(in, "feat"), "feat", 2);
  for (long i = 0; i < r.n; ++i)
    r.cams.insert(r.cams.end(), cam.begin(), cam.end());
  for (long i = 0; i < r.m; ++i)
    r.points.insert(r.points.end(), x.begin(), x.end());
  r.weights.assign(std::size_t(r.p), w);
  for (long i = 0; i < r.p; ++i)
    r.feats.insert(r.feats.end(), feat.begin(), feat.end());
  return r;
}

// One observation's weighted reprojection error: camera [r1 r2 r3 C1 C2 C3 f u0 v0 k1 k2], point
// X, weight w, feature (fx, fy). Rotation by Rodrigues' formula (small-angle form at 0).
constexpr auto reprojection_error =
    dc::kernel([](auto r1, auto r2, auto r3, auto c1, auto c2, auto c3, auto f, auto u0, auto v0,
                  auto k1, auto k2, auto x1, auto x2, auto x3, auto w, auto fx, auto fy) {
      using dc::cos, dc::sin, dc::sqrt;
      auto p1 = x1 - c1, p2 = x2 - c2, p3 = x3 - c3;
      auto sqtheta = r1 * r1 + r2 * r2 + r3 * r3;
      decltype(p1 + p2 + p3 + sqtheta) y1, y2, y3; // (the rotated point: active where any part is)
      if (sqtheta != 0) {
        auto theta = sqrt(sqtheta);
        auto cost = cos(theta), sint = sin(theta), inv = 1.0 / theta;
        auto w1 = r1 * inv, w2 = r2 * inv, w3 = r3 * inv;
        auto tmp = (w1 * p1 + w2 * p2 + w3 * p3) * (1.0 - cost);
        y1 = p1 * cost + (w2 * p3 - w3 * p2) * sint + w1 * tmp;
        y2 = p2 * cost + (w3 * p1 - w1 * p3) * sint + w2 * tmp;
        y3 = p3 * cost + (w1 * p2 - w2 * p1) * sint + w3 * tmp;
      } else {
        y1 = p1 + (r2 * p3 - r3 * p2);
        y2 = p2 + (r3 * p1 - r1 * p3);
        y3 = p3 + (r1 * p2 - r2 * p1);
      }
      auto e1 = y1 / y3, e2 = y2 / y3;
      auto rsq = e1 * e1 + e2 * e2;
      auto distortion = 1.0 + k1 * rsq + k2 * rsq * rsq;
      return dc::outputs(w * (e1 * distortion * f + u0 - fx), w * (e2 * distortion * f + v0 - fy));
    });

// The kernel's 17 arguments over all observations: each observation's camera and point gathered
// into rows (observation i's camera is i % n, its point i % m), the columns as strided views.
struct gathered {
  std::vector<double> cam, point; // p x 11, p x 3
  void compute(input const &in) {
    std::size_t const p = std::size_t(in.p);
    cam.resize(p * 11), point.resize(p * 3);
    for (std::size_t i = 0; i < p; ++i) {
      std::size_t const c = i % std::size_t(in.n), x = i % std::size_t(in.m);
      std::copy_n(&in.cams[c * 11], 11, &cam[i * 11]);
      std::copy_n(&in.points[x * 3], 3, &point[i * 3]);
    }
  }
  template <class F> void with_arguments(input const &in, F &&f) const {
    dc::shape const s{in.p};
    auto column = [&](double const *base, long stride) {
      return dc::view<double const>(base, s, {stride});
    };
    [&]<std::size_t... C>(std::index_sequence<C...>) {
      f(column(&cam[C], 11)..., column(&point[0], 3), column(&point[1], 3), column(&point[2], 3),
        column(in.weights.data(), 1), column(&in.feats[0], 2), column(&in.feats[1], 2));
    }
    (std::make_index_sequence<11>{});
  }
};

struct objective : job {
  input const &in;
  gathered args;
  std::vector<double> reproj, w_err; // p x 2, p
  explicit objective(input const &i) : in(i) {}
  void run() override {
    args.compute(in);
    std::size_t const p = std::size_t(in.p);
    reproj.resize(2 * p), w_err.resize(p);
    dc::shape const s{in.p};
    args.with_arguments(in, [&](auto const &...a) {
      dc::apply(executor(), reprojection_error,
                dc::out(dc::view<double>(&reproj[0], s, {2}), dc::view<double>(&reproj[1], s, {2})),
                a...);
    });
    for (std::size_t i = 0; i < p; ++i)
      w_err[i] = 1 - in.weights[i] * in.weights[i];
  }
  json output() const override {
    return {{"reproj_error", {{"elements", {reproj[0], reproj[1]}}, {"repeated", in.p}}},
            {"w_err", {{"element", w_err[0]}, {"repeated", in.p}}}};
  }
};

// The first 30 entries and the last one, as the eval compares them.
template <class T> json cut(std::vector<T> const &v) {
  std::vector<T> out(v.begin(), v.begin() + long(std::min<std::size_t>(30, v.size())));
  out.push_back(v.back());
  return out;
}

struct jacobian : job {
  input const &in;
  gathered args;
  std::vector<double> errors, blocks; // p x 2 values; p x 30 partials (x row, then y row)
  std::vector<int> rows, cols;
  std::vector<double> vals;
  explicit jacobian(input const &i) : in(i) {}
  void run() override {
    args.compute(in);
    std::size_t const p = std::size_t(in.p);
    errors.resize(2 * p), blocks.resize(30 * p);
    dc::shape const s{in.p};
    // partials output-major: output e (0: x, 1: y), parameter a (11 camera, 3 point, weight) in
    // column 15 e + a of the observation's row -- the CSR order of its two rows
    auto partials = [&]<std::size_t... J>(std::index_sequence<J...>) {
      return dc::out(dc::view<double>(&blocks[J], s, {30})...);
    }
    (std::make_index_sequence<30>{});
    args.with_arguments(in, [&](auto const &...a) {
      dc::apply(executor(), reprojection_error,
                // all 15 partials in one evaluation (the default chunk of 8 evaluates twice)
                dc::chunked<15>(dc::active<0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14>),
                dc::out(dc::view<double>(&errors[0], s, {2}), dc::view<double>(&errors[1], s, {2})),
                partials, a...);
    });
    // The sparse matrix: two rows of 15 per observation, then one row per weight (d (1 - w^2) /
    // dw = -2w: the weight term is one line, differentiated by a dual number too).
    int const n = int(in.n), m = int(in.m);
    rows.assign(1, 0), cols.clear(), vals.clear();
    rows.reserve(3 * p + 1), cols.reserve(31 * p), vals.reserve(31 * p);
    for (std::size_t i = 0; i < p; ++i) {
      int const cam = int(i % std::size_t(n)), pt = int(i % std::size_t(m));
      for (int e = 0; e < 2; ++e) {
        rows.push_back(rows.back() + 15);
        for (int a = 0; a < 11; ++a)
          cols.push_back(11 * cam + a);
        for (int a = 0; a < 3; ++a)
          cols.push_back(11 * n + 3 * pt + a);
        cols.push_back(11 * n + 3 * m + int(i));
        vals.insert(vals.end(), &blocks[30 * i + 15 * std::size_t(e)],
                    &blocks[30 * i + 15 * std::size_t(e)] + 15);
      }
    }
    for (std::size_t i = 0; i < p; ++i) {
      auto w = dc::dual<double, 1>::variable(in.weights[i], 0);
      rows.push_back(rows.back() + 1);
      cols.push_back(11 * n + 3 * m + int(i));
      vals.push_back((1.0 - w * w).d[0]);
    }
  }
  json output() const override {
    return {{"rows", cut(rows)}, {"cols", cut(cols)}, {"vals", cut(vals)}};
  }
};

// A plain double-precision objective: the same kernel called on doubles, one observation after
// the other, for the timings only.
struct objective_plain : job {
  input const &in;
  std::vector<double> reproj, w_err;
  explicit objective_plain(input const &i) : in(i) {}
  void run() override {
    std::size_t const p = std::size_t(in.p);
    reproj.resize(2 * p), w_err.resize(p);
    for (std::size_t i = 0; i < p; ++i) {
      double const *c = &in.cams[(i % std::size_t(in.n)) * 11];
      double const *x = &in.points[(i % std::size_t(in.m)) * 3];
      double const *f = &in.feats[2 * i];
      auto [ex, ey] = reprojection_error(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9],
                                         c[10], x[0], x[1], x[2], in.weights[i], f[0], f[1]);
      reproj[2 * i] = ex, reproj[2 * i + 1] = ey;
      w_err[i] = 1 - in.weights[i] * in.weights[i];
    }
  }
  json output() const override {
    return {{"reproj_error", {{"elements", {reproj[0], reproj[1]}}, {"repeated", in.p}}},
            {"w_err", {{"element", w_err[0]}, {"repeated", in.p}}}};
  }
};

inline void add(registry &r) {
  r.add("ba", "objective_plain", make_function<input, objective_plain>(parse));
  r.add("ba", "objective", make_function<input, objective>(parse));
  r.add("ba", "jacobian", make_function<input, jacobian>(parse));
}

} // namespace gradbench::ba

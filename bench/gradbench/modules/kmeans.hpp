// bench/gradbench/modules/kmeans.hpp: GradBench's `kmeans` (evals/kmeans/README.md): the k-means
// cost sum_i min_j |C_j - P_i|^2, and `dir` = J / H, the cost's gradient divided elementwise by
// its Hessian diagonal with respect to the centroids, both from nested dual numbers.
//   input {points: n x d, centroids: k x d}; cost -> double; dir -> double[k][d]
//
// Given each point's nearest centroid (where the min is taken; the cost is piecewise smooth),
// point i's cost is sum_a (C_{j,a} - P_{i,a})^2: every coordinate enters one term only, so the
// Hessian is diagonal and one evaluation of that term on a second-order dual
// (dual<dual<double, 1>, 1>, both levels seeded) gives the coordinate's first and second
// derivative.
#pragma once

#include "common.hpp"

#include <dualcast/broadcast/for_each.hpp>
#include <dualcast/numbers/dual.hpp>

#include <limits>

namespace gradbench::kmeans {

struct input {
  std::size_t n = 0, k = 0, d = 0;
  std::vector<double> points, centroids;
};
inline input parse(json const &in) {
  input r;
  r.points = matrix(field(in, "points"), "points", r.n, r.d);
  r.centroids = matrix(field(in, "centroids"), "centroids", r.k, r.d);
  if (r.n == 0 || r.k == 0 || r.d == 0)
    throw input_error("points and centroids must not be empty");
  return r;
}

// The squared distance of one coordinate: the function that is differentiated.
constexpr auto square_distance = [](auto c, auto p) {
  auto u = c - p;
  return u * u;
};

// Each point's nearest centroid (the first of equally near ones) and its squared distance.
struct nearest {
  double const *points, *centroids;
  std::size_t k, d;
  dc::index_t *which;
  double *distance;
  DUALCAST_HD void operator()(dc::index_t i) const {
    double best = std::numeric_limits<double>::infinity();
    dc::index_t arg = 0;
    for (std::size_t j = 0; j < k; ++j) {
      double s = 0;
      for (std::size_t a = 0; a < d; ++a)
        s += square_distance(centroids[j * d + a], points[std::size_t(i) * d + a]);
      if (s < best)
        best = s, arg = dc::index_t(j);
    }
    which[i] = arg, distance[i] = best;
  }
};

struct assignment {
  std::vector<dc::index_t> which;
  std::vector<double> distance;
  void compute(input const &in) {
    which.resize(in.n), distance.resize(in.n);
    dc::for_each(
        executor(), dc::index_t(in.n),
        nearest{in.points.data(), in.centroids.data(), in.k, in.d, which.data(), distance.data()},
        dc::index_t(in.k * in.d));
  }
};

struct cost : job {
  input const &in;
  assignment near;
  double y = 0;
  explicit cost(input const &i) : in(i) {}
  void run() override {
    near.compute(in);
    y = 0;
    for (double v : near.distance)
      y += v;
  }
  json output() const override { return y; }
};

struct dir : job {
  input const &in;
  assignment near;
  std::vector<double> g, h;
  explicit dir(input const &i) : in(i) {}
  void run() override {
    using d1 = dc::dual<double, 1>;
    using d2 = dc::dual<d1, 1>;
    near.compute(in);
    g.assign(in.k * in.d, 0.0), h.assign(in.k * in.d, 0.0);
    for (std::size_t i = 0; i < in.n; ++i) {
      std::size_t const j = std::size_t(near.which[i]);
      for (std::size_t a = 0; a < in.d; ++a) {
        d2 c{d1::variable(in.centroids[j * in.d + a], 0)}; // inner level seeded ...
        c.d[0] = d1(1.0);                                  // ... and the outer one
        d2 const term = square_distance(c, in.points[i * in.d + a]);
        g[j * in.d + a] += term.val.d[0];  // d term / dc
        h[j * in.d + a] += term.d[0].d[0]; // d^2 term / dc^2
      }
    }
    for (std::size_t x = 0; x < g.size(); ++x)
      g[x] = h[x] != 0 ? g[x] / h[x] : 0.0; // a centroid without points: no direction
  }
  json output() const override { return rows_of(g, in.d); }
};

inline void add(registry &r) {
  r.add("kmeans", "cost", make_function<input, cost>(parse));
  r.add("kmeans", "dir", make_function<input, dir>(parse));
}

} // namespace gradbench::kmeans

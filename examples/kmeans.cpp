// k-means on the tape with reduce_by_index: the cost of an assignment of points to centroids,
//   cost(C) = sum over clusters k of  sum over points i in k of |x_i - c_k|^2,
// is a histogram (dualcast::reduce_by_index with bin_op::plus) of the points' squared distances
// to their centroids (dualcast::index_select). Its gradient 2 (n_k c_k - sum of cluster k's
// points) comes back through the histogram's adjoint (a gather) and index_select's; a gradient
// step of size 1 / (2 n_k) per cluster is Lloyd's update (c_k = the mean of its points), so the
// cost falls at every step.
//
//   kmeans [points = 100000] [clusters = 8] [steps = 10]
//
// Prints the cost as it falls; checks the tape's gradient against the closed form computed with
// reduce_by_index on tensors; returns 1 if the cost did not fall or the gradient disagrees.
#include <dualcast/autodiff.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace dc = dualcast;
using T = double;
constexpr dc::index_t dims = 2;

namespace {

// `n` points around `k` centres on a circle, and the index of the nearest centroid of each.
std::vector<T> make_points(dc::index_t n, dc::index_t k) {
  std::mt19937 gen(11);
  std::normal_distribution<double> spread(0.0, 0.15);
  std::vector<T> x(std::size_t(n * dims));
  for (dc::index_t i = 0; i < n; ++i) {
    double const angle = 6.283185307179586 * double(i % k) / double(k);
    x[std::size_t(i * dims)] = std::cos(angle) + spread(gen);
    x[std::size_t(i * dims + 1)] = std::sin(angle) + spread(gen);
  }
  return x;
}

std::vector<dc::index_t> nearest(std::vector<T> const &x, std::vector<T> const &c) {
  std::size_t const n = x.size() / dims, k = c.size() / dims;
  std::vector<dc::index_t> a(n);
  for (std::size_t i = 0; i < n; ++i) {
    double best = HUGE_VAL;
    for (std::size_t j = 0; j < k; ++j) {
      double const dx = x[i * dims] - c[j * dims], dy = x[i * dims + 1] - c[j * dims + 1];
      if (dx * dx + dy * dy < best)
        best = dx * dx + dy * dy, a[i] = dc::index_t(j);
    }
  }
  return a;
}

} // namespace

int main(int argc, char **argv) {
  dc::index_t const n = argc > 1 ? std::atoi(argv[1]) : 100000;
  dc::index_t const k = argc > 2 ? std::atoi(argv[2]) : 8;
  int const steps = argc > 3 ? std::atoi(argv[3]) : 10;
  if (k < 1 || n < k || steps < 1) {
    std::fprintf(stderr, "usage: kmeans [points >= clusters] [clusters >= 1] [steps >= 1]\n");
    return 2;
  }
  auto const xs = make_points(n, k);
  auto const X = dc::tensor<T>::from({n, dims}, xs);
  // Start from k points drawn at random (they may share a true cluster).
  std::vector<T> centroids;
  std::mt19937 pick(5);
  for (dc::index_t j = 0; j < k; ++j) {
    auto const i = std::size_t(std::uniform_int_distribution<dc::index_t>(0, n - 1)(pick));
    centroids.insert(centroids.end(), xs.begin() + std::ptrdiff_t(i * dims),
                     xs.begin() + std::ptrdiff_t(i * dims + dims));
  }
  std::printf("k-means: %lld points, %lld clusters, %d steps\n", static_cast<long long>(n),
              static_cast<long long>(k), steps);
  std::printf("%6s %16s\n", "step", "cost");
  double first = 0, cost = 0, worst_gradient_error = 0;
  for (int s = 0; s <= steps; ++s) {
    auto const assign = nearest(xs, centroids);
    dc::tape tp;
    auto C = tp.variable(dc::tensor<T>::from({k, dims}, centroids));
    auto diff = tp.constant(X) - dc::index_select(C, 0, assign); // x_i - c_(a_i)
    auto per_cluster = dc::reduce_by_index(dc::sum(diff * diff, {1}), assign, k, dc::bin_op::plus);
    auto total = dc::sum(per_cluster);
    cost = total.item();
    if (s == 0)
      first = cost;
    std::printf("%6d %16.8e\n", s, cost);
    if (s == steps)
      break;
    tp.backward(total);
    auto const g = C.grad().to_vector();
    // The closed form from histograms on tensors: n_k and the sum of each cluster's points.
    auto const counts =
        dc::reduce_by_index(dc::tensor<T>::full({n}, 1.0), assign, k, dc::bin_op::plus).to_vector();
    auto const sums = dc::reduce_by_index(X, assign, k, dc::bin_op::plus).to_vector();
    for (dc::index_t j = 0; j < k; ++j)
      for (dc::index_t d = 0; d < dims; ++d) {
        auto const e = std::size_t(j * dims + d);
        double const want = 2 * (counts[std::size_t(j)] * centroids[e] - sums[e]);
        worst_gradient_error = std::fmax(worst_gradient_error, std::abs(g[e] - want));
        if (counts[std::size_t(j)] > 0) // Lloyd's step; an empty cluster stays where it is
          centroids[e] -= g[e] / (2 * counts[std::size_t(j)]);
      }
  }
  bool const fell = cost < first;
  bool const gradient_ok = worst_gradient_error < 1e-8 * double(n);
  std::printf("cost %.6e -> %.6e (%s); gradient against 2 (n_k c_k - sum_k x): max error %.2e "
              "(%s)\n",
              first, cost, fell ? "fell" : "DID NOT FALL", worst_gradient_error,
              gradient_ok ? "ok" : "WRONG");
  return fell && gradient_ok ? 0 : 1;
}

// Tests of reduce_by_index (histograms) and stencils on the tape (issue 13, items 3 and 4):
// values against naive references (empty bins, out-of-range indices, every boundary mode),
// gradients against central differences in double precision (zeros in products, ties in min /
// max, nonlinear stencils in 1-, 2- and 3-D, non-square shapes, extents smaller than the
// stencil's reach), the stencil's gather adjoint against a naive sequential scatter, and 1
// thread equal to 2 bit for bit; at 10^7 rows, histogram values against the naive loop and
// gradients at a few rows.
#include <dualcast/autodiff.hpp>

#include <doctest/doctest.h>

#include "tape_support.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

using namespace tape_support;

namespace {

std::vector<dc::index_t> random_indices(std::size_t n, dc::index_t lo, dc::index_t hi,
                                        unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<dc::index_t> u(lo, hi);
  std::vector<dc::index_t> r(n);
  for (auto &k : r)
    k = u(g);
  return r;
}

// reduce_by_index, the obvious way: a sequential loop over the rows.
std::vector<double> naive_bins(std::vector<double> const &v, std::vector<dc::index_t> const &idx,
                               dc::index_t bins, dc::index_t inner, dc::bin_op op) {
  double const inf = std::numeric_limits<double>::infinity();
  double const neutral = op == dc::bin_op::plus    ? 0.0
                         : op == dc::bin_op::times ? 1.0
                         : op == dc::bin_op::min   ? inf
                                                   : -inf;
  std::vector<double> y(std::size_t(bins * inner), neutral);
  for (std::size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] < 0 || idx[i] >= bins)
      continue;
    for (dc::index_t c = 0; c < inner; ++c) {
      double &d = y[std::size_t(idx[i] * inner + c)];
      double const x = v[i * std::size_t(inner) + std::size_t(c)];
      switch (op) {
      case dc::bin_op::plus:
        d += x;
        break;
      case dc::bin_op::times:
        d *= x;
        break;
      case dc::bin_op::min:
        d = x < d ? x : d;
        break;
      case dc::bin_op::max:
        d = x > d ? x : d;
        break;
      }
    }
  }
  return y;
}

constexpr dc::bin_op all_bin_ops[] = {dc::bin_op::plus, dc::bin_op::times, dc::bin_op::min,
                                      dc::bin_op::max};

// ---- stencils: test functions and a naive reference ----

// 1-D: asymmetric, nonlinear.
constexpr auto offs1 = dc::offsets({-2}, {0}, {1});
struct f1 {
  template <class A> A operator()(A a, A b, A c) const {
    return a - 2.0 * b + c + dc::tanh(a * c) + b * b;
  }
};
// 2-D: the 5-point Laplacian plus tanh of a neighbour.
constexpr auto offs2 = dc::offsets({0, 0}, {-1, 0}, {1, 0}, {0, -1}, {0, 1});
struct f2 {
  template <class A> A operator()(A c, A n, A s, A w, A e) const {
    return (n + s + w + e - 4.0 * c) * 0.25 + dc::tanh(e) * c;
  }
};
// 2-D, four slots reaching up to three elements (the interior-path test).
struct f2b {
  template <class A> A operator()(A c, A a, A b, A d) const { return c * a - dc::tanh(b) + d; }
};
// 3-D: the 7-point Laplacian, a far diagonal neighbour and a nonlinearity.
constexpr auto offs3 = dc::offsets({0, 0, 0}, {-1, 0, 0}, {1, 0, 0}, {0, -1, 0}, {0, 1, 0},
                                   {0, 0, -1}, {0, 0, 1}, {1, 2, -2});
struct f3 {
  template <class A> A operator()(A c, A a, A b, A d, A e, A g, A h, A q) const {
    return a + b + d + e + g + h - 6.0 * c + dc::sin(q) * c + dc::tanh(a - h);
  }
};

constexpr dc::boundary all_boundaries[] = {dc::boundary::zero, dc::boundary::clamp,
                                           dc::boundary::periodic};

// The element of an axis of n that coordinate c reads (-1: the constant 0), written directly.
dc::index_t naive_map(dc::index_t c, dc::index_t n, dc::boundary b) {
  if (c >= 0 && c < n)
    return c;
  switch (b) {
  case dc::boundary::zero:
    return -1;
  case dc::boundary::clamp:
    return std::min(std::max(c, dc::index_t(0)), n - 1);
  case dc::boundary::periodic:
    return ((c % n) + n) % n;
  }
  return -1;
}

// Neighbour k of point p (row-major flat index) in an array of shape s, or -1.
template <int D, int K>
dc::index_t naive_neighbour(shape const &s, dc::stencil_offsets<D, K> const &o, dc::index_t p,
                            int k, dc::boundary b) {
  std::array<dc::index_t, D> coord{};
  for (int a = D - 1; a >= 0; --a) {
    coord[std::size_t(a)] = p % s.ext[a];
    p /= s.ext[a];
  }
  dc::index_t flat = 0;
  for (int a = 0; a < D; ++a) {
    dc::index_t const q = naive_map(coord[std::size_t(a)] + o.o[k][a], s.ext[a], b);
    if (q < 0)
      return -1;
    flat = flat * s.ext[a] + q;
  }
  return flat;
}

// y = stencil(x) and the adjoint for the cotangent w as a sequential SCATTER (plain reverse
// mode: xbar[neighbour k of p] += w[p] * d_k f(p)).
template <int D, int K, class F>
std::pair<std::vector<double>, std::vector<double>>
naive_stencil(T64 const &x, dc::stencil_offsets<D, K> const &o, F f, dc::boundary b,
              std::vector<double> const &w) {
  using Dd = dc::dual<double, K>;
  auto const xv = x.to_vector();
  std::vector<double> y(xv.size()), xbar(xv.size(), 0.0);
  for (dc::index_t p = 0; p < x.size(); ++p) {
    std::array<Dd, K> nb{};
    std::array<dc::index_t, K> at{};
    for (int k = 0; k < K; ++k) {
      at[std::size_t(k)] = naive_neighbour(x.dims(), o, p, k, b);
      nb[std::size_t(k)] =
          at[std::size_t(k)] < 0 ? Dd(0.0) : Dd::variable(xv[std::size_t(at[std::size_t(k)])], k);
    }
    Dd const r = std::apply([&](auto... a) { return Dd(f(a...)); }, nb);
    y[std::size_t(p)] = r.val;
    for (int k = 0; k < K; ++k)
      if (at[std::size_t(k)] >= 0)
        xbar[std::size_t(at[std::size_t(k)])] += w[std::size_t(p)] * r.d[k];
  }
  return {y, xbar};
}

// Everything for one stencil, shape and boundary: values, the gather against the scatter,
// central differences.
template <int D, int K, class F>
void check_stencil(shape const &s, dc::stencil_offsets<D, K> const &o, F f, dc::boundary b,
                   unsigned seed) {
  INFO("shape " << dc::to_string(s) << " boundary " << int(b));
  auto const x = random_tensor(s, seed);
  auto const w = random_tensor(s, 777u + unsigned(s.size())); // weigh()'s cotangent
  auto const [y_ref, xbar_ref] = naive_stencil(x, o, f, b, w.to_vector());
  // Values, on tensors and on the tape.
  check_close(dc::stencil(x, o, f, b).to_vector(), y_ref, 1e-15);
  dc::tape tp;
  auto v = tp.variable(x.clone());
  auto y = dc::stencil(v, o, f, b);
  check_close(y.value().to_vector(), y_ref, 1e-15);
  // The gather adjoint against the scatter, with the partials stored and recomputed.
  tp.backward(weigh(y));
  check_close(grads_of(v), xbar_ref, 1e-14);
  dc::tape tr;
  auto vr = tr.variable(x.clone());
  tr.backward(weigh(dc::stencil(vr, o, f, b, dc::policy::recompute)));
  check_close(grads_of(vr), xbar_ref, 1e-14);
  // Central differences.
  check_gradients([o, f, b](auto const &vs) { return dc::stencil(vs[0], o, f, b); }, {x});
}

} // namespace

// ---- reduce_by_index ---------------------------------------------------------------------------
TEST_CASE("reduce_by_index: values, empty bins, out-of-range indices") {
  double const inf = std::numeric_limits<double>::infinity();
  auto x = T64::from({6}, {1, -2, 3, 0.5, 4, -1});
  std::vector<dc::index_t> idx{2, 0, 2, -1, 5, 0}; // bin 1, 3 empty; -1 and 5 ignored
  CHECK(dc::reduce_by_index(x, idx, 4, dc::bin_op::plus).to_vector() ==
        std::vector<double>{-3, 0, 4, 0});
  CHECK(dc::reduce_by_index(x, idx, 4, dc::bin_op::times).to_vector() ==
        std::vector<double>{2, 1, 3, 1});
  CHECK(dc::reduce_by_index(x, idx, 4, dc::bin_op::min).to_vector() ==
        std::vector<double>{-2, inf, 1, inf});
  CHECK(dc::reduce_by_index(x, idx, 4, dc::bin_op::max).to_vector() ==
        std::vector<double>{-1, -inf, 3, -inf});
  CHECK(dc::reduce_by_index(x, idx, 0, dc::bin_op::plus).dims() == shape{0});
  // Rows of a 2-D array, against the naive loop.
  auto m = random_tensor({40, 3}, 11);
  auto mi = random_indices(40, -2, 9, 12);
  for (auto op : all_bin_ops)
    CHECK(dc::reduce_by_index(m, mi, 8, op).to_vector() == naive_bins(m.to_vector(), mi, 8, 3, op));
  CHECK_THROWS_AS(dc::reduce_by_index(x, {1, 2}, 4, dc::bin_op::plus), dc::shape_error);
  CHECK_THROWS_AS(dc::reduce_by_index(x, idx, -1, dc::bin_op::plus), dc::shape_error);
}

TEST_CASE("reduce_by_index: the privatized plus in chunks of a GPU's size, on the CPU") {
  // The chunks a CUDA device takes (detail::bin_chunk_rows): 1024 rows, here 5 of them and a
  // partial one; integer values, so that any order of the additions gives the naive loop's sum.
  dc::index_t const n = 5 * 1024 + 300, inner = 3, bins = 7;
  auto idx = random_indices(std::size_t(n), -2, bins + 1, 41);
  auto x = T64::empty({n, inner});
  std::mt19937 g(42);
  for (dc::index_t e = 0; e < x.size(); ++e)
    x.mutable_data()[e] = double(std::uniform_int_distribution<int>(-50, 50)(g));
  REQUIRE(dc::detail::bin_chunk_rows(dc::device::cuda(0)) == 1024);
  dc::detail::bin_rows br;
  br.idx = dc::detail::upload_indices("test", idx, dc::device::host());
  br.n = n, br.bins = bins, br.chunk = 1024;
  REQUIRE(dc::detail::bins_privatized(dc::bin_op::plus, n, bins, br.chunk));
  for (int threads : {1, 2}) {
    auto y = dc::detail::bins_forward_run(dc::cpu{threads}, x, br, dc::bin_op::plus, inner);
    CHECK(y.dims() == shape{bins, inner});
    CHECK(y.to_vector() == naive_bins(x.to_vector(), idx, bins, inner, dc::bin_op::plus));
  }
  // More than 1024 chunks (a GPU's 10^7 rows make 9766): the chunks' histograms are added in
  // groups of 64 first (detail::bin_chunk_group), here 1303 chunks of 8 rows.
  dc::index_t const n2 = 10420;
  auto idx2 = random_indices(std::size_t(n2), -2, bins + 1, 43);
  auto x2 = T64::empty({n2, inner});
  for (dc::index_t e = 0; e < x2.size(); ++e)
    x2.mutable_data()[e] = double(std::uniform_int_distribution<int>(-50, 50)(g));
  dc::detail::bin_rows br2;
  br2.idx = dc::detail::upload_indices("test", idx2, dc::device::host());
  br2.n = n2, br2.bins = bins, br2.chunk = 8;
  REQUIRE(dc::detail::bins_privatized(dc::bin_op::plus, n2, bins, br2.chunk));
  REQUIRE(dc::detail::bin_chunk_group(dc::detail::bin_chunks(n2, 8)) == 64);
  for (int threads : {1, 2}) {
    auto y = dc::detail::bins_forward_run(dc::cpu{threads}, x2, br2, dc::bin_op::plus, inner);
    CHECK(y.to_vector() == naive_bins(x2.to_vector(), idx2, bins, inner, dc::bin_op::plus));
  }
}

TEST_CASE("reduce_by_index: gradients against central differences") {
  auto x = random_tensor({30}, 21, 0.5, 1.5);
  auto idx = random_indices(30, -1, 7, 22); // 7: out of range for 7 bins; some bins empty
  for (auto op : all_bin_ops) {
    INFO("op " << int(op));
    check_gradients([idx, op](auto const &v) { return dc::reduce_by_index(v[0], idx, 7, op); },
                    {x});
    auto m = random_tensor({12, 2, 3}, 23, 0.5, 1.5);
    auto mi = random_indices(12, 0, 4, 24);
    check_gradients([mi, op](auto const &v) { return dc::reduce_by_index(v[0], mi, 5, op); }, {m});
    // Through a lazy expression.
    check_gradients(
        [idx, op](auto const &v) { return dc::reduce_by_index(v[0] * 2.0, idx, 7, op); }, {x});
  }
  // Products with one and with several zeros in a bin.
  std::vector<dc::index_t> pi{0, 0, 0, 1, 1, 1, 2, 2};
  auto z = T64::from({8}, {2, 0, 3, 0, 5, 0, 4, 1.5});
  check_gradients(
      [pi](auto const &v) { return dc::reduce_by_index(v[0], pi, 3, dc::bin_op::times); }, {z});
}

TEST_CASE("reduce_by_index: exact adjoints (zero counts, ties to the lowest index, gather)") {
  std::vector<dc::index_t> idx{0, 0, 0, 1, 1, 1, 2, 3};
  auto x = T64::from({8}, {2, 0, 3, 0, 5, 0, 7, 1});
  {
    dc::tape tp;
    auto v = tp.variable(x.clone());
    auto y = dc::reduce_by_index(v, idx, 4, dc::bin_op::times);
    CHECK(y.value().to_vector() == std::vector<double>{0, 0, 7, 1});
    tp.backward(dc::sum(y * T64::from({4}, {1, 1, 2, 3})));
    CHECK(grads_of(v) == std::vector<double>{0, 6, 0, 0, 0, 0, 2, 3});
  }
  auto t = T64::from({8}, {1, 3, 3, 2, 2, 0.5, 7, 9});
  for (auto op : {dc::bin_op::max, dc::bin_op::min}) {
    dc::tape tp;
    auto v = tp.variable(t.clone());
    auto y = dc::reduce_by_index(v, idx, 4, op);
    tp.backward(dc::sum(y * T64::from({4}, {1, 2, 3, 4})));
    if (op == dc::bin_op::max)
      CHECK(grads_of(v) == std::vector<double>{0, 1, 0, 2, 0, 0, 3, 4}); // tie: row 1, row 3
    else
      CHECK(grads_of(v) == std::vector<double>{1, 0, 0, 0, 0, 2, 3, 4});
  }
  {
    dc::tape tp;
    auto v = tp.variable(t.clone());
    std::vector<dc::index_t> oi{1, -3, 1, 4, 0, 0, 1, 9};
    tp.backward(
        dc::sum(dc::reduce_by_index(v, oi, 4, dc::bin_op::plus) * T64::from({4}, {1, 2, 3, 4})));
    CHECK(grads_of(v) == std::vector<double>{2, 0, 2, 0, 1, 1, 2, 0});
  }
}

TEST_CASE("reduce_by_index: 1 thread and 2 threads give the same bits") {
  auto x = random_tensor({200000}, 31, 0.9, 1.1);
  auto idx = random_indices(200000, -5, 1000, 32);
  for (auto op : all_bin_ops) {
    INFO("op " << int(op));
    auto f = [&idx, op](V64 const &v) { return dc::reduce_by_index(v, idx, 1000, op); };
    auto [y1, g1] = run_threads(1, x, f);
    auto [y2, g2] = run_threads(2, x, f);
    CHECK(same_bits(y1, y2));
    CHECK(same_bits(g1, g2));
    if (op == dc::bin_op::plus)
      check_close(y1, naive_bins(x.to_vector(), idx, 1000, 1, op), 1e-12);
    else
      CHECK(y1 == naive_bins(x.to_vector(), idx, 1000, 1, op));
  }
}

// ---- stencils ----------------------------------------------------------------------------------
TEST_CASE("stencil 1-D: values, gather = scatter, central differences, every boundary") {
  for (auto b : all_boundaries)
    for (dc::index_t n : {1, 2, 3, 7})
      check_stencil({n}, offs1, f1{}, b, 41u + unsigned(n));
}

TEST_CASE("stencil 2-D: values, gather = scatter, central differences, every boundary") {
  for (auto b : all_boundaries)
    for (shape s : {shape{1, 1}, shape{1, 5}, shape{2, 3}, shape{5, 2}, shape{6, 4}})
      check_stencil(s, offs2, f2{}, b, 51u + unsigned(s.size()));
}

TEST_CASE("stencil 3-D: values, gather = scatter, central differences, every boundary") {
  for (auto b : all_boundaries)
    for (shape s : {shape{1, 2, 3}, shape{3, 4, 2}, shape{2, 1, 5}, shape{3, 3, 4}})
      check_stencil(s, offs3, f3{}, b, 61u + unsigned(s.size()));
}

TEST_CASE("stencil: exact clamp adjoint at the edges (a 1-D shift)") {
  // y[p] = x[clamp(p + 1)] + 2 x[clamp(p - 1)] with n = 4: x[3] gets from p = 2 and p = 3.
  auto o = dc::offsets({1}, {-1});
  auto f = [](auto a, auto c) { return a + 2.0 * c; };
  dc::tape tp;
  auto v = tp.variable(T64::from({4}, {1, 2, 3, 4}));
  auto y = dc::stencil(v, o, f, dc::boundary::clamp);
  CHECK(y.value().to_vector() == std::vector<double>{4, 5, 8, 10});
  tp.backward(dc::sum(y * T64::from({4}, {1, 10, 100, 1000})));
  // x0: 2*1 (p=0 via -1) + 2*10 (p=1 via -1); x1: 1*1 + 2*100; x2: 10 + 2*1000; x3: 100 + 1000.
  CHECK(grads_of(v) == std::vector<double>{22, 201, 2010, 1100});
}

TEST_CASE("stencil: 1 thread and 2 threads give the same bits") {
  auto x2 = random_tensor({300, 170}, 71);
  for (auto b : all_boundaries) {
    INFO("boundary " << int(b));
    auto g2 = [b](V64 const &v) { return dc::stencil(v, offs2, f2{}, b); };
    auto [y1, d1] = run_threads(1, x2, g2);
    auto [y2, d2] = run_threads(2, x2, g2);
    CHECK(same_bits(y1, y2));
    CHECK(same_bits(d1, d2));
    auto r2 = [b](V64 const &v) { return dc::stencil(v, offs2, f2{}, b, dc::policy::recompute); };
    auto [yr1, dr1] = run_threads(1, x2, r2);
    auto [yr2, dr2] = run_threads(2, x2, r2);
    CHECK(same_bits(dr1, dr2));
    check_close(dr1, d1, 1e-14);
  }
  auto x3 = random_tensor({20, 30, 40}, 72);
  auto g3 = [](V64 const &v) { return dc::stencil(v, offs3, f3{}, dc::boundary::clamp); };
  auto [y1, d1] = run_threads(1, x3, g3);
  auto [y2, d2] = run_threads(2, x3, g3);
  CHECK(same_bits(y1, y2));
  CHECK(same_bits(d1, d2));
  // And the gather against the scatter at this size.
  auto w = random_tensor(x3.dims(), 5).to_vector();
  auto [yr, dr] = naive_stencil(x3, offs3, f3{}, dc::boundary::clamp, w);
  check_close(d1, dr, 1e-13);
}

// The interior points run with flat offsets, the rim through the boundary mapping
// (ops/stencil.hpp): with the interior boxes emptied every point takes the rim's path, and the
// values, partials and gather must be the same bits.
template <int D, int K, class F>
void check_interior_path(shape const &s, dc::stencil_offsets<D, K> const &o, F f, dc::boundary b) {
  INFO("shape " << dc::to_string(s) << " boundary " << int(b));
  auto const x = random_tensor(s, 91), gy = random_tensor(s, 92);
  auto fast = dc::detail::make_stencil_geometry(s, o, b);
  auto rim_only = fast;
  for (int a = 0; a < 3; ++a) {
    rim_only.in_hi[a] = rim_only.in_lo[a], rim_only.g_hi[a] = rim_only.g_lo[a];
    rim_only.r_hi[a] = rim_only.r_lo[a];
  }
  dc::cpu const ex{};
  dc::index_t const rows = fast.ext[0] * fast.ext[1];
  auto run = [&](dc::detail::stencil_geometry<K> const &g) {
    auto y = dc::detail::stencil_run(ex, x, g, f);
    auto c = T64::empty({x.size() * K});
    dc::detail::parallel_for_rows(
        ex, rows, 1,
        dc::detail::stencil_partials<double, K, F>{x.data(), gy.data(), c.raw_data(), g, f});
    auto gx = T64::empty(s), gr = T64::empty(s);
    dc::detail::parallel_for_rows(
        ex, rows, 1, dc::detail::stencil_gather<double, K>{c.data(), gx.raw_data(), g});
    dc::detail::parallel_for_rows(ex, rows, 1,
                                  dc::detail::stencil_gather_recompute<double, K, F>{
                                      x.data(), gy.data(), gr.raw_data(), g, f});
    return std::array<std::vector<double>, 4>{y.to_vector(), c.to_vector(), gx.to_vector(),
                                              gr.to_vector()};
  };
  auto const a = run(fast), r = run(rim_only);
  for (std::size_t i = 0; i < 4; ++i)
    CHECK(same_bits(a[i], r[i]));
  check_close(a[3], a[2], 1e-14); // recomputed partials: the stored ones' gradient
}

TEST_CASE("stencil: the interior's flat offsets give the rim path's bits") {
  for (auto b : all_boundaries) {
    check_interior_path({37, 29}, offs2, f2{}, b);
    check_interior_path({9, 11, 13}, offs3, f3{}, b);
    check_interior_path({40}, offs1, f1{}, b);
    // offsets reaching further than one element, and extents smaller than the reach
    check_interior_path({8, 7}, dc::offsets({0, 0}, {-2, 1}, {3, -1}, {0, 2}), f2b{}, b);
    check_interior_path({2, 3}, dc::offsets({0, 0}, {-2, 1}, {3, -1}, {0, 2}), f2b{}, b);
  }
}

TEST_CASE("reduce_by_index: plus over few bins in chunks of rows (trailing axes, 1 == 2 threads)") {
  // 4 chunks of 65536 rows (the last short), 50 bins, rows of 3, a few indices out of range.
  dc::index_t const n = 3 * 65536 + 17, bins = 50;
  auto x = random_tensor({n, 3}, 91);
  std::vector<dc::index_t> idx(static_cast<std::size_t>(n));
  std::mt19937 g(92);
  for (auto &k : idx)
    k = dc::index_t(g() % unsigned(bins + 4)) - 2;
  check_close(dc::reduce_by_index(x, idx, bins, dc::bin_op::plus).to_vector(),
              naive_bins(x.to_vector(), idx, bins, 3, dc::bin_op::plus), 1e-12);
  auto f = [&idx](V64 const &v) { return dc::reduce_by_index(v, idx, bins, dc::bin_op::plus); };
  auto [y1, g1] = run_threads(1, x, f);
  auto [y2, g2] = run_threads(2, x, f);
  CHECK(same_bits(y1, y2));
  CHECK(same_bits(g1, g2));
}

TEST_CASE("reduce_by_index: 10^7 rows against a naive loop, gradients at a few rows") {
  dc::index_t const n = large_size, bins = 1000; // 10^7 (10^6 under the sanitizers)
  auto x = fast_random_tensor({n}, 81);
  // Runs of 97 rows to one bin, the bins in turn, two of every 1003 runs out of range: each bin's
  // rows spread over the whole array, in cache-friendly runs (random bins per row make every
  // pass a cache miss per row: about 4x the test's time).
  std::vector<dc::index_t> idx(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < idx.size(); ++i)
    idx[i] = dc::index_t((i / 97) % std::size_t(bins + 3)) - 2;
  auto const xv = x.to_vector();
  // Rows of one bin combine in increasing order, as in the naive loop: the same sums up to
  // rounding, the same maxima exactly.
  check_close(dc::reduce_by_index(x, idx, bins, dc::bin_op::plus).to_vector(),
              naive_bins(xv, idx, bins, 1, dc::bin_op::plus), 1e-12);
  auto const mx = naive_bins(xv, idx, bins, 1, dc::bin_op::max);
  CHECK(dc::reduce_by_index(x, idx, bins, dc::bin_op::max).to_vector() == mx);
  // Rows to check: one out of range and the winner of bin 7.
  dc::index_t out_of_range = 0, winner = 0;
  while (idx[std::size_t(out_of_range)] >= 0 && idx[std::size_t(out_of_range)] < bins)
    ++out_of_range;
  while (idx[std::size_t(winner)] != 7 || xv[std::size_t(winner)] != mx[7])
    ++winner;
  auto c = random_tensor({bins}, 83);
  check_gradients_at(
      [&idx, c](auto const &v) {
        return dc::sum(dc::reduce_by_index(v[0], idx, bins, dc::bin_op::plus) * c) +
               dc::sum(dc::reduce_by_index(v[0], idx, bins, dc::bin_op::max) * c);
      },
      {x}, {out_of_range, winner});
}

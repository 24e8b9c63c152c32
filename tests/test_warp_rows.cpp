// The GPU-shaped paths of the row operations, run on the CPU by an emulated warp
// (tests/cases/emulated_warp.hpp: 32 threads, CUDA's shuffle tree) against the sequential path
// the CPU backend runs: the online one-pass softmax, max / min groups, gather and the scatter
// combining colliding writes, and conv2d's lane-split kernels.
#include "cases/emulated_warp.hpp"

#include <dualcast/autodiff.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace dc = dualcast;
using dualcast_tests::emulated_warp;

namespace {

std::vector<double> random_values(std::size_t n, unsigned seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-3, 3);
  std::vector<double> v(n);
  for (auto &x : v)
    x = u(g);
  return v;
}

// f over `rows` rows, sequentially (the CPU's one lane) and on the emulated warp.
template <class F> void run_serial(dc::index_t rows, F const &f) {
  for (dc::index_t r = 0; r < rows; ++r)
    f(r, dc::detail::cpu_backend::serial_lanes{});
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }
// Within `ulps` of double's epsilon times max(|a|, |b|, 1e-300), or both NaN.
bool close(double a, double b, double ulps) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) && std::isnan(b);
  if (a == b)
    return true;
  return std::abs(a - b) <= ulps * std::numeric_limits<double>::epsilon() *
                                std::max({std::abs(a), std::abs(b), 1e-300});
}

} // namespace

TEST_CASE("emulated warp: the online softmax equals the two passes within a few ulp") {
  double const inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  for (dc::index_t n : {1, 5, 31, 32, 33, 75, 200}) {
    dc::index_t const rows = 6;
    auto x = random_values(std::size_t(rows * n), unsigned(n));
    // row 1 ascending (the maximum grows at every element), row 2 all -inf, row 3 one +inf,
    // row 4 a NaN (not first), row 5 a -inf among numbers
    for (dc::index_t j = 0; j < n; ++j)
      x[std::size_t(n + j)] = 0.01 * double(j);
    for (dc::index_t j = 0; j < n; ++j)
      x[std::size_t(2 * n + j)] = -inf;
    x[std::size_t(3 * n + n / 2)] = inf;
    x[std::size_t(4 * n + n - 1)] = nan;
    x[std::size_t(5 * n)] = -inf;
    for (int mode : {0, 1, 2}) {
      CAPTURE(n);
      CAPTURE(mode);
      std::vector<double> a(x.size()), b(x.size());
      run_serial(rows, dc::detail::softmax_row<double>{x.data(), a.data(), n, mode});
      emulated_warp::run_rows(rows, dc::detail::softmax_row<double>{x.data(), b.data(), n, mode});
      std::size_t const outputs = mode == 2 ? std::size_t(rows) : x.size();
      for (std::size_t k = 0; k < outputs; ++k) {
        CAPTURE(k);
        if (n == 1 || std::isinf(a[k]) || std::isnan(a[k])) {
          CHECK((same_bits(a[k], b[k]) || (std::isnan(a[k]) && std::isnan(b[k]))));
        } else {
          CHECK(close(a[k], b[k], 16));
        }
      }
    }
  }
}

TEST_CASE("emulated warp: max / min groups pick the same positions (ties to the first, NaN)") {
  dc::index_t const n = 70, rows = 4;
  auto x = random_values(std::size_t(rows * n), 3);
  x[10] = x[50] = 9.0;              // row 0: a tie, across lanes
  x[std::size_t(n)] = std::nan(""); // row 1: a NaN first wins
  x[std::size_t(2 * n + 40)] = std::nan("");
  for (dc::index_t j = 0; j < n; ++j)
    x[std::size_t(3 * n + j)] = 1.0; // row 3: all equal
  auto check = [&](auto max_or_min) {
    constexpr bool Max = decltype(max_or_min)::value;
    std::vector<double> ya(rows), yb(rows);
    std::vector<dc::index_t> aa(rows), ab(rows);
    run_serial(rows, dc::detail::extremum_groups<double, Max>{x.data(), ya.data(), aa.data(), n});
    emulated_warp::run_rows(
        rows, dc::detail::extremum_groups<double, Max>{x.data(), yb.data(), ab.data(), n});
    CHECK(aa == ab);
    for (std::size_t i = 0; i < std::size_t(rows); ++i)
      CHECK((same_bits(ya[i], yb[i]) || (std::isnan(ya[i]) && std::isnan(yb[i]))));
  };
  check(std::true_type{});
  check(std::false_type{});
}

TEST_CASE("emulated warp: max / min over chunks of a group pick the first extremum") {
  dc::index_t const n = 70, rows = 3, chunks = 3, len = 25; // chunks of 25, 25 and 20
  auto x = random_values(std::size_t(rows * n), 4);
  x[10] = x[60] = 9.0;              // row 0: a tie across chunks
  x[std::size_t(n)] = std::nan(""); // row 1: a NaN first wins
  x[std::size_t(2 * n + 30)] = std::nan("");
  auto check = [&](auto max_or_min) {
    constexpr bool Max = decltype(max_or_min)::value;
    std::vector<double> ya(rows), yb(rows);
    std::vector<dc::index_t> aa(rows), ab(rows), cand(rows * chunks);
    run_serial(rows, dc::detail::extremum_groups<double, Max>{x.data(), ya.data(), aa.data(), n});
    dc::detail::extremum_groups<double, Max> g{x.data(), nullptr, nullptr,    n,
                                               chunks,   len,     cand.data()};
    emulated_warp::run_rows(rows * chunks, g);
    emulated_warp::run_rows(rows, dc::detail::extremum_pick<double, Max>{
                                      x.data(), yb.data(), ab.data(), n, chunks, cand.data()});
    CHECK(aa == ab);
    for (std::size_t i = 0; i < std::size_t(rows); ++i)
      CHECK((same_bits(ya[i], yb[i]) || (std::isnan(ya[i]) && std::isnan(yb[i]))));
  };
  check(std::true_type{});
  check(std::false_type{});
}

// The scans' passes (ops/scan.hpp) over a warp: 32 neighbouring elements scanned over the lanes,
// then combined with the running value (another association than the one lane's loop: equal up
// to rounding; the extrema exactly).
namespace {
struct mobius_op { // a b + a + b: associative, not an operator of the library's
  template <class A> A operator()(A a, A b) const { return a * b + a + b; }
};
bool near(double a, double b) {
  return std::abs(a - b) <= 1e-12 * std::max({std::abs(a), std::abs(b), 1.0});
}

// How many of run(rows_of)'s outputs differ (beyond near) between one lane (the CPU's) and the
// emulated warp; rows_of(rows, f) runs the row operation f.
template <class Run> std::size_t lanes_disagree(Run const &run) {
  auto a = run([](dc::index_t r, auto const &f) { run_serial(r, f); });
  auto b = run([](dc::index_t r, auto const &f) { emulated_warp::run_rows(r, f); });
  std::size_t bad = 0;
  for (std::size_t k = 0; k < a.size(); ++k)
    bad += !near(a[k], b[k]);
  return bad;
}

template <class Op> void check_scan_passes(Op const &op, double lo, double hi) {
  using namespace dc::detail;
  // One row of n, in pieces of scan_block (4096): the last piece short, and a row of 300 whole.
  for (dc::index_t n : {dc::index_t(300), 2 * scan_block + 75}) {
    dc::index_t const blocks = n > scan_block ? (n + scan_block - 1) / scan_block : 1;
    CAPTURE(n);
    scan_rows const rows{1, n, 1};
    std::vector<double> x(static_cast<std::size_t>(n)), gy = random_values(std::size_t(n), 21);
    std::mt19937 g(static_cast<unsigned>(n));
    for (auto &v : x)
      v = std::uniform_real_distribution<double>(lo, hi)(g);
    for (bool exclusive : {false, true}) {
      CAPTURE(exclusive);
      // Forward: the pieces' reductions, their carries, the pieces from their carries.
      auto forward = [&](auto run) {
        std::vector<double> part(static_cast<std::size_t>(blocks)), y(static_cast<std::size_t>(n));
        if (blocks > 1) {
          run(blocks, scan_piece_reduce<double, Op>{x.data(), part.data(), rows, blocks, op});
          run(1, scan_piece_carries<double, Op>{part.data(), blocks, op});
        }
        run(blocks, scan_piece_forward<double, Op>{x.data(), part.data(), y.data(), rows, blocks,
                                                   exclusive, 0.0, op});
        return y;
      };
      // Backward: the pieces' affine maps, their carries from the right, the pieces.
      dc::index_t const m = n - (exclusive ? 1 : 0);
      auto backward = [&](auto run, std::vector<double> const &y) {
        scan_adjoint_args<double, Op> const a{x.data(), y.data(), gy.data(), rows,
                                              m,        blocks,   exclusive, op};
        std::vector<double> A(static_cast<std::size_t>(blocks)),
            B(static_cast<std::size_t>(blocks)), gx(static_cast<std::size_t>(n));
        if (blocks > 1) {
          run(blocks, scan_piece_summary<double, Op>{a, A.data(), B.data()});
          run(1, scan_piece_adjoint_carries<double>{A.data(), B.data(), blocks});
        }
        run(blocks, scan_piece_adjoint<double, Op>{a, A.data(), gx.data()});
        return gx;
      };
      auto serial = [](dc::index_t rows_, auto const &f) { run_serial(rows_, f); };
      auto warp = [](dc::index_t rows_, auto const &f) { emulated_warp::run_rows(rows_, f); };
      auto ya = forward(serial), yb = forward(warp);
      auto ga = backward(serial, ya), gb = backward(warp, ya);
      std::size_t bad = 0;
      for (std::size_t k = exclusive ? 1 : 0; k < ya.size(); ++k) // (y_0: the neutral element)
        bad += !near(ya[k], yb[k]);
      for (std::size_t k = 0; k < ga.size(); ++k)
        bad += !near(ga[k], gb[k]);
      CHECK(bad == 0);
    }
  }
}
} // namespace

TEST_CASE("emulated warp: the scans' passes (+, *, max, a user operator) equal one lane's") {
  check_scan_passes(dc::detail::scan_plus<double>{}, 0.5, 1.5);
  check_scan_passes(dc::detail::scan_times<double>{}, 0.999, 1.001);
  check_scan_passes(dc::detail::scan_extremum<double, true>{}, -1.0, 1.0);
  check_scan_passes(dc::detail::scan_user<double, mobius_op>{{}}, -0.001, 0.001);
}

TEST_CASE(
    "emulated warp: prod's passes (blocks, groups, the zero-count adjoint) equal one lane's") {
  using namespace dc::detail;
  dc::index_t const n = 2 * reduce_block + 75, blocks = 3; // one group of three blocks
  std::mt19937 g(31);
  std::vector<double> x(static_cast<std::size_t>(n)), gy = {0.7};
  for (int zeros : {0, 1, 2}) {
    CAPTURE(zeros);
    for (auto &v : x)
      v = std::uniform_real_distribution<double>(0.999, 1.001)(g);
    if (zeros > 0)
      x[100] = 0.0;
    if (zeros > 1)
      x[std::size_t(n - 3)] = 0.0;
    auto run = [&](auto rows_of) {
      std::vector<double> zb(3), pb(3), z(1), p(1), y(1), gx(static_cast<std::size_t>(n));
      rows_of(blocks, prod_blocks<double>{x.data(), zb.data(), pb.data(), n, blocks});
      rows_of(1, prod_groups<double>{zb.data(), pb.data(), z.data(), p.data(), y.data(), blocks});
      rows_of(blocks,
              prod_adjoint<double>{x.data(), z.data(), p.data(), gy.data(), gx.data(), n, blocks});
      gx.push_back(y[0]);
      gx.push_back(z[0]);
      return gx;
    };
    CHECK(lanes_disagree(run) == 0);
    CHECK(run([](dc::index_t r, auto const &f) { run_serial(r, f); }).back() ==
          double(zeros)); // the zero count
  }
}

TEST_CASE("emulated warp: linear_recurrence's passes (maps composed over lanes) equal one lane's") {
  using namespace dc::detail;
  for (dc::index_t n : {dc::index_t(300), 2 * scan_block + 75}) {
    CAPTURE(n);
    dc::index_t const blocks = n > scan_block ? (n + scan_block - 1) / scan_block : 1;
    scan_rows const rows{1, n, 1};
    std::mt19937 g(static_cast<unsigned>(n));
    std::vector<double> a(static_cast<std::size_t>(n)), b = random_values(std::size_t(n), 41),
                                                        gh = random_values(std::size_t(n), 42);
    for (auto &v : a)
      v = std::uniform_real_distribution<double>(-1.0, 1.0)(g);
    a[7] = 0.0; // (the carry past it is exactly b there)
    std::vector<double> h0 = {0.3};
    auto run = [&](auto rows_of) {
      std::vector<double> h(static_cast<std::size_t>(n)), A(static_cast<std::size_t>(blocks)),
          B(static_cast<std::size_t>(blocks)), ga(static_cast<std::size_t>(n)),
          gb(static_cast<std::size_t>(n)), gh0(1);
      recurrence_forward<double> fwd{a.data(), b.data(), h0.data(), h.data(), rows, blocks};
      if (blocks > 1) {
        rows_of(blocks,
                recurrence_piece_map<double>{a.data(), b.data(), A.data(), B.data(), rows, blocks});
        rows_of(1, recurrence_piece_carries<double>{A.data(), B.data(), h0.data(), blocks});
        fwd.carry = A.data();
      }
      rows_of(blocks, fwd);
      recurrence_adjoint<double> adj{a.data(),  h0.data(),  h.data(), gh.data(), ga.data(),
                                     gb.data(), gh0.data(), rows,     blocks};
      if (blocks > 1) {
        rows_of(blocks, recurrence_piece_adjoint_map<double>{a.data(), gh.data(), A.data(),
                                                             B.data(), rows, blocks});
        rows_of(1,
                recurrence_piece_adjoint_carries<double>{A.data(), B.data(), gh0.data(), blocks});
        adj.carry_in = A.data();
      }
      rows_of(blocks, adj);
      h.insert(h.end(), ga.begin(), ga.end());
      h.insert(h.end(), gb.begin(), gb.end());
      h.push_back(gh0[0]);
      return h;
    };
    CHECK(lanes_disagree(run) == 0);
  }
}

namespace {
struct f5 { // a nonlinear stencil function, every slot used
  template <class A> A operator()(A c, A n, A s, A w, A e) const {
    return c * dc::tanh(n) + 0.5 * s - w * e;
  }
};
} // namespace

TEST_CASE("emulated warp: the stencil's passes (forward, partials, gather), bit for bit") {
  using namespace dc::detail;
  static constexpr auto cross = dc::offsets({0, 0}, {-1, 0}, {1, 0}, {0, -2}, {0, 1});
  dc::shape const s{5, 70}; // rows longer than a warp, rims at both ends
  auto x = random_values(350, 51), gy = random_values(350, 52);
  gy[3] = 0.0; // (the partials of a point with ybar == 0 are not evaluated)
  for (auto b : {dc::boundary::zero, dc::boundary::clamp, dc::boundary::periodic}) {
    auto const geo = make_stencil_geometry(s, cross, b);
    auto run = [&](auto rows_of) {
      std::vector<double> y(350), c(350 * 5), gx(350);
      rows_of(5, stencil_forward<double, 5, f5>{x.data(), y.data(), geo, f5{}});
      rows_of(5, stencil_partials<double, 5, f5>{x.data(), gy.data(), c.data(), geo, f5{}});
      rows_of(5, stencil_gather<double, 5>{c.data(), gx.data(), geo});
      y.insert(y.end(), c.begin(), c.end());
      y.insert(y.end(), gx.begin(), gx.end());
      return y;
    };
    auto one = run([](dc::index_t r, auto const &f) { run_serial(r, f); });
    auto warp = run([](dc::index_t r, auto const &f) { emulated_warp::run_rows(r, f); });
    CHECK(std::memcmp(one.data(), warp.data(), one.size() * sizeof(double)) == 0);
  }
}

namespace {
struct abs_times { // a |b|: associative, not commutative
  template <class A> A operator()(A a, A b) const { return a * dc::abs(b); }
};
} // namespace

TEST_CASE("emulated warp: reduce with a user operator (in order over lanes) equals one lane's") {
  using namespace dc::detail;
  dc::index_t const n = 2 * reduce_block + 75, blocks = 3; // one group of three blocks
  std::mt19937 g(61);
  std::vector<double> x(static_cast<std::size_t>(n)), gy = {0.9};
  for (auto &v : x)
    v = std::uniform_real_distribution<double>(0.9995, 1.0005)(g) * (g() % 2 ? 1.0 : -1.0);
  auto run = [&](auto rows_of) {
    std::vector<double> part(3), y(1), left(3), right(3), gx(static_cast<std::size_t>(n));
    rows_of(blocks, op_blocks<double, abs_times>{x.data(), part.data(), n, blocks, {}});
    rows_of(1, op_groups<double, abs_times>{part.data(), y.data(), blocks, 1.0, {}});
    rows_of(1,
            op_block_scans<double, abs_times>{part.data(), left.data(), right.data(), blocks, {}});
    rows_of(blocks, op_adjoint<double, abs_times>{
                        x.data(), left.data(), right.data(), gy.data(), gx.data(), n, blocks, {}});
    gx.push_back(y[0]);
    gx.insert(gx.end(), part.begin(), part.end());
    gx.push_back(left[1]), gx.push_back(left[2]), gx.push_back(right[0]), gx.push_back(right[1]);
    return gx;
  };
  CHECK(lanes_disagree(run) == 0);
}

TEST_CASE("emulated warp: gather and the scatter with colliding indices, bit for bit") {
  // y [R, L] against x [R, M] along axis 1; L > 32 so that collisions fall within and across
  // the 32-position chunks
  dc::index_t const R = 3, L = 100, M = 23;
  std::vector<dc::index_t> idx(static_cast<std::size_t>(L));
  std::mt19937 g(9);
  for (auto &i : idx)
    i = dc::index_t(g() % 7 == 0 ? 5 : g() % unsigned(M)); // many 5s
  auto y = random_values(std::size_t(R * L), 11);
  auto x0 = random_values(std::size_t(R * M), 12);
  for (bool per_element : {false, true}) {
    std::vector<dc::index_t> id = idx;
    if (per_element) // one index per element of y
      for (dc::index_t k = 1; k < R; ++k)
        for (dc::index_t i = 0; i < L; ++i)
          id.push_back((idx[std::size_t(i)] + k) % M);
    auto lines = [&](auto scatter, double *dst, double const *src, bool overwrite) {
      dc::detail::index_lines<double, decltype(scatter)::value> f;
      f.rank = 2, f.axis = 1;
      f.ext[0] = R, f.ext[1] = L;
      f.xs[0] = M, f.xs[1] = 1;
      f.ys[0] = L, f.ys[1] = 1;
      f.src = src, f.dst = dst, f.idx = id.data();
      f.per_element = per_element, f.overwrite = overwrite;
      return f;
    };
    for (bool overwrite : {false, true}) {
      CAPTURE(per_element);
      CAPTURE(overwrite);
      auto xa = x0, xb = x0;
      run_serial(R, lines(std::true_type{}, xa.data(), y.data(), overwrite));
      emulated_warp::run_rows(R, lines(std::true_type{}, xb.data(), y.data(), overwrite));
      bool all_same = true;
      for (std::size_t k = 0; k < xa.size(); ++k)
        all_same = all_same && same_bits(xa[k], xb[k]);
      CHECK(all_same);
      CHECK(xa != x0); // the scatter wrote
    }
    std::vector<double> ga(std::size_t(R * L)), gb(ga.size());
    run_serial(R, lines(std::false_type{}, ga.data(), x0.data(), false));
    emulated_warp::run_rows(R, lines(std::false_type{}, gb.data(), x0.data(), false));
    CHECK(ga == gb);
  }
}

TEST_CASE("emulated warp: conv2d's lane-split kernels (forward and input gather bit for bit)") {
  struct geometry_case {
    dc::index_t N, C, H, W, O, K, stride, padding;
  };
  for (auto c : {geometry_case{2, 3, 5, 37, 2, 3, 1, 0}, geometry_case{1, 2, 6, 40, 3, 3, 2, 1},
                 geometry_case{2, 1, 4, 33, 2, 5, 2, 2}, geometry_case{1, 2, 3, 3, 2, 1, 1, 0}}) {
    CAPTURE(c.W);
    CAPTURE(c.stride);
    auto const g = dc::detail::make_conv2d_geometry(dc::shape{c.N, c.C, c.H, c.W},
                                                    dc::shape{c.O, c.C, c.K, c.K},
                                                    {.stride = c.stride, .padding = c.padding});
    auto x = random_values(std::size_t(c.N * c.C * c.H * c.W), 21);
    auto w = random_values(std::size_t(c.O * c.C * c.K * c.K), 22);
    auto b = random_values(std::size_t(c.O), 23);
    auto gy = random_values(std::size_t(g.N * g.O * g.OH * g.OW), 24);
    auto same = [](std::vector<double> const &a, std::vector<double> const &b) {
      bool all = a.size() == b.size();
      for (std::size_t k = 0; all && k < a.size(); ++k)
        all = same_bits(a[k], b[k]);
      return all;
    };
    std::vector<double> ya(gy.size()), yb(gy.size());
    run_serial(g.N * g.O * g.OH,
               dc::detail::conv2d_forward<double>{x.data(), w.data(), b.data(), ya.data(), g});
    emulated_warp::run_rows(g.N * g.O * g.OH, dc::detail::conv2d_forward<double>{
                                                  x.data(), w.data(), b.data(), yb.data(), g});
    CHECK(same(ya, yb));
    std::vector<double> xa(x.size()), xb(x.size());
    run_serial(g.N * g.C * g.H,
               dc::detail::conv2d_input_gather<double>{gy.data(), w.data(), xa.data(), g});
    emulated_warp::run_rows(g.N * g.C * g.H, dc::detail::conv2d_input_gather<double>{
                                                 gy.data(), w.data(), xb.data(), g});
    CHECK(same(xa, xb));
    // the weight and bias sums: another order (the lanes' partial sums), a few ulp
    std::vector<double> wa(w.size()), wb(w.size()), ba(b.size()), bb(b.size());
    run_serial(g.O * g.C * g.KH,
               dc::detail::conv2d_weight_adjoint<double>{gy.data(), x.data(), wa.data(), g});
    emulated_warp::run_rows(g.O * g.C * g.KH, dc::detail::conv2d_weight_adjoint<double>{
                                                  gy.data(), x.data(), wb.data(), g});
    run_serial(g.O, dc::detail::conv2d_bias_adjoint<double>{gy.data(), ba.data(), g});
    emulated_warp::run_rows(g.O, dc::detail::conv2d_bias_adjoint<double>{gy.data(), bb.data(), g});
    // sums of up to a few hundred terms of order 1: 64 ulp of the largest term's scale
    for (std::size_t k = 0; k < wa.size(); ++k)
      CHECK(std::abs(wa[k] - wb[k]) <= 64 * std::numeric_limits<double>::epsilon() * 9.0 * 100);
    for (std::size_t k = 0; k < ba.size(); ++k)
      CHECK(std::abs(ba[k] - bb[k]) <= 64 * std::numeric_limits<double>::epsilon() * 3.0 * 100);
  }
}

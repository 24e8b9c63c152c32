// bench/primitives.cpp: the parallel primitives' adjoints (issue 13), float32.
//
// 1. grad_over_primal: gradient time / primal time at 10^7 elements for reduce (+, *, min), scan
//    (+, *, min) and the histogram (+, 1000 bins, random bins), beside Futhark's published ratios
//    (A100, 10^7 elements; ../shared/notes/parallel-adjoints.md). primal: the tape operation on a
//    constant (no node, nothing saved); gradient: the same on a variable plus backward (seed 1
//    for a scalar, a fixed random cotangent otherwise) -- what a user's gradient costs;
//    backward_over_primal: its backward pass alone over the primal (a tape always runs the
//    primal, while Futhark's gradient of a + reduction or scan needs no primal value and its
//    compiler drops it: compare those with this row).
// 1b. along_axis0: the scans (+, *, min) and linear_recurrence along axis 0 of a (1000, 10000)
//    array (time-major, as RNN-like models run them): primal and gradient as in 1.
// 2. stencil_2d (4096 x 4096, the 5-point heat step) and stencil_3d (256^3, the 7-point one),
//    boundary zero, at 1 and 2 threads: the forward stencil, the library's adjoint (partials from
//    dual numbers stored, then the GATHER with the mirrored stencil, ops/stencil.hpp) and two
//    baselines written here: the same adjoint as a SCATTER (xbar[p + o_k] += ybar[p] d_k f(p),
//    partials recomputed inline) with atomic adds (std::atomic_ref), and as a scatter into one
//    private copy of xbar per thread, summed after; and gather_recompute, the adjoint of
//    policy::recompute (the partials evaluated in the gather, nothing stored). paired_ratio: the
//    variant's time over the gather's in the same repetition (median); for the scaling rows,
//    the 1-thread time over the 2-thread time in the same repetition (both thread counts run
//    interleaved in one loop).
// 3. conv2d: the library's two CPU algorithms, direct loops (ops/conv2d.hpp) and im2col + gemm
//    (ops/conv2d_gemm.hpp, the BLAS), forward + all three gradients, at a deep-learning shape
//    (N 8, C = O = 32, 64 x 64, 3 x 3, padding 1), the deblurring example's (N 1, C = O = 1,
//    512 x 512, 7 x 7, padding 3) and four around conv2d_algorithm::automatic's threshold.
//    paired_ratio: im2col_gemm over direct; target: what automatic picks for the shape.
// Every section interleaves its variants (each repetition runs all of them, in a rotating order)
// and reports medians.
// Output: CSV benchmark,variant,size,threads,median_ms,paired_ratio,target,met on stdout
// (bench/run writes bench/results/primitives.csv).
// Options: --quick (10^6 elements, 1024^2 / 64^3, 3 repetitions), --threads N (the primitives'
// and conv2d's thread count; default all), --reps N (default 11), --stencil-reps N (default 5:
// one repetition of the four stencil variants takes seconds).
#include <dualcast/autodiff.hpp>

#include "common.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>
#if defined(_OPENMP)
#include <omp.h>
#endif

namespace dc = dualcast;
using F32 = dc::tensor<float>;
using V32 = dc::var<float>;

namespace {

F32 random_tensor(dc::shape const &s, unsigned seed, float lo, float hi) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  F32 t = F32::empty(s);
  for (dc::index_t i = 0; i < t.size(); ++i)
    t.mutable_data()[i] = u(g);
  return t;
}

using bench::interleaved;
using bench::median;
using bench::ms_since;
using bench::paired_ratio;

// ---- 1. gradient / primal ------------------------------------------------------------------

struct primitive {
  char const *name;
  double futhark; // published gradient / primal ratio (A100, float32, 10^7)
  std::function<V32(V32 const &)> op;
};

void grad_over_primal(dc::index_t n, int threads, int reps) {
  F32 const x = random_tensor({n}, 1, 0.5f, 1.5f);
  F32 const xp = random_tensor({n}, 2, 0.99999f, 1.00001f); // products stay finite
  dc::index_t const bins = 1000;
  std::vector<dc::index_t> idx(static_cast<std::size_t>(n));
  std::mt19937 g(3);
  for (auto &k : idx)
    k = std::uniform_int_distribution<dc::index_t>(0, bins - 1)(g);
  F32 const seed_n = random_tensor({n}, 4, -1.f, 1.f), seed_bins = random_tensor({bins}, 5, -1, 1);
  std::vector<primitive> const prims = {
      {"reduce_plus", 1.0, [](V32 const &v) { return dc::sum(v); }},
      {"reduce_times", 2.4, [](V32 const &v) { return dc::prod(v); }},
      {"reduce_min", 2.5, [](V32 const &v) { return dc::min(v); }},
      {"scan_plus", 1.2, [](V32 const &v) { return dc::cumsum(v); }},
      {"scan_times", 3.3, [](V32 const &v) { return dc::cumprod(v); }},
      {"scan_min", 1.3, [](V32 const &v) { return dc::cummin(v); }},
      {"histogram_plus", 1.9,
       [&idx](V32 const &v) { return dc::reduce_by_index(v, idx, bins, dc::bin_op::plus); }},
  };
  for (auto const &p : prims) {
    F32 const &in = std::string(p.name).find("times") != std::string::npos ? xp : x;
    auto primal = [&] {
      dc::tape tp;
      tp.ex.threads = threads;
      auto y = p.op(tp.constant(in));
      (void)y;
    };
    std::vector<double> backward; // the backward pass of each gradient run (warm-up first)
    auto gradient = [&] {
      dc::tape tp;
      tp.ex.threads = threads;
      auto v = tp.variable(in);
      auto y = p.op(v);
      auto const t0 = std::chrono::steady_clock::now();
      if (y.size() == 1)
        tp.backward(y);
      else
        tp.backward(std::vector<V32>{y}, std::vector<F32>{y.size() == bins ? seed_bins : seed_n});
      backward.push_back(ms_since(t0));
    };
    auto t = interleaved({primal, gradient}, reps);
    backward.erase(backward.begin()); // the warm-up's
    double const ratio = paired_ratio(t[1], t[0]), bratio = paired_ratio(backward, t[0]);
    std::printf("grad_over_primal,%s,%lld,%d,%.3f,%.2f,<= %.1f,%s\n", p.name,
                static_cast<long long>(n), threads, median(t[1]), ratio, p.futhark,
                ratio <= p.futhark ? "yes" : "no");
    std::printf("backward_over_primal,%s,%lld,%d,%.3f,%.2f,,\n", p.name, static_cast<long long>(n),
                threads, median(backward), bratio);
    std::printf("primal,%s,%lld,%d,%.3f,,,\n", p.name, static_cast<long long>(n), threads,
                median(t[0]));
    std::fflush(stdout);
  }
}

// ---- 1b. scans along an outer axis ----------------------------------------------------------
// The scans and linear_recurrence along axis 0 of a (steps, columns) array (time-major, as
// RNN-like models run them): rows side by side in memory, which walk in vector lanes
// (lane_scan.hpp: by_columns). Rows along_axis0: primal and gradient as in 1.
void along_outer_axis(dc::index_t steps, dc::index_t columns, int threads, int reps) {
  F32 const x = random_tensor({steps, columns}, 11, 0.5f, 1.5f);
  F32 const xp = random_tensor({steps, columns}, 12, 0.999f, 1.001f); // products stay finite
  F32 const seed = random_tensor({steps, columns}, 13, -1.f, 1.f);
  std::vector<primitive> const prims = {
      {"scan_plus", 0, [](V32 const &v) { return dc::cumsum(v, 0); }},
      {"scan_times", 0, [](V32 const &v) { return dc::cumprod(v, 0); }},
      {"scan_min", 0, [](V32 const &v) { return dc::cummin(v, 0); }},
      {"linear_recurrence", 0, [](V32 const &v) { return dc::linear_recurrence(v, v, 0); }},
  };
  char size[64];
  std::snprintf(size, sizeof size, "%lldx%lld", static_cast<long long>(steps),
                static_cast<long long>(columns));
  for (auto const &p : prims) {
    F32 const &in = std::string(p.name).find("times") != std::string::npos ? xp : x;
    auto primal = [&] {
      dc::tape tp;
      tp.ex.threads = threads;
      (void)p.op(tp.constant(in));
    };
    auto gradient = [&] {
      dc::tape tp;
      tp.ex.threads = threads;
      auto v = tp.variable(in);
      tp.backward(std::vector<V32>{p.op(v)}, std::vector<F32>{seed});
    };
    auto t = interleaved({primal, gradient}, reps);
    std::printf("along_axis0_primal,%s,%s,%d,%.3f,,,\n", p.name, size, threads, median(t[0]));
    std::printf("along_axis0_gradient,%s,%s,%d,%.3f,%.2f,,\n", p.name, size, threads, median(t[1]),
                paired_ratio(t[1], t[0]));
    std::fflush(stdout);
  }
}

// ---- 2. stencil adjoints: gather against two scatters ----------------------------------------

struct heat2 {
  template <class A> A operator()(A c, A n, A s, A w, A e) const {
    return c + 0.2f * (n + s + w + e - 4.0f * c);
  }
};
struct heat3 {
  template <class A> A operator()(A c, A a, A b, A d, A e, A f, A g) const {
    return c + 0.1f * (a + b + d + e + f + g - 6.0f * c);
  }
};

// Inlined, as the library's passes inline it (ops/stencil.hpp): the scatters compared with the
// gather evaluate f the same way.
template <int K, class F, std::size_t... I>
[[gnu::always_inline]] inline dc::dual<float, K> call_dual(F const &f, dc::dual<float, K> const *v,
                                                           std::index_sequence<I...>) {
  return dc::dual<float, K>(f(v[I]...));
}

// The adjoint as plain reverse mode writes it: for every point p, xbar[p + o_k] += ybar[p] d_k f.
// atomic: one shared xbar, atomic adds; else one private xbar per thread, summed after. Interior
// points find their neighbours by flat offsets, as the gather's passes do (ops/stencil.hpp).
template <int K, class F>
void scatter_adjoint(dc::detail::stencil_geometry<K> const &geo, F const &f, float const *x,
                     float const *gy, float *gx, int threads, bool atomic,
                     std::vector<std::vector<float>> &copies) {
  dc::index_t const rows = geo.ext[0] * geo.ext[1], len = geo.ext[2], n = rows * len;
  if (atomic || threads == 1)
    std::memset(gx, 0, std::size_t(n) * sizeof(float));
  else
    copies.resize(std::size_t(threads));
#pragma omp parallel num_threads(threads)
  {
#if defined(_OPENMP)
    int const me = omp_get_thread_num();
#else
    int const me = 0;
#endif
    float *out = gx;
    if (!atomic && threads > 1) {
      auto &c = copies[std::size_t(me)];
      c.assign(std::size_t(n), 0.0f); // zeroed by its own thread (first touch)
      out = c.data();
    }
#pragma omp for schedule(static)
    for (dc::index_t r = 0; r < rows; ++r) {
      dc::index_t const p0 = r / geo.ext[1], p1 = r % geo.ext[1];
      dc::index_t a, b; // the row's interior: the same flat offsets as the gather's passes use
      geo.row_interior(p0, p1, geo.in_lo, geo.in_hi, a, b);
      for (dc::index_t p2 = 0; p2 < len; ++p2) {
        float const ybar = gy[r * len + p2];
        dc::dual<float, K> v[K];
        dc::index_t q[K];
        bool const inside = p2 >= a && p2 < b;
        for (int k = 0; k < K; ++k) {
          q[k] = inside ? r * len + p2 + geo.flat[k] : geo.neighbour(p0, p1, p2, k);
          v[k] = q[k] < 0 ? dc::dual<float, K>(0.0f) : dc::dual<float, K>::variable(x[q[k]], k);
        }
        auto const res = call_dual<K>(f, v, std::make_index_sequence<std::size_t(K)>{});
        for (int k = 0; k < K; ++k)
          if (q[k] >= 0) {
            if (atomic)
              std::atomic_ref<float>(out[q[k]]).fetch_add(ybar * res.d[k],
                                                          std::memory_order_relaxed);
            else
              out[q[k]] += ybar * res.d[k];
          }
      }
    }
    if (!atomic && threads > 1) { // sum the copies, each thread its own range of xbar
#pragma omp for schedule(static)
      for (dc::index_t i = 0; i < n; ++i) {
        float s = 0;
        for (auto const &c : copies)
          s += c[std::size_t(i)];
        gx[i] = s;
      }
    }
  }
}

template <int D, int K, class F>
void stencil_adjoints(char const *bench, dc::shape const &s, dc::stencil_offsets<D, K> const &offs,
                      F const &f, int reps) {
  auto const geo = dc::detail::make_stencil_geometry(s, offs, dc::boundary::zero);
  F32 const x = random_tensor(s, 7, -1.f, 1.f), gy = random_tensor(s, 8, -1.f, 1.f);
  dc::index_t const rows = geo.ext[0] * geo.ext[1];
  F32 gx_scatter = F32::empty(s);
  std::vector<std::vector<float>> copies;
  char size[64]; // (snprintf: g++ 12 -O3 warns falsely about std::string concatenation here)
  if (s.rank == 2)
    std::snprintf(size, sizeof size, "%lldx%lld", static_cast<long long>(s.ext[0]),
                  static_cast<long long>(s.ext[1]));
  else
    std::snprintf(size, sizeof size, "%lldx%lldx%lld", static_cast<long long>(s.ext[0]),
                  static_cast<long long>(s.ext[1]), static_cast<long long>(s.ext[2]));
  char const *names[] = {"forward", "gather", "scatter_atomic", "scatter_copies",
                         "gather_recompute"};
  // Every variant at 1 and at 2 threads in one interleaved loop (variant k at t threads is
  // number (t - 1) * 5 + k), so that the 1 -> 2 thread scaling is a paired ratio within each
  // repetition: run in separate loops, the forward's scaling moved between 1.86 and 2.15 from run
  // to run with the machine's drift.
  dc::cpu ex[3];
  ex[1].threads = 1, ex[2].threads = 2;
  std::vector<std::function<void()>> v;
  for (int threads : {1, 2}) {
    dc::cpu const *e = &ex[threads];
    v.push_back([&, e] { (void)dc::detail::stencil_run(*e, x, geo, f); });
    v.push_back([&, e] { // what the tape's backward runs (ops/stencil.hpp)
      auto c = F32::empty({x.size() * K});
      dc::detail::parallel_for_rows(
          *e, rows, geo.ext[2] * K * 4,
          dc::detail::stencil_partials<float, K, F>{x.data(), gy.data(), c.raw_data(), geo, f});
      auto gx = F32::empty(s);
      dc::detail::parallel_for_rows(
          *e, rows, geo.ext[2] * K,
          dc::detail::stencil_gather<float, K>{c.data(), gx.raw_data(), geo});
    });
    v.push_back([&, threads] {
      scatter_adjoint(geo, f, x.data(), gy.data(), gx_scatter.raw_data(), threads, true, copies);
    });
    v.push_back([&, threads] {
      scatter_adjoint(geo, f, x.data(), gy.data(), gx_scatter.raw_data(), threads, false, copies);
    });
    v.push_back(
        [&, e] { // policy::recompute's backward: one pass, the partials evaluated in the gather
          auto gx = F32::empty(s);
          dc::detail::parallel_for_rows(*e, rows, geo.ext[2] * K * K * 4,
                                        dc::detail::stencil_gather_recompute<float, K, F>{
                                            x.data(), gy.data(), gx.raw_data(), geo, f});
        });
  }
  auto const all = interleaved(v, reps);
  copies.clear();
  copies.shrink_to_fit();
  auto times = [&](int threads, std::size_t k) { return all[std::size_t(threads - 1) * 5 + k]; };
  for (int threads : {1, 2})
    for (std::size_t k = 0; k < 5; ++k) {
      double const ratio = paired_ratio(times(threads, k), times(threads, 1));
      bool const atomic_row = k == 2 && threads == 2;
      std::printf("%s,%s,%s,%d,%.3f,%.2f,%s,%s\n", bench, names[k], size, threads,
                  median(times(threads, k)), ratio, atomic_row ? ">= 2 (vs gather)" : "",
                  atomic_row ? (ratio >= 2 ? "yes" : "no") : "");
    }
  // 1 -> 2 thread scaling: each repetition's 1-thread time over its 2-thread time, the median.
  auto scaling = [&](std::size_t k) { return paired_ratio(times(1, k), times(2, k)); };
  double const fwd = scaling(0), gat = scaling(1);
  std::printf("%s,scaling_forward,%s,1->2,,%.2f,,\n", bench, size, fwd);
  std::printf("%s,scaling_gather,%s,1->2,,%.2f,>= forward's (%.2f),%s\n", bench, size, gat, fwd,
              gat >= 0.95 * fwd ? "yes" : "no");
  for (std::size_t k = 2; k < 5; ++k)
    std::printf("%s,scaling_%s,%s,1->2,,%.2f,,\n", bench, names[k], size, scaling(k));
  std::fflush(stdout);
}

// ---- 3. conv2d: the library's direct loops against its im2col + gemm ------------------------

// Forward and every gradient by one algorithm; returns a checksum of the results.
double conv_run(dc::cpu const &ex, dc::detail::conv2d_geometry const &g, F32 const &x, F32 const &w,
                F32 const &b, F32 const &gy) {
  auto y = dc::detail::conv2d_run(ex, x, w, b, g);
  auto d = dc::detail::conv2d_adjoints(ex, x, w, gy, g, true, true, true);
  return double(y.data()[7]) + double(d.input.data()[5]) + double(d.weights.data()[3]) +
         double(d.bias.data()[0]);
}

void conv2d_variants(dc::shape const &xs, dc::shape const &ws, dc::conv2d_options opt, int threads,
                     int reps) {
  auto g = dc::detail::make_conv2d_geometry(xs, ws, opt);
  bool const automatic_gemm = dc::detail::conv2d_uses_gemm<float>(g);
  F32 const x = random_tensor(xs, 11, -1, 1), w = random_tensor(ws, 12, -0.2f, 0.2f),
            b = random_tensor({g.O}, 13, -1, 1),
            gy = random_tensor({g.N, g.O, g.OH, g.OW}, 14, -1, 1);
  dc::cpu ex;
  ex.threads = threads;
  auto direct = g, gemm = g;
  direct.algorithm = dc::conv2d_algorithm::direct;
  gemm.algorithm = dc::conv2d_algorithm::im2col_gemm;
  double sums[2] = {};
  auto t = interleaved({[&] { sums[0] = conv_run(ex, direct, x, w, b, gy); },
                        [&] { sums[1] = conv_run(ex, gemm, x, w, b, gy); }},
                       reps);
  if (std::abs(sums[0] - sums[1]) > 1e-2 * (1 + std::abs(sums[0])))
    std::fprintf(stderr, "conv2d: im2col + gemm disagrees with the direct loops (%g vs %g)\n",
                 sums[1], sums[0]);
  char size[96];
  std::snprintf(size, sizeof size, "N%lld C%lld O%lld %lldx%lld k%lld pad%lld%s",
                static_cast<long long>(g.N), static_cast<long long>(g.C),
                static_cast<long long>(g.O), static_cast<long long>(g.H),
                static_cast<long long>(g.W), static_cast<long long>(g.KH),
                static_cast<long long>(g.pad), g.s == 2 ? " stride2" : "");
  char const *choice = automatic_gemm ? "im2col_gemm" : "direct";
  std::printf("conv2d_fwd_bwd,direct,%s,%d,%.3f,1,%s,\n", size, threads, median(t[0]), choice);
  std::printf("conv2d_fwd_bwd,im2col_gemm,%s,%d,%.3f,%.2f,%s,\n", size, threads, median(t[1]),
              paired_ratio(t[1], t[0]), choice);
  std::fflush(stdout);
}

} // namespace

int main(int argc, char **argv) {
  bool quick = false;
  int threads = 0, reps = 11, stencil_reps = 5;
  std::string only; // --only primitives | stencil | conv2d: one part
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick"))
      quick = true, reps = 3, stencil_reps = 3;
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--stencil-reps") && i + 1 < argc)
      stencil_reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
  }
  auto part = [&](char const *name) { return only.empty() || only == name; };
#if defined(_OPENMP)
  if (threads > 0)
    omp_set_num_threads(threads);
  threads = omp_get_max_threads();
#else
  threads = 1;
#endif
  if (openblas_set_num_threads)
    openblas_set_num_threads(threads);
  std::printf("benchmark,variant,size,threads,median_ms,paired_ratio,target,met\n");
  if (part("primitives")) {
    grad_over_primal(quick ? 1000000 : 10000000, threads, reps);
    along_outer_axis(1000, quick ? 1000 : 10000, threads, reps);
  }
  constexpr auto five = dc::offsets({0, 0}, {-1, 0}, {1, 0}, {0, -1}, {0, 1});
  constexpr auto seven =
      dc::offsets({0, 0, 0}, {-1, 0, 0}, {1, 0, 0}, {0, -1, 0}, {0, 1, 0}, {0, 0, -1}, {0, 0, 1});
  dc::index_t const s2 = quick ? 1024 : 4096, s3 = quick ? 64 : 256;
  if (part("stencil")) {
    stencil_adjoints("stencil_2d", {s2, s2}, five, heat2{}, stencil_reps);
    stencil_adjoints("stencil_3d", {s3, s3, s3}, seven, heat3{}, stencil_reps);
  }
  if (part("conv2d")) {
    conv2d_variants({8, 32, 64, 64}, {32, 32, 3, 3}, {1, 1}, threads, reps);
    conv2d_variants({1, 1, 512, 512}, {1, 1, 7, 7}, {1, 3}, threads, reps);
    // around automatic's threshold (ops/conv2d_gemm.hpp: O >= 8 and C KH KW >= 8)
    conv2d_variants({8, 1, 64, 64}, {8, 1, 3, 3}, {1, 1}, threads, reps);
    conv2d_variants({8, 8, 64, 64}, {8, 8, 3, 3}, {1, 1}, threads, reps);
    conv2d_variants({8, 16, 64, 64}, {4, 16, 3, 3}, {1, 1}, threads, reps);
    conv2d_variants({8, 3, 64, 64}, {16, 3, 5, 5}, {2, 2}, threads, reps);
  }
  return 0;
}

// bench/gpu_primitives.cu: the parallel primitives' adjoints on a GPU (issue 13), float32, 10^7
// elements in one row: gradient time / primal time beside Futhark's published ratios, which were
// measured on a GPU (A100; ../shared/notes/parallel-adjoints.md) -- the like-for-like comparison
// the CPU benchmark (bench/primitives.cpp) can only approximate.
//
//   primal    the tape operation on a constant (no node, nothing saved)
//   gradient  the same on a variable, then backward (seed 1 for a scalar, a fixed random
//             cotangent otherwise): what a user's gradient costs
// Each is timed with CUDA events around the whole call (the tape's allocations from the
// stream-ordered pool and any host work included), interleaved, medians. gb_per_s: the bytes the
// primal must read and write (4 per element read, 4 per element written for a scan) over its
// time, beside the device copy's bandwidth in the same run.
// Also the `plus` histogram with its indices already in device memory (int64, int32) against a
// device copy moving its 12 bytes per row (issue 40's target: within 2x), and against the host
// vector (copied every call).
// Also the stencils (2-D 4096^2, 3-D 256^3; the adjoint a gather) and conv2d (8 x 32 x 64 x 64,
// 3 x 3 x 32 x 32): gradient / primal, no published figure beside them (size: elements).
// Output: CSV benchmark,variant,size,median_ms,paired_ratio,target,met,gb_per_s
// Also the own passes against CUB's device-wide primitives (own_vs_cub below).
//   gpu_primitives [--reps N] [--quick]
#include <dualcast/autodiff.hpp>
#include <dualcast/cuda.cuh>

#include "common.hpp"
#include "cuda_timing.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace dc = dualcast;
using F32 = dc::tensor<float>;
using V32 = dc::var<float>;

namespace {

void check(cudaError_t e, char const *what) { bench::cuda_check("gpu_primitives", e, what); }

F32 random_tensor(dc::index_t n, unsigned seed, float lo, float hi) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> h(static_cast<std::size_t>(n));
  for (auto &v : h)
    v = u(g);
  return F32::from({n}, h).to(dc::device::cuda(0));
}

using bench::median;
using bench::paired_ratio;

// Runs each variant `reps` times interleaved (rotating order) after a warm-up each, timed by CUDA
// events on the default stream (the tape's stream here). Returns every variant's times in ms.
std::vector<std::vector<double>> interleaved(std::vector<std::function<void()>> const &fs,
                                             int reps) {
  bench::event_timer const events("gpu_primitives");
  for (auto const &f : fs)
    f();
  check(cudaDeviceSynchronize(), "warm-up");
  return bench::interleaved(
      int(fs.size()), reps, [&](int v) { fs[std::size_t(v)](); }, std::cref(events));
}

// The stencils of bench/primitives.cpp, for the GPU (DUALCAST_HD: nvcc cannot run generic host
// lambdas on the device).
struct heat2 {
  template <class A> DUALCAST_HD A operator()(A c, A n, A s, A w, A e) const {
    return c + 0.2f * (n + s + w + e - 4.0f * c);
  }
};
struct heat3 {
  template <class A> DUALCAST_HD A operator()(A c, A a, A b, A d, A e, A f, A g) const {
    return c + 0.1f * (a + b + d + e + f + g - 6.0f * c);
  }
};

// A user operator: log(exp(a) + exp(b)) (associative; its adjoint through both-side scans).
struct log_add_exp {
  template <class A> DUALCAST_HD A operator()(A a, A b) const {
    return dc::log(dc::exp(a) + dc::exp(b));
  }
};

struct primitive {
  char const *name;
  double futhark;       // published gradient / primal ratio (A100, float32, 10^7)
  double bytes_per_elt; // what the primal must move per element
  std::function<V32(V32 const &)> op;
};

void report(primitive const &p, dc::index_t n, std::vector<std::vector<double>> const &t);

void grad_over_primal(dc::index_t n, int reps) {
  F32 const x = random_tensor(n, 1, 0.5f, 1.5f);
  F32 const xp = random_tensor(n, 2, 0.99999f, 1.00001f); // products stay finite
  F32 const a = random_tensor(n, 6, -0.9f, 0.9f);         // the recurrence's coefficients
  dc::index_t const bins = 1000;
  std::vector<dc::index_t> idx(static_cast<std::size_t>(n));
  std::mt19937 g(3);
  for (auto &k : idx)
    k = std::uniform_int_distribution<dc::index_t>(0, bins - 1)(g);
  auto const idx_dev = dc::tensor<std::int64_t>::from({n}, idx).to(dc::device::cuda(0));
  F32 const seed_n = random_tensor(n, 4, -1.f, 1.f), seed_bins = random_tensor(bins, 5, -1, 1);
  std::vector<primitive> const prims = {
      {"reduce_plus", 1.0, 4, [](V32 const &v) { return dc::sum(v); }},
      {"reduce_times", 2.4, 4, [](V32 const &v) { return dc::prod(v); }},
      {"reduce_min", 2.5, 4, [](V32 const &v) { return dc::min(v); }},
      {"reduce_user_logaddexp", 0, 4,
       [](V32 const &v) { return dc::reduce(v, log_add_exp{}, -INFINITY); }},
      {"scan_plus", 1.2, 8, [](V32 const &v) { return dc::cumsum(v); }},
      {"scan_times", 3.3, 8, [](V32 const &v) { return dc::cumprod(v); }},
      {"scan_min", 1.3, 8, [](V32 const &v) { return dc::cummin(v); }},
      {"scan_linear", 3.3, 12,
       [&a](V32 const &v) { return dc::linear_recurrence(v.owner()->constant(a), v, 0); }},
      {"histogram_plus", 1.9, 12,
       [&idx](V32 const &v) { return dc::reduce_by_index(v, idx, bins, dc::bin_op::plus); }},
      // the same indices in device memory (int64: read in place), uploaded once beforehand
      {"histogram_plus_device_idx", 1.9, 12,
       [&idx_dev](V32 const &v) {
         return dc::reduce_by_index(v, idx_dev, bins, dc::bin_op::plus);
       }},
  };
  for (auto const &p : prims) {
    F32 const &in = std::string(p.name).find("times") != std::string::npos ? xp : x;
    auto primal = [&] {
      dc::tape tp;
      auto y = p.op(tp.constant(in));
      (void)y;
    };
    auto gradient = [&] {
      dc::tape tp;
      auto v = tp.variable(in);
      auto y = p.op(v);
      if (y.size() == 1)
        tp.backward(y);
      else
        tp.backward(std::vector<V32>{y}, std::vector<F32>{y.size() == bins ? seed_bins : seed_n});
    };
    auto t = interleaved({primal, gradient}, reps);
    report(p, n, t);
  }
}

void report(primitive const &p, dc::index_t n, std::vector<std::vector<double>> const &t) {
  double const ratio = paired_ratio(t[1], t[0]);
  double const gbs = p.bytes_per_elt * double(n) / (median(t[0]) * 1e6);
  if (p.bytes_per_elt > 0)
    std::printf("primal,%s,%lld,%.4f,,,,%.0f\n", p.name, static_cast<long long>(n), median(t[0]),
                gbs);
  else // (compute-bound: no byte count)
    std::printf("primal,%s,%lld,%.4f,,,,\n", p.name, static_cast<long long>(n), median(t[0]));
  if (p.futhark > 0)
    std::printf("grad_over_primal,%s,%lld,%.4f,%.2f,<= %.1f,%s,\n", p.name,
                static_cast<long long>(n), median(t[1]), ratio, p.futhark,
                ratio <= p.futhark ? "yes" : "no");
  else
    std::printf("grad_over_primal,%s,%lld,%.4f,%.2f,,,\n", p.name, static_cast<long long>(n),
                median(t[1]), ratio);
  std::fflush(stdout);
}

// Stencils (the heat steps of bench/primitives.cpp, 4096 x 4096 and 256^3, boundary zero: the
// adjoint a gather with the mirrored stencil) and conv2d (N 8, C = O = 32, 64 x 64, 3 x 3,
// padding 1), gradient / primal; no published figure to compare with.
void stencils_and_conv(int reps, bool quick) {
  static constexpr auto five = dc::offsets({0, 0}, {-1, 0}, {1, 0}, {0, -1}, {0, 1});
  static constexpr auto seven =
      dc::offsets({0, 0, 0}, {-1, 0, 0}, {1, 0, 0}, {0, -1, 0}, {0, 1, 0}, {0, 0, -1}, {0, 0, 1});
  dc::index_t const s2 = quick ? 1024 : 4096, s3 = quick ? 64 : 256;
  dc::index_t const cn = quick ? 2 : 8, cc = 32, hw = 64;
  F32 const x2 = random_tensor(s2 * s2, 11, -1, 1).reshape({s2, s2});
  F32 const x3 = random_tensor(s3 * s3 * s3, 12, -1, 1).reshape({s3, s3, s3});
  F32 const img = random_tensor(cn * cc * hw * hw, 13, -1, 1).reshape({cn, cc, hw, hw});
  F32 const w = random_tensor(cc * cc * 9, 14, -0.1f, 0.1f).reshape({cc, cc, 3, 3});
  F32 const seed2 = random_tensor(s2 * s2, 15, -1, 1).reshape({s2, s2});
  F32 const seed3 = random_tensor(s3 * s3 * s3, 16, -1, 1).reshape({s3, s3, s3});
  F32 const seedc = random_tensor(cn * cc * hw * hw, 17, -1, 1).reshape({cn, cc, hw, hw});
  struct cas {
    primitive p;
    F32 const *in, *seed;
    dc::index_t n;
  };
  std::vector<cas> const cases = {
      {{"stencil_2d", 0, 8,
        [](V32 const &v) { return dc::stencil(v, five, heat2{}, dc::boundary::zero); }},
       &x2,
       &seed2,
       s2 * s2},
      {{"stencil_3d", 0, 8,
        [](V32 const &v) { return dc::stencil(v, seven, heat3{}, dc::boundary::zero); }},
       &x3,
       &seed3,
       s3 * s3 * s3},
      {{"conv2d", 0, 0,
        [&w](V32 const &v) { return dc::conv2d(v, v.owner()->variable(w), {.padding = 1}); }},
       &img,
       &seedc,
       cn * cc * hw * hw},
  };
  for (auto const &c : cases) {
    auto primal = [&] {
      dc::tape tp;
      auto y = c.p.op(tp.constant(*c.in));
      (void)y;
    };
    auto gradient = [&] {
      dc::tape tp;
      auto v = tp.variable(*c.in);
      auto y = c.p.op(v);
      tp.backward(std::vector<V32>{y}, std::vector<F32>{*c.seed});
    };
    report(c.p, c.n, interleaved({primal, gradient}, reps));
  }
}

// Issue 40: the backend's own passes against CUB's device-wide primitives
// (backend/cuda/device_primitives.cuh), float32, n elements, interleaved on one stream. Rows:
// own_vs_cub,<primitive>_<own|cub>,n,median_ms,paired_ratio (cub / own on the cub row),,,gb_per_s
//   reduce            the broadcast reduction to one number (cuda_primitives::reduce)
//   segmented_reduce  rows of 1000 summed, (n/1000, 1000) -> (n/1000, 1)
//                     (cuda_primitives::segmented_reduce)
//   scan              dualcast::cumsum on a tensor, cuda_primitives::scan own / cub
//                     (cub::DeviceScan; not run-to-run deterministic in floating point)
//   scan_grad         cumsum on a tape variable, forward + backward (the reverse scan), own / cub
//   histogram_plus    1000 bins: dualcast::reduce_by_index on a tensor with host indices (own:
//                     the privatized pass, the indices copied per call) / cub_histogram_plus,
//                     indices copied from the host per call too (cub) and already on the device
//                     (cub_device_idx)
//   sorted_histogram_plus / _max  100000 bins (more than the privatized pass serves), int64
//                     indices on the device: reduce_by_index with cuda_primitives::
//                     sorted_histogram own (the rows sorted on the host: the indices copied there
//                     and the order back) / cub (radix sort on the device; plus: then a segmented
//                     sum, max: the own per-bin pass over the sorted rows)
void own_vs_cub(dc::index_t n, int reps) {
  namespace cb = dc::detail::cuda_backend;
  F32 const x = random_tensor(n, 21, -1, 1);
  dc::index_t const bins = 1000, cols = 1000, rows = n / cols;
  std::vector<dc::index_t> idx(static_cast<std::size_t>(n));
  std::mt19937 g(22);
  for (auto &k : idx)
    k = std::uniform_int_distribution<dc::index_t>(0, bins - 1)(g);
  dc::index_t *idx_d = nullptr;
  check(cudaMalloc(&idx_d, idx.size() * sizeof(dc::index_t)), "malloc");
  auto upload = [&] {
    check(cudaMemcpy(idx_d, idx.data(), idx.size() * sizeof(dc::index_t), cudaMemcpyHostToDevice),
          "copy");
  };
  upload();
  F32 const out1 = F32::zeros({1}, dc::device::cuda(0));
  F32 const out_rows = F32::zeros({rows, 1}, dc::device::cuda(0));
  F32 const out_bins = F32::zeros({bins}, dc::device::cuda(0));
  auto reduce_with = [&](dc::cuda_impl impl, F32 const &dst, dc::shape const &s) {
    dc::cuda ex;
    ex.operands_on_device = true;
    ex.primitives = {impl, impl, impl, impl};
    cb::reduce_broadcast(ex, s, x.data(), dc::view<float>(dst.mutable_data(), dst.dims()), false);
  };
  auto row = [&](char const *name, std::vector<std::function<void()>> const &fs,
                 std::vector<char const *> const &variants, double bytes) {
    auto t = interleaved(fs, reps);
    for (std::size_t v = 0; v < fs.size(); ++v) {
      double const ms = median(t[v]);
      if (v == 0)
        std::printf("own_vs_cub,%s_%s,%lld,%.4f,,,,%.0f\n", name, variants[v],
                    static_cast<long long>(n), ms, bytes / (ms * 1e6));
      else
        std::printf("own_vs_cub,%s_%s,%lld,%.4f,%.3f,,,%.0f\n", name, variants[v],
                    static_cast<long long>(n), ms, paired_ratio(t[v], t[0]), bytes / (ms * 1e6));
    }
    std::fflush(stdout);
  };
  double const nb = 4.0 * double(n);
  row("reduce",
      {[&] { reduce_with(dc::cuda_impl::own, out1, dc::shape{n}); },
       [&] { reduce_with(dc::cuda_impl::cub, out1, dc::shape{n}); }},
      {"own", "cub"}, nb);
  row("segmented_reduce",
      {[&] {
         reduce_with(dc::cuda_impl::own, out_rows, dc::shape{rows, cols});
       },
       [&] {
         reduce_with(dc::cuda_impl::cub, out_rows, dc::shape{rows, cols});
       }},
      {"own", "cub"}, nb);
  // f with the default scan / sorted histogram implementation set to impl (the tape's and the
  // tensor operations' executors take the default), restored afterwards.
  auto with = [](dc::cuda_impl impl, auto const &f) {
    return [impl, f] {
      dc::cuda_primitives const saved = dc::default_cuda_primitives();
      dc::cuda_primitives p = saved;
      p.scan = p.sorted_histogram = impl;
      dc::set_default_cuda_primitives(p);
      f();
      dc::set_default_cuda_primitives(saved);
    };
  };
  auto const own = dc::cuda_impl::own, cub = dc::cuda_impl::cub;
  auto scan = [&] { (void)dc::cumsum(x); };
  row("scan", {with(own, scan), with(cub, scan)}, {"own", "cub"}, 2 * nb);
  auto scan_grad = [&] {
    dc::tape tp;
    auto v = tp.variable(x);
    tp.backward(std::vector<V32>{dc::cumsum(v)}, std::vector<F32>{x});
  };
  row("scan_grad", {with(own, scan_grad), with(cub, scan_grad)}, {"own", "cub"}, 4 * nb);
  row("histogram_plus",
      {[&] { (void)dc::reduce_by_index(x, idx, bins, dc::bin_op::plus); },
       [&] {
         upload();
         cb::cub_histogram_plus(dc::cuda{}, x.data(), idx_d, n, bins, out_bins.mutable_data());
       },
       [&] {
         cb::cub_histogram_plus(dc::cuda{}, x.data(), idx_d, n, bins, out_bins.mutable_data());
       }},
      {"own", "cub", "cub_device_idx"}, nb + 8.0 * double(n));
  dc::index_t const many = 100000;
  std::vector<dc::index_t> idx_many(static_cast<std::size_t>(n));
  for (auto &k : idx_many)
    k = std::uniform_int_distribution<dc::index_t>(0, many - 1)(g);
  auto const many_d = dc::tensor<std::int64_t>::from({n}, idx_many).to(dc::device::cuda(0));
  auto sorted = [&](dc::bin_op op) {
    return [&x, &many_d, many, op] { (void)dc::reduce_by_index(x, many_d, many, op); };
  };
  row("sorted_histogram_plus",
      {with(own, sorted(dc::bin_op::plus)), with(cub, sorted(dc::bin_op::plus))}, {"own", "cub"},
      nb + 8.0 * double(n));
  row("sorted_histogram_max",
      {with(own, sorted(dc::bin_op::max)), with(cub, sorted(dc::bin_op::max))}, {"own", "cub"},
      nb + 8.0 * double(n));
  cudaFree(idx_d);
}

// The device copy's bandwidth (bytes read + written over the time), the reference for gb_per_s.
void copy_bandwidth(dc::index_t n, int reps) {
  float *src = nullptr, *dst = nullptr;
  check(cudaMalloc(&src, std::size_t(n) * 4), "malloc"),
      check(cudaMalloc(&dst, std::size_t(n) * 4), "malloc");
  check(cudaMemset(src, 0, std::size_t(n) * 4), "memset");
  auto t = interleaved(
      {[&] {
        check(cudaMemcpyAsync(dst, src, std::size_t(n) * 4, cudaMemcpyDeviceToDevice), "copy");
      }},
      reps);
  cudaFree(src), cudaFree(dst);
  double const ms = median(t[0]), gbs = 8.0 * double(n) / (ms * 1e6);
  std::printf("copy,device_to_device,%lld,%.4f,,,,%.0f\n", static_cast<long long>(n), ms, gbs);
}

// Issue 40's target: the `plus` histogram of n rows into 1000 bins with int64 indices already on
// the device within 2x of the time its bytes (4 per value + 8 per index read) take at the copy
// bandwidth -- a device-to-device copy moving as many bytes (6n read, 6n written), interleaved
// with it; beside it the int32 indices (widened on the device first) and the host vector.
void histogram_device_indices(dc::index_t n, int reps) {
  dc::index_t const bins = 1000;
  std::vector<dc::index_t> idx(static_cast<std::size_t>(n));
  std::mt19937 g(3);
  for (auto &k : idx)
    k = std::uniform_int_distribution<dc::index_t>(0, bins - 1)(g);
  std::vector<std::int32_t> const idx32(idx.begin(), idx.end());
  auto const d64 = dc::tensor<std::int64_t>::from({n}, idx).to(dc::device::cuda(0));
  auto const d32 = dc::tensor<std::int32_t>::from({n}, idx32).to(dc::device::cuda(0));
  F32 const x = random_tensor(n, 1, 0.5f, 1.5f);
  std::size_t const half = std::size_t(n) * 6; // bytes copied: 6n read + 6n written
  char *src = nullptr, *dst = nullptr;
  check(cudaMalloc(&src, half), "malloc"), check(cudaMalloc(&dst, half), "malloc");
  check(cudaMemset(src, 0, half), "memset");
  auto hist = [&](auto const &indices) {
    return [&x, &indices] { (void)dc::reduce_by_index(x, indices, bins, dc::bin_op::plus); };
  };
  auto t = interleaved(
      {[&] { check(cudaMemcpyAsync(dst, src, half, cudaMemcpyDeviceToDevice), "copy"); }, hist(d64),
       hist(d32), hist(idx)},
      reps);
  cudaFree(src), cudaFree(dst);
  char const *names[] = {"copy_12_bytes_per_row", "histogram_plus_device_int64",
                         "histogram_plus_device_int32", "histogram_plus_host_vector"};
  for (int v = 0; v < 4; ++v) {
    double const ratio = paired_ratio(t[std::size_t(v)], t[0]);
    std::printf("histogram_bytes_over_copy,%s,%lld,%.4f,%.2f,%s,%s,%.0f\n", names[v],
                static_cast<long long>(n), median(t[std::size_t(v)]), ratio, v == 1 ? "<= 2" : "",
                v == 1 ? (ratio <= 2 ? "yes" : "no") : "",
                12.0 * double(n) / (median(t[std::size_t(v)]) * 1e6));
  }
  std::fflush(stdout);
}

} // namespace

int main(int argc, char **argv) {
  int reps = 21;
  dc::index_t n = 10'000'000;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--quick"))
      n = 1'000'000, reps = 3;
    else {
      std::fprintf(stderr, "usage: gpu_primitives [--reps N] [--quick]\n");
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "gpu_primitives: no CUDA device\n");
    return 1;
  }
  std::printf("benchmark,variant,size,median_ms,paired_ratio,target,met,gb_per_s\n");
  copy_bandwidth(n, reps);
  own_vs_cub(n, reps); // (first: a few seconds, kept if the step's time limit cuts the rest)
  grad_over_primal(n, reps);
  histogram_device_indices(n, reps);
  stencils_and_conv(reps, n < 10'000'000);
}

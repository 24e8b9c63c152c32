// The backend-independent test bodies of tests/cases/, run on the CUDA backend. Compiled by nvcc
// into a small library that tests/test_gpu.cpp (host code, doctest) calls; those tests report
// "skipped" when no GPU exists. (The tape cases are in tape_cases_gpu.cu: a second translation
// unit, so that the two compile in parallel.)
#include <dualcast/cuda.cuh>

#include "../cases/kernel_law.hpp"
#include "../cases/lstm_case.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {
template <class T> struct device_memory {
  T *alloc(long n) {
    void *p = nullptr;
    dualcast::detail::cuda_backend::check(cudaMalloc(&p, std::size_t(n) * sizeof(T)), "cudaMalloc");
    return static_cast<T *>(p);
  }
  void upload(T *dst, std::vector<T> const &src) {
    dualcast::detail::cuda_backend::check(
        cudaMemcpy(dst, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  void download(std::vector<T> &dst, T const *src) {
    dualcast::detail::cuda_backend::check(
        cudaMemcpy(dst.data(), src, dst.size() * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  }
  void release(T *p) { (void)cudaFree(p); }
};
} // namespace

bool dualcast_gpu_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::string dualcast_gpu_lstm_case_float() {
  device_memory<float> mem;
  return dualcast_tests::check_lstm_case<float>(dualcast::cuda{}, mem, 67, 129);
}
std::string dualcast_gpu_lstm_case_double() {
  device_memory<double> mem;
  return dualcast_tests::check_lstm_case<double>(dualcast::cuda{}, mem, 300, 131);
}

// CPU == GPU (tests/cases/kernel_law.hpp): the CPU backend against CUDA on the same inputs, every
// fused-kernel mode, strided and broadcast layouts, divergent branches.
std::string dualcast_gpu_kernel_law_float() {
  device_memory<float> mem;
  return dualcast_tests::kernel_law<float>(dualcast::cuda{}, mem, false);
}
std::string dualcast_gpu_kernel_law_double() {
  device_memory<double> mem;
  return dualcast_tests::kernel_law<double>(dualcast::cuda{}, mem, false);
}

// 16-bit storage on the CUDA backend (issue 37): the LSTM cell's value_and_vjp over 16-bit gates
// beside a float cell state, its values alone (the contiguous 16-bit kernel) and the broadcast
// reduction over a 16-bit gate, against the CPU backend on the same inputs. Both widen with
// numbers/float16.hpp's conversions and compute in float; the two float results may differ in
// their last bits (CUDA's and the CPU's exp), so a 16-bit result may differ by one 16-bit ulp.
namespace {
template <class T> dualcast::view<T const> cview(T const *p, dualcast::shape s) { return {p, s}; }
template <class T> dualcast::view<T> mview(T *p, dualcast::shape s) { return {p, s}; }

template <class T16> std::string float16_lstm_case(long rows, long cols) {
  namespace dc = dualcast;
  long const n = rows * cols;
  std::size_t const N = std::size_t(n);
  dc::shape const s{rows, cols};
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  std::vector<T16> g[4], hbar(N, T16(0.f));
  std::vector<float> c(N), cbar(N);
  for (auto &v : g)
    for (long j = 0; j < n; ++j)
      v.push_back(T16(u(gen)));
  for (std::size_t j = 0; j < N; ++j) {
    c[j] = u(gen);
    hbar[j] = T16(u(gen));
    cbar[j] = u(gen);
  }
  // The CPU backend's results.
  std::vector<T16> h(N), gb[4];
  std::vector<float> c2(N), cb(N);
  for (auto &v : gb)
    v.resize(N);
  dc::value_and_vjp(dc::cpu{}, dc::cells::lstm, dc::out(mview(h.data(), s), mview(c2.data(), s)),
                    dc::out(mview(gb[0].data(), s), mview(gb[1].data(), s), mview(gb[2].data(), s),
                            mview(gb[3].data(), s), mview(cb.data(), s)),
                    dc::in(cview(g[0].data(), s), cview(g[1].data(), s), cview(g[2].data(), s),
                           cview(g[3].data(), s), cview(c.data(), s)),
                    dc::in(cview(hbar.data(), s), cview(cbar.data(), s)));
  // The same on the GPU.
  device_memory<T16> m16;
  device_memory<float> m32;
  T16 *dg[4], *dh = m16.alloc(n), *dhbar = m16.alloc(n), *dgb[4];
  float *dc_ = m32.alloc(n), *dc2 = m32.alloc(n), *dcbar = m32.alloc(n), *dcb = m32.alloc(n);
  for (int k = 0; k < 4; ++k) {
    dg[k] = m16.alloc(n);
    dgb[k] = m16.alloc(n);
    m16.upload(dg[k], g[k]);
  }
  m16.upload(dhbar, hbar);
  m32.upload(dc_, c);
  m32.upload(dcbar, cbar);
  dc::value_and_vjp(
      dc::cuda{}, dc::cells::lstm, dc::out(mview(dh, s), mview(dc2, s)),
      dc::out(mview(dgb[0], s), mview(dgb[1], s), mview(dgb[2], s), mview(dgb[3], s),
              mview(dcb, s)),
      dc::in(cview(dg[0], s), cview(dg[1], s), cview(dg[2], s), cview(dg[3], s), cview(dc_, s)),
      dc::in(cview(dhbar, s), cview(dcbar, s)));
  std::vector<T16> h_d(N), gb_d[4], hv_d(N);
  std::vector<float> c2_d(N), cb_d(N), c2v_d(N);
  m16.download(h_d, dh);
  m32.download(c2_d, dc2);
  m32.download(cb_d, dcb);
  // The values alone (7 contiguous arrays: map_contiguous's 16-bit vector path; n = 67 x 129 is
  // no multiple of 4, so its partial last vector too) into the same outputs.
  dc::apply(dc::cuda{}, dc::cells::lstm, dc::out(mview(dh, s), mview(dc2, s)), cview(dg[0], s),
            cview(dg[1], s), cview(dg[2], s), cview(dg[3], s), cview(dc_, s));
  m16.download(hv_d, dh);
  m32.download(c2v_d, dc2);
  // The broadcast reduction reading 16 bits, summing in float (sum / mean of 16-bit tape
  // variables): gate 0 over its columns and over everything, against the CPU's sums.
  float *rows_d = m32.alloc(rows), *all_d = m32.alloc(1);
  dc::detail::backend_reduce(dc::detail::hook{}, dc::cuda{}, s, dg[0],
                             mview(rows_d, dc::shape{rows, 1}), false);
  dc::detail::backend_reduce(dc::detail::hook{}, dc::cuda{}, s, dg[0],
                             mview(all_d, dc::shape{1, 1}), false);
  std::size_t const R = std::size_t(rows);
  std::vector<float> rows_g(R), all_g(1), rows_c(R), all_c(1);
  m32.download(rows_g, rows_d);
  m32.download(all_g, all_d);
  m32.release(rows_d);
  m32.release(all_d);
  dc::detail::backend_reduce(dc::detail::hook{}, dc::cpu{}, s, g[0].data(),
                             mview(rows_c.data(), dc::shape{rows, 1}), false);
  dc::detail::backend_reduce(dc::detail::hook{}, dc::cpu{}, s, g[0].data(),
                             mview(all_c.data(), dc::shape{1, 1}), false);
  for (int k = 0; k < 4; ++k) {
    gb_d[k].resize(N);
    m16.download(gb_d[k], dgb[k]);
    m16.release(dg[k]);
    m16.release(dgb[k]);
  }
  for (T16 *p : {dh, dhbar})
    m16.release(p);
  for (float *p : {dc_, dc2, dcbar, dcb})
    m32.release(p);
  double const ulp16 = std::is_same_v<T16, dc::bfloat16> ? 1.0 / 128 : 1.0 / 1024;
  auto near = [](double a, double b, double rel) {
    return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b)) + 1e-6;
  };
  // (float sums in two orders: |a - b| <= n 2^-24 sum |terms|, sum |terms| <= 3 n)
  for (long r = 0; r < rows; ++r)
    if (std::abs(rows_c[std::size_t(r)] - rows_g[std::size_t(r)]) > 3.0 * cols * cols / (1 << 24))
      return "16-bit sum of row " + std::to_string(r) + ": cpu " +
             std::to_string(rows_c[std::size_t(r)]) + ", gpu " +
             std::to_string(rows_g[std::size_t(r)]);
  if (std::abs(all_c[0] - all_g[0]) > 3.0 * double(n) * double(n) / (1 << 24))
    return "16-bit sum of everything: cpu " + std::to_string(all_c[0]) + ", gpu " +
           std::to_string(all_g[0]);
  for (long j = 0; j < n; ++j) {
    auto const i = std::size_t(j);
    if (!near(float(h[i]), float(hv_d[i]), ulp16) || !near(c2[i], c2v_d[i], 1e-5))
      return "values pass (contiguous 16-bit kernel) at " + std::to_string(j) + ": cpu h " +
             std::to_string(float(h[i])) + ", gpu " + std::to_string(float(hv_d[i]));
    if (!near(float(h[i]), float(h_d[i]), ulp16))
      return "h at " + std::to_string(j) + ": cpu " + std::to_string(float(h[i])) + ", gpu " +
             std::to_string(float(h_d[i]));
    if (!near(c2[i], c2_d[i], 1e-5) || !near(cb[i], cb_d[i], 1e-5))
      return "c' or c's cotangent at " + std::to_string(j);
    for (int k = 0; k < 4; ++k)
      if (!near(float(gb[k][i]), float(gb_d[k][i]), ulp16))
        return "gate " + std::to_string(k) + " cotangent at " + std::to_string(j) + ": cpu " +
               std::to_string(float(gb[k][i])) + ", gpu " + std::to_string(float(gb_d[k][i]));
  }
  return "";
}
} // namespace

std::string dualcast_gpu_float16_lstm_case() {
  std::string r = float16_lstm_case<dualcast::bfloat16>(67, 129);
  return r.empty() ? float16_lstm_case<dualcast::half>(67, 129) : "half: " + r;
}

// CUB's device-wide primitives (backend/cuda/device_primitives.cuh) against the CPU: integer-valued
// doubles, whose sums are exact in any order, must give the CPU's bits; random floats run twice
// must give the same bits (run-to-run determinism) where CUB documents it (not the scan). The
// broadcast reduction through cuda_primitives must equal the own pass to rounding.
namespace {
template <class T> std::vector<T> download_vector(T const *p, std::size_t n) {
  std::vector<T> v(n);
  dualcast::detail::cuda_backend::check(
      cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return v;
}
template <class T> T *upload_vector(device_memory<T> &m, std::vector<T> const &v) {
  T *p = m.alloc(long(v.size()));
  m.upload(p, v);
  return p;
}

std::string cub_primitives_case() {
  namespace dc = dualcast;
  namespace cb = dualcast::detail::cuda_backend;
  long const R = 517, C = 2049, n = R * C, bins = 1000;
  std::mt19937 gen(23);
  std::vector<double> x(std::size_t(n), 0.0);
  std::vector<float> xf(std::size_t(n), 0.f);
  std::vector<dc::index_t> idx(static_cast<std::size_t>(n));
  for (long i = 0; i < n; ++i) {
    x[std::size_t(i)] = double(long(gen() % 17) - 8);
    xf[std::size_t(i)] = float(gen() % 20001) / 10000.f - 1.f;
    idx[std::size_t(i)] = dc::index_t(gen() % (bins + 6)) - 3; // some outside [0, bins)
  }
  device_memory<double> md;
  device_memory<float> mf;
  device_memory<dc::index_t> mi;
  double *xd = upload_vector(md, x), *out = md.alloc(n);
  float *xfd = upload_vector(mf, xf), *outf = mf.alloc(n);
  dc::index_t *idxd = upload_vector(mi, idx);
  dc::cuda ex;
  std::string err;

  // Whole sum and row sums (the broadcast reduction's CUB paths), accumulating into 0.5.
  std::vector<double> rows(std::size_t(R), 0.5);
  double total = 0.5;
  for (long r = 0; r < R; ++r)
    for (long c = 0; c < C; ++c)
      rows[std::size_t(r)] += x[std::size_t(r * C + c)], total += x[std::size_t(r * C + c)];
  for (auto impl : {dc::cuda_impl::own, dc::cuda_impl::cub}) {
    ex.primitives = {impl, impl, impl, impl};
    std::vector<double> init(std::size_t(R), 0.5);
    double *dst = upload_vector(md, init);
    cb::reduce_broadcast(ex, dc::shape{R, C}, static_cast<double const *>(xd),
                         dc::view<double>(dst, dc::shape{R, 1}), true);
    cb::reduce_broadcast(ex, dc::shape{R * C}, static_cast<double const *>(xd),
                         dc::view<double>(dst + 1, dc::shape{1}), true);
    auto got = download_vector(dst, std::size_t(R));
    md.release(dst);
    char const *name = impl == dc::cuda_impl::cub ? "cub" : "own";
    if (got[1] != rows[1] + total - 0.5)
      return std::string(name) + " whole sum: " + std::to_string(got[1] - rows[1]) + " for " +
             std::to_string(total);
    for (long r = 0; r < R; ++r)
      if (r != 1 && got[std::size_t(r)] != rows[std::size_t(r)])
        return std::string(name) + " row sum " + std::to_string(r);
  }

  // Determinism of the CUB reductions over random floats: two runs, the same bits.
  auto twice = [&](auto f, std::size_t m) {
    f(outf);
    auto a = download_vector(outf, m);
    f(outf);
    return a == download_vector(outf, m);
  };
  if (!twice([&](float *o) { cb::cub_sum(ex, static_cast<float const *>(xfd), n, o); }, 1))
    return "cub_sum: two runs differ";
  if (!twice([&](float *o) { cb::cub_segmented_sum(ex, static_cast<float const *>(xfd), R, C, o); },
             std::size_t(R)))
    return "cub_segmented_sum: two runs differ";
  if (!twice([&](float *o) { cb::cub_histogram_plus(ex, xfd, idxd, n, bins, o); },
             std::size_t(bins)))
    return "cub_histogram_plus: two runs differ";

  // The scan: exact on integer-valued doubles.
  cb::cub_inclusive_sum(ex, static_cast<double const *>(xd), out, n);
  auto scan = download_vector(out, std::size_t(n));
  double acc = 0;
  for (long i = 0; i < n; ++i) {
    acc += x[std::size_t(i)];
    if (scan[std::size_t(i)] != acc)
      return "cub_inclusive_sum at " + std::to_string(i);
  }

  // The scan from the end, exclusive (the adjoint of an exclusive cumsum): exact too.
  cb::cub_scan_sum(ex, static_cast<double const *>(xd), out, n, true, true);
  scan = download_vector(out, std::size_t(n));
  acc = 0;
  for (long i = n - 1; i >= 0; --i) {
    if (scan[std::size_t(i)] != acc)
      return "cub_scan_sum (exclusive, reverse) at " + std::to_string(i);
    acc += x[std::size_t(i)];
  }

  // The rows by bin (reduce_by_index's sorted path): the host's counting sort, number for number.
  {
    std::vector<dc::index_t> start(std::size_t(bins) + 1, 0), order;
    for (long i = 0; i < n; ++i)
      if (idx[std::size_t(i)] >= 0 && idx[std::size_t(i)] < bins)
        ++start[std::size_t(idx[std::size_t(i)]) + 1];
    for (long b = 0; b < bins; ++b)
      start[std::size_t(b) + 1] += start[std::size_t(b)];
    order.resize(std::size_t(start[std::size_t(bins)]));
    std::vector<dc::index_t> next(start.begin(), start.end() - 1);
    for (long i = 0; i < n; ++i)
      if (idx[std::size_t(i)] >= 0 && idx[std::size_t(i)] < bins)
        order[std::size_t(next[std::size_t(idx[std::size_t(i)])]++)] = i;
    dc::index_t *sd = mi.alloc(bins + 1), *od = mi.alloc(n);
    cb::cub_sort_by_bin(ex, idxd, n, bins, sd, od);
    auto got_order = download_vector(od, std::size_t(n));
    got_order.resize(order.size());
    if (download_vector(sd, std::size_t(bins) + 1) != start || got_order != order)
      return "cub_sort_by_bin differs from the host's counting sort";
    mi.release(sd), mi.release(od);
  }

  // The sorted histogram: exact on integer-valued doubles, out-of-range indices ignored.
  std::vector<double> hist(std::size_t(bins), 0.0);
  for (long i = 0; i < n; ++i)
    if (idx[std::size_t(i)] >= 0 && idx[std::size_t(i)] < bins)
      hist[std::size_t(idx[std::size_t(i)])] += x[std::size_t(i)];
  cb::cub_histogram_plus(ex, static_cast<double const *>(xd), idxd, n, bins, out);
  if (download_vector(out, std::size_t(bins)) != hist)
    return "cub_histogram_plus differs from the CPU's histogram";
  cb::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  md.release(xd), md.release(out), mf.release(xfd), mf.release(outf), mi.release(idxd);
  return err;
}
} // namespace

std::string dualcast_gpu_cub_primitives() { return cub_primitives_case(); }

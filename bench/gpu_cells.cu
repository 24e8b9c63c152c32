// bench/gpu_cells.cu: the cell benchmarks on a GPU (issue 17), float32, timed with CUDA events.
//
//   copy            cudaMemcpyAsync device to device, 1 GiB: the bandwidth reference (bytes read
//                   plus bytes written over the time)
//   lstm_cell       c2 = sigmoid(f) c + sigmoid(i) tanh(g), h = sigmoid(o) tanh(c2), forward +
//                   VJP from (hbar, c2bar), B x 1024:
//     fused_vjp     dualcast::apply (values) + dualcast::vjp (re-evaluates the duals): 2 kernels
//     fused_value_vjp  dualcast::value_and_vjp: values and input cotangents in 1 kernel (14
//                   arrays; what JAX's jit of forward + vjp computes)
//     fused_store   apply with the 10 partials + 5 contracting passes
//     separate      one dualcast pass per elementwise operation (22 kernels), as an
//                   operator-by-operator framework runs it
//     hand_cuda     two hand-written kernels (forward, backward with hand-derived derivatives)
//     tape_fused    on the tape, CUDA tensors: the cell one fused node, backward (allocations
//                   from the stream-ordered pool included; host clock around a synchronize)
//     tape_unfused  the same lambda on the tape operation by operation
//     floor_at_copy_bw  not timed: the 19 arrays forward + VJP must move / the copy bandwidth
//   lstm_cell_16    the same cell with every array stored in float32, bfloat16 or half (loaded,
//                   widened, computed in float, rounded once on store; issue 37), modes
//                   value_and_vjp (one kernel, 14 arrays) and apply_vjp (apply + vjp, 19
//                   arrays), B x 1024; note: the floor (those bytes at the copy bandwidth), the
//                   time over it, and float32's median over this one's (interleaved runs)
//   hmlstm          the HM-LSTM update of the mixed-mode paper, n x n, values + the four partials
//                   (fused_partials), the VJP (fused_vjp), every branch then select in one pass
//                   (select_partials) and in separate passes (separate_partials, XLA's shape),
//                   masks n x 1 / 1 x n / n x n
//   lstm_step       the LSTM step with its gate matmuls (cuBLAS) on the tape, forward + backward:
//                   fused (gate sum and cell one node each) against unfused (one node per
//                   operation)
// Output: CSV benchmark,variant,size,median_ms,gb_per_s,note (gb_per_s: the bytes the variant
// must move over its time; note: the mask layout, or floor / copy details).
//   gpu_cells [--reps N] [--quick] [--profile]
// --profile: each fused cell kernel once after a warm-up, nothing timed (for ncu).
#include <dualcast/autodiff.hpp>
#include <dualcast/cuda.cuh>
#include <dualcast/kernel/cells.hpp>

#include "common.hpp"
#include "cuda_timing.cuh"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace dc = dualcast;

namespace {

void check(cudaError_t e, char const *what) { bench::cuda_check("gpu_cells", e, what); }

// One device array of floats, filled from the host.
struct darray {
  float *p = nullptr;
  std::size_t n = 0;
  darray() = default;
  explicit darray(std::size_t n_) : n(n_) { check(cudaMalloc(&p, n * sizeof(float)), "malloc"); }
  darray(std::vector<float> const &h) : darray(h.size()) {
    check(cudaMemcpy(p, h.data(), n * sizeof(float), cudaMemcpyHostToDevice), "upload");
  }
  darray(darray &&o) noexcept : p(o.p), n(o.n) { o.p = nullptr; }
  darray &operator=(darray &&o) noexcept {
    std::swap(p, o.p), std::swap(n, o.n);
    return *this;
  }
  ~darray() {
    if (p)
      cudaFree(p);
  }
};

// Uniform floats in [lo, hi) from a hash of (seed, index), written on the device: generating
// gigabytes of inputs on the host would take longer than the benchmark.
__global__ void fill_uniform(float *p, std::size_t n, unsigned seed, float lo, float hi) {
  for (std::size_t e = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; e < n;
       e += std::size_t(gridDim.x) * blockDim.x) {
    unsigned long long x = (e + 1) * 0x9E3779B97F4A7C15ull ^ (unsigned long long)seed << 32;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    p[e] = lo + (hi - lo) * float(x >> 40) * (1.0f / 16777216.0f);
  }
}
void fill(float *p, std::size_t n, unsigned seed, float lo, float hi) {
  fill_uniform<<<1024, 256>>>(p, n, seed, lo, hi);
  check(cudaGetLastError(), "fill");
}
darray random_array(std::size_t n, unsigned seed, float lo, float hi) {
  darray a(n);
  fill(a.p, n, seed, lo, hi);
  return a;
}
dc::tensor<float> random_tensor(dc::shape const &s, unsigned seed, float scale) {
  auto t = dc::tensor<float>::empty(s, dc::device::cuda(0));
  fill(t.mutable_data(), std::size_t(s.size()), seed, -scale, scale);
  check(cudaDeviceSynchronize(), "fill");
  return t;
}

using bench::median;

// Times each of `fs` `reps` times, interleaved (every repetition runs them all), after a warm-up
// of each; CUDA events on the default stream. Returns the medians in ms.
template <class... F> std::vector<double> interleaved(int reps, F &&...fs) {
  std::vector<std::vector<double>> t(sizeof...(F));
  bench::event_timer const time("gpu_cells");
  (fs(), ...);
  check(cudaDeviceSynchronize(), "warm-up");
  for (int r = 0; r < reps; ++r) {
    std::size_t k = 0;
    auto one = [&](auto &f) { t[k++].push_back(time([&] { f(); })); };
    (one(fs), ...);
  }
  std::vector<double> m;
  for (auto &v : t)
    m.push_back(median(v));
  return m;
}

void row(char const *bench, char const *variant, std::string const &size, double ms, double bytes,
         std::string const &note) {
  std::printf("%s,%s,%s,%.4f,%.1f,%s\n", bench, variant, size.c_str(), ms,
              bytes > 0 && ms > 0 ? bytes / ms / 1e6 : 0.0, note.c_str());
  std::fflush(stdout);
}

// ---------------------------------------------------------------- LSTM cell

__device__ inline float sig(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void hand_forward(long n, float const *i, float const *f, float const *g, float const *o,
                             float const *c, float *h, float *c2) {
  for (long e = blockIdx.x * long(blockDim.x) + threadIdx.x; e < n;
       e += long(gridDim.x) * blockDim.x) {
    float const si = sig(i[e]), sf = sig(f[e]), tg = tanhf(g[e]), so = sig(o[e]);
    float const cn = sf * c[e] + si * tg;
    h[e] = so * tanhf(cn);
    c2[e] = cn;
  }
}

__global__ void hand_backward(long n, float const *i, float const *f, float const *g,
                              float const *o, float const *c, float const *hbar, float const *c2bar,
                              float *ib, float *fb, float *gb, float *ob, float *cb) {
  for (long e = blockIdx.x * long(blockDim.x) + threadIdx.x; e < n;
       e += long(gridDim.x) * blockDim.x) {
    float const si = sig(i[e]), sf = sig(f[e]), tg = tanhf(g[e]), so = sig(o[e]), ce = c[e];
    float const cn = sf * ce + si * tg, tc = tanhf(cn), hb = hbar[e];
    float const gc2 = c2bar[e] + hb * so * (1.0f - tc * tc);
    ib[e] = gc2 * tg * si * (1.0f - si);
    fb[e] = gc2 * ce * sf * (1.0f - sf);
    gb[e] = gc2 * si * (1.0f - tg * tg);
    ob[e] = hb * tc * so * (1.0f - so);
    cb[e] = gc2 * sf;
  }
}

struct mul_fn {
  template <class X, class Y> DUALCAST_HD auto operator()(X x, Y y) const { return x * y; }
};
struct add_fn {
  template <class X, class Y> DUALCAST_HD auto operator()(X x, Y y) const { return x + y; }
};
struct sig_fn {
  template <class X> DUALCAST_HD auto operator()(X x) const { return dc::sigmoid(x); }
};
struct tanh_fn {
  template <class X> DUALCAST_HD auto operator()(X x) const { return dc::tanh(x); }
};
struct dsig_fn { // gy * y * (1 - y)
  template <class G, class Y> DUALCAST_HD auto operator()(G gy, Y y) const {
    return gy * y * (1.0f - y);
  }
};
struct dtanh_fn { // gy * (1 - y^2)
  template <class G, class Y> DUALCAST_HD auto operator()(G gy, Y y) const {
    return gy * (1.0f - y * y);
  }
};
struct contract_fn { // xbar = hbar * dh/dx + c2bar * dc2/dx
  template <class A, class B, class P, class Q>
  DUALCAST_HD auto operator()(A hb, B cb, P ph, Q pc) const {
    return hb * ph + cb * pc;
  }
};
constexpr dc::kernel<mul_fn> mul{mul_fn{}};
constexpr dc::kernel<add_fn> add{add_fn{}};
constexpr dc::kernel<sig_fn> sig_k{sig_fn{}};
constexpr dc::kernel<tanh_fn> tanh_k{tanh_fn{}};
constexpr dc::kernel<dsig_fn> dsig{dsig_fn{}};
constexpr dc::kernel<dtanh_fn> dtanh{dtanh_fn{}};
constexpr dc::kernel<contract_fn> contract{contract_fn{}};

struct lstm_arrays {
  long n;
  dc::shape s;
  darray in[5], hbar, c2bar, h, c2, xbar[5], part[10], tmp[12];
  lstm_arrays(long B, long H) : n(B * H), s{B, H} {
    for (unsigned k = 0; k < 5; ++k)
      in[k] = random_array(std::size_t(n), 42 + k, -2.f, 2.f);
    hbar = random_array(std::size_t(n), 50, -2.f, 2.f);
    c2bar = random_array(std::size_t(n), 51, -2.f, 2.f);
    h = darray(std::size_t(n)), c2 = darray(std::size_t(n));
    for (auto &x : xbar)
      x = darray(std::size_t(n));
  }
  dc::view<const float> cv(darray const &a) const { return {a.p, s}; }
  dc::view<float> mv(darray &a) const { return {a.p, s}; }
  dc::view<const float> x(int k) const { return cv(in[k]); }
};

void fused_vjp(dc::cuda ex, lstm_arrays &a) {
  dc::apply(ex, dc::cells::lstm, dc::out(a.mv(a.h), a.mv(a.c2)), a.x(0), a.x(1), a.x(2), a.x(3),
            a.x(4));
  dc::vjp(
      ex, dc::cells::lstm,
      dc::out(a.mv(a.xbar[0]), a.mv(a.xbar[1]), a.mv(a.xbar[2]), a.mv(a.xbar[3]), a.mv(a.xbar[4])),
      dc::in(a.x(0), a.x(1), a.x(2), a.x(3), a.x(4)), dc::in(a.cv(a.hbar), a.cv(a.c2bar)));
}

void fused_value_vjp(dc::cuda ex, lstm_arrays &a) {
  dc::value_and_vjp(
      ex, dc::cells::lstm, dc::out(a.mv(a.h), a.mv(a.c2)),
      dc::out(a.mv(a.xbar[0]), a.mv(a.xbar[1]), a.mv(a.xbar[2]), a.mv(a.xbar[3]), a.mv(a.xbar[4])),
      dc::in(a.x(0), a.x(1), a.x(2), a.x(3), a.x(4)), dc::in(a.cv(a.hbar), a.cv(a.c2bar)));
}

void fused_store(dc::cuda ex, lstm_arrays &a) {
  auto p = [&](int k) { return a.mv(a.part[k]); };
  dc::apply(ex, dc::cells::lstm, dc::active<0, 1, 2, 3, 4>, dc::out(a.mv(a.h), a.mv(a.c2)),
            dc::out(p(0), p(1), p(2), p(3), p(4), p(5), p(6), p(7), p(8), p(9)), a.x(0), a.x(1),
            a.x(2), a.x(3), a.x(4));
  for (int j = 0; j < 5; ++j)
    dc::apply(ex, contract, dc::out(a.mv(a.xbar[j])), a.cv(a.hbar), a.cv(a.c2bar), a.cv(a.part[j]),
              a.cv(a.part[5 + j]));
}

void separate(dc::cuda ex, lstm_arrays &a) {
  auto t = [&](int k) { return a.mv(a.tmp[k]); };
  auto c = [&](int k) { return a.cv(a.tmp[k]); };
  auto x = [&](int k) { return a.x(k); };
  dc::apply(ex, sig_k, dc::out(t(0)), x(0));
  dc::apply(ex, sig_k, dc::out(t(1)), x(1));
  dc::apply(ex, tanh_k, dc::out(t(2)), x(2));
  dc::apply(ex, sig_k, dc::out(t(3)), x(3));
  dc::apply(ex, mul, dc::out(t(4)), c(1), x(4));
  dc::apply(ex, mul, dc::out(t(5)), c(0), c(2));
  dc::apply(ex, add, dc::out(a.mv(a.c2)), c(4), c(5));
  dc::apply(ex, tanh_k, dc::out(t(6)), a.cv(a.c2));
  dc::apply(ex, mul, dc::out(a.mv(a.h)), c(3), c(6));
  dc::apply(ex, mul, dc::out(t(7)), a.cv(a.hbar), c(6));
  dc::apply(ex, dsig, dc::out(a.mv(a.xbar[3])), c(7), c(3));
  dc::apply(ex, mul, dc::out(t(8)), a.cv(a.hbar), c(3));
  dc::apply(ex, dtanh, dc::out(t(9)), c(8), c(6));
  dc::apply(ex, add, dc::out(t(10)), c(9), a.cv(a.c2bar));
  dc::apply(ex, mul, dc::out(a.mv(a.xbar[4])), c(10), c(1));
  dc::apply(ex, mul, dc::out(t(11)), c(10), x(4));
  dc::apply(ex, dsig, dc::out(a.mv(a.xbar[1])), c(11), c(1));
  dc::apply(ex, mul, dc::out(t(11)), c(10), c(2));
  dc::apply(ex, dsig, dc::out(a.mv(a.xbar[0])), c(11), c(0));
  dc::apply(ex, mul, dc::out(t(11)), c(10), c(0));
  dc::apply(ex, dtanh, dc::out(a.mv(a.xbar[2])), c(11), c(2));
}

void hand_cuda(lstm_arrays &a) {
  int const threads = 256;
  int const blocks = int(std::min<long>((a.n + threads - 1) / threads, 132L * 16));
  hand_forward<<<blocks, threads>>>(a.n, a.in[0].p, a.in[1].p, a.in[2].p, a.in[3].p, a.in[4].p,
                                    a.h.p, a.c2.p);
  hand_backward<<<blocks, threads>>>(a.n, a.in[0].p, a.in[1].p, a.in[2].p, a.in[3].p, a.in[4].p,
                                     a.hbar.p, a.c2bar.p, a.xbar[0].p, a.xbar[1].p, a.xbar[2].p,
                                     a.xbar[3].p, a.xbar[4].p);
}

// The cell on the tape over CUDA tensors (views of the arrays copied once into tensors).
struct tape_inputs {
  dc::tensor<float> x[5], hbar, c2bar;
  explicit tape_inputs(long B, long H) {
    dc::shape const s{B, H};
    for (unsigned k = 0; k < 5; ++k)
      x[k] = random_tensor(s, 42 + k, 2.f);
    hbar = random_tensor(s, 50, 2.f);
    c2bar = random_tensor(s, 51, 2.f);
  }
};
void on_tape(tape_inputs const &in, bool fused) {
  dc::tape tp;
  dc::var<float> v[5];
  for (int k = 0; k < 5; ++k)
    v[k] = tp.variable(in.x[k]);
  auto r = fused ? dc::fused(dc::cells::lstm, v[0], v[1], v[2], v[3], v[4])
                 : dc::unfused(dc::cells::lstm, v[0], v[1], v[2], v[3], v[4]);
  tp.backward(std::vector<dc::var<float>>{r[0], r[1]},
              std::vector<dc::tensor<float>>{in.hbar, in.c2bar});
}

// The fused VJP's 7 outputs against the hand-written kernels', outputs poisoned (NaN) before each
// run: the largest |fused - hand| / max(|hand|, 1), NaN if an element was left unwritten.
double fused_vs_hand(dc::cuda ex, lstm_arrays &a) {
  darray *outs[] = {&a.h, &a.c2, &a.xbar[0], &a.xbar[1], &a.xbar[2], &a.xbar[3], &a.xbar[4]};
  std::size_t const n = std::size_t(a.n);
  std::vector<std::vector<float>> ref(7, std::vector<float>(n)), got = ref;
  auto run_and_read = [&](auto &&f, std::vector<std::vector<float>> &into) {
    for (auto *o : outs)
      check(cudaMemset(o->p, 0xFF, n * 4), "poison");
    f();
    for (std::size_t k = 0; k < 7; ++k)
      check(cudaMemcpy(into[k].data(), outs[k]->p, n * 4, cudaMemcpyDeviceToHost), "read");
  };
  run_and_read([&] { hand_cuda(a); }, ref);
  run_and_read([&] { fused_vjp(ex, a); }, got);
  double worst = 0;
  for (std::size_t k = 0; k < 7; ++k)
    for (std::size_t e = 0; e < n; ++e) {
      double const d = std::fabs(double(got[k][e]) - double(ref[k][e])) /
                       std::max(1.0, std::fabs(double(ref[k][e])));
      if (!(d <= worst))
        worst = std::isnan(d) ? NAN : d;
      if (std::isnan(worst))
        return worst;
    }
  return worst;
}

double copy_gb_per_s(int reps) {
  std::size_t const n = std::size_t(1) << 28; // 1 GiB of floats
  darray src(n), dst(n);
  check(cudaMemset(src.p, 1, n * 4), "memset");
  auto m = interleaved(
      reps, [&] { check(cudaMemcpyAsync(dst.p, src.p, n * 4, cudaMemcpyDeviceToDevice), "copy"); });
  double const gbs = 2.0 * double(n) * 4 / m[0] / 1e6;
  row("copy", "d2d_1GiB", std::to_string(n), m[0], 2.0 * double(n) * 4, "read+written");
  return gbs;
}

// The LSTM cell's batch sizes (B x 1024), in float32 and in 16 bits.
std::vector<long> cell_batches(bool quick) {
  return quick ? std::vector<long>{4096} : std::vector<long>{4096, 16384, 65536};
}

void lstm_cell(int reps, double copy_bw, bool quick) {
  dc::cuda const ex{nullptr, 256, true};
  for (long B : cell_batches(quick)) {
    long const H = 1024;
    lstm_arrays a(B, H);
    for (auto &p : a.part)
      p = darray(std::size_t(a.n));
    for (auto &t : a.tmp)
      t = darray(std::size_t(a.n));
    tape_inputs const in(B, H);
    std::string const size = std::to_string(B) + "x" + std::to_string(H);
    double const bytes = 19.0 * 4.0 * double(a.n);
    auto m = interleaved(
        reps, [&] { fused_vjp(ex, a); }, [&] { fused_store(ex, a); }, [&] { separate(ex, a); },
        [&] { hand_cuda(a); }, [&] { on_tape(in, true); }, [&] { on_tape(in, false); },
        [&] { fused_value_vjp(ex, a); });
    char const *names[] = {"fused_vjp",  "fused_store",  "separate",       "hand_cuda",
                           "tape_fused", "tape_unfused", "fused_value_vjp"};
    double const one_pass_bytes = 14.0 * 4.0 * double(a.n);
    for (std::size_t v = 0; v < m.size(); ++v)
      row("lstm_cell", names[v], size, m[v], v == 6 ? one_pass_bytes : bytes, "");
    double const floor_ms = bytes / (copy_bw * 1e6);
    char note[160];
    std::snprintf(note, sizeof note,
                  "19 arrays / copy bandwidth; fused_vjp at %.2fx; fused vs hand max rel diff %.2e",
                  m[0] / floor_ms, fused_vs_hand(ex, a));
    row("lstm_cell", "floor_at_copy_bw", size, floor_ms, bytes, note);
  }
}

// ---------------------------------------------------------------- 16-bit storage (issue 37)

template <class T> __global__ void narrow_from_float(T *out, float const *in, std::size_t n) {
  for (std::size_t e = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; e < n;
       e += std::size_t(gridDim.x) * blockDim.x)
    out[e] = T(in[e]);
}

// The cell's 14 arrays stored as T (float, dc::bfloat16 or dc::half), random inputs rounded once
// from the float ones (same seeds as lstm_arrays).
template <class T> struct cell_arrays_16 {
  dc::shape s;
  std::size_t n;
  T *in[5] = {}, *hbar = nullptr, *c2bar = nullptr, *h = nullptr, *c2 = nullptr, *xbar[5] = {};
  cell_arrays_16(long B, long H) : s{B, H}, n(std::size_t(B * H)) {
    darray scratch(n);
    auto make = [&](T *&p, int seed) {
      check(cudaMalloc(&p, n * sizeof(T)), "malloc");
      if (seed >= 0) {
        fill(scratch.p, n, unsigned(seed), -2.f, 2.f);
        narrow_from_float<T><<<1024, 256>>>(p, scratch.p, n);
        check(cudaGetLastError(), "narrow");
      }
    };
    for (int k = 0; k < 5; ++k)
      make(in[k], 42 + k), make(xbar[k], -1);
    make(hbar, 50), make(c2bar, 51), make(h, -1), make(c2, -1);
    check(cudaDeviceSynchronize(), "fill");
  }
  cell_arrays_16(cell_arrays_16 const &) = delete;
  cell_arrays_16 &operator=(cell_arrays_16 const &) = delete;
  ~cell_arrays_16() {
    for (T *p : {in[0], in[1], in[2], in[3], in[4], hbar, c2bar, h, c2, xbar[0], xbar[1], xbar[2],
                 xbar[3], xbar[4]})
      cudaFree(p);
  }
  dc::view<T const> r(T const *p) const { return {p, s}; }
  dc::view<T> m(T *p) const { return {p, s}; }
  void value_and_vjp(dc::cuda ex) {
    dc::value_and_vjp(ex, dc::cells::lstm, dc::out(m(h), m(c2)),
                      dc::out(m(xbar[0]), m(xbar[1]), m(xbar[2]), m(xbar[3]), m(xbar[4])),
                      dc::in(r(in[0]), r(in[1]), r(in[2]), r(in[3]), r(in[4])),
                      dc::in(r(hbar), r(c2bar)));
  }
  void apply_vjp(dc::cuda ex) {
    dc::apply(ex, dc::cells::lstm, dc::out(m(h), m(c2)), r(in[0]), r(in[1]), r(in[2]), r(in[3]),
              r(in[4]));
    dc::vjp(ex, dc::cells::lstm,
            dc::out(m(xbar[0]), m(xbar[1]), m(xbar[2]), m(xbar[3]), m(xbar[4])),
            dc::in(r(in[0]), r(in[1]), r(in[2]), r(in[3]), r(in[4])), dc::in(r(hbar), r(c2bar)));
  }
};

void lstm_cell_16(int reps, double copy_bw, bool quick) {
  dc::cuda const ex{nullptr, 256, true};
  for (long B : cell_batches(quick)) {
    long const H = 1024;
    cell_arrays_16<float> f32(B, H);
    cell_arrays_16<dc::bfloat16> bf16(B, H);
    cell_arrays_16<dc::half> f16(B, H);
    std::string const size = std::to_string(B) + "x" + std::to_string(H);
    auto m = interleaved(
        reps, [&] { f32.value_and_vjp(ex); }, [&] { bf16.value_and_vjp(ex); },
        [&] { f16.value_and_vjp(ex); }, [&] { f32.apply_vjp(ex); }, [&] { bf16.apply_vjp(ex); },
        [&] { f16.apply_vjp(ex); });
    char const *storage[] = {"float32", "bfloat16", "half"};
    double const elem[] = {4, 2, 2};
    for (int v = 0; v < 6; ++v) {
      bool const one_pass = v < 3;
      double const bytes = (one_pass ? 14.0 : 19.0) * elem[v % 3] * double(B * H);
      double const floor_ms = bytes / (copy_bw * 1e6);
      char variant[64], note[160];
      std::snprintf(variant, sizeof variant, "%s_%s", storage[v % 3],
                    one_pass ? "value_and_vjp" : "apply_vjp");
      std::snprintf(note, sizeof note, "floor_ms=%.4f; at %.2fx floor; float32 / this %.2fx",
                    floor_ms, m[std::size_t(v)] / floor_ms,
                    m[std::size_t(one_pass ? 0 : 3)] / m[std::size_t(v)]);
      row("lstm_cell_16", variant, size, m[std::size_t(v)], bytes, note);
    }
  }
}

// ---------------------------------------------------------------- HM-LSTM update

struct hm_select_fn { // every branch, then select
  template <class Z, class ZB, class C, class F, class I, class G>
  DUALCAST_HD auto operator()(Z z, ZB zb, C c, F f, I i, G g) const {
    auto flush = dc::sigmoid(i) * dc::tanh(g);
    auto update = dc::sigmoid(f) * c + flush;
    return dc::select(z == 1, flush, dc::select(z == 0 && zb == 0, c, update));
  }
};
struct flush_fn {
  template <class I, class G> DUALCAST_HD auto operator()(I i, G g) const {
    return dc::sigmoid(i) * dc::tanh(g);
  }
};
struct update_fn {
  template <class C, class F, class I, class G>
  DUALCAST_HD auto operator()(C c, F f, I i, G g) const {
    return dc::sigmoid(f) * c + dc::sigmoid(i) * dc::tanh(g);
  }
};
struct choose_fn {
  template <class Z, class ZB, class A, class B, class C>
  DUALCAST_HD auto operator()(Z z, ZB zb, A a_flush, B a_update, C a_copy) const {
    return dc::select(z == 1, a_flush, dc::select(z == 0 && zb == 0, a_copy, a_update));
  }
};
constexpr dc::kernel<hm_select_fn> hm_select{hm_select_fn{}};
constexpr dc::kernel<flush_fn> flush_k{flush_fn{}};
constexpr dc::kernel<update_fn> update_k{update_fn{}};
constexpr dc::kernel<choose_fn> choose{choose_fn{}};

struct hm_problem {
  long n;
  dc::shape s, ms;
  darray z, zb, x[4], cbar, y, part[4], xbar[4], tmp[8], zeros, ones;
  hm_problem(long n_, std::string const &layout) : n(n_), s{n_, n_} {
    ms = layout == "n_x_1" ? dc::shape{n, 1} : layout == "1_x_n" ? dc::shape{n} : dc::shape{n, n};
    std::mt19937 gen(5);
    std::uniform_int_distribution<int> three(0, 2);
    std::vector<float> hz(std::size_t(ms.size())), hzb(hz.size());
    for (std::size_t j = 0; j < hz.size(); ++j) { // FLUSH, COPY, UPDATE about equally often
      int const b = three(gen);
      hz[j] = b == 0 ? 1.f : 0.f;
      hzb[j] = b == 2 ? 1.f : 0.f;
    }
    z = darray(hz), zb = darray(hzb);
    std::size_t const e = std::size_t(n * n);
    for (unsigned k = 0; k < 4; ++k)
      x[k] = random_array(e, 60 + k, -2.f, 2.f);
    cbar = random_array(e, 70, -2.f, 2.f);
    y = darray(e);
    for (auto &v : part)
      v = darray(e);
    for (auto &v : xbar)
      v = darray(e);
    for (auto &v : tmp)
      v = darray(e);
    zeros = random_array(e, 0, 0.f, 0.f), ones = random_array(e, 0, 1.f, 1.f);
  }
  dc::view<const float> cv(darray const &a) const { return {a.p, s}; }
  dc::view<const float> mask(darray const &a) const { return {a.p, ms}; }
  dc::view<float> mv(darray &a) const { return {a.p, s}; }
};

void hm_run(int variant, hm_problem &p, dc::cuda const &ex) {
  auto z = p.mask(p.z), zb = p.mask(p.zb);
  auto c = p.cv(p.x[0]), f = p.cv(p.x[1]), i = p.cv(p.x[2]), g = p.cv(p.x[3]);
  auto parts = dc::out(p.mv(p.part[0]), p.mv(p.part[1]), p.mv(p.part[2]), p.mv(p.part[3]));
  switch (variant) {
  case 0:
    dc::apply(ex, dc::cells::hmlstm_update, dc::active<2, 3, 4, 5>, dc::out(p.mv(p.y)), parts, z,
              zb, c, f, i, g);
    break;
  case 1:
    dc::vjp(ex, dc::cells::hmlstm_update, dc::active<2, 3, 4, 5>,
            dc::out(p.mv(p.xbar[0]), p.mv(p.xbar[1]), p.mv(p.xbar[2]), p.mv(p.xbar[3])),
            dc::in(z, zb, c, f, i, g), dc::in(p.cv(p.cbar)));
    break;
  case 2:
    dc::apply(ex, hm_select, dc::active<2, 3, 4, 5>, dc::out(p.mv(p.y)), parts, z, zb, c, f, i, g);
    break;
  case 3: {
    auto &t = p.tmp;
    dc::apply(ex, flush_k, dc::active<0, 1>, dc::out(p.mv(t[0])), dc::out(p.mv(t[1]), p.mv(t[2])),
              i, g);
    dc::apply(ex, update_k, dc::active<0, 1, 2, 3>, dc::out(p.mv(t[3])),
              dc::out(p.mv(t[4]), p.mv(t[5]), p.mv(t[6]), p.mv(t[7])), c, f, i, g);
    auto zero = p.cv(p.zeros), one = p.cv(p.ones);
    dc::apply(ex, choose, dc::out(p.mv(p.y)), z, zb, p.cv(t[0]), p.cv(t[3]), c);
    dc::apply(ex, choose, dc::out(p.mv(p.part[0])), z, zb, zero, p.cv(t[4]), one);
    dc::apply(ex, choose, dc::out(p.mv(p.part[1])), z, zb, zero, p.cv(t[5]), zero);
    dc::apply(ex, choose, dc::out(p.mv(p.part[2])), z, zb, p.cv(t[1]), p.cv(t[6]), zero);
    dc::apply(ex, choose, dc::out(p.mv(p.part[3])), z, zb, p.cv(t[2]), p.cv(t[7]), zero);
    break;
  }
  default:
    break;
  }
}

void hmlstm(int reps, bool quick) {
  dc::cuda const ex{nullptr, 256, true};
  char const *layouts[] = {"n_x_1", "1_x_n", "n_x_n"};
  char const *names[] = {"fused_partials", "fused_vjp", "select_partials", "separate_partials"};
  for (long n : {512L, 1024L, 2048L, 8192L}) {
    if (quick && n > 512)
      break;
    for (char const *l : layouts) {
      hm_problem p(n, l);
      double const e = double(n) * double(n);
      double const mask_bytes = std::string(l) == "n_x_n" ? 8.0 * e : 0.0;
      // values + 4 partials: c, f, i, g read, 5 arrays written; VJP: c, f, i, g, cbar read, 4
      // written (the paper's count, masks as vectors: 36 bytes per element; n x n masks add 8).
      double const bytes = 36.0 * e + mask_bytes;
      auto m = interleaved(
          reps, [&] { hm_run(0, p, ex); }, [&] { hm_run(1, p, ex); }, [&] { hm_run(2, p, ex); },
          [&] { hm_run(3, p, ex); });
      for (std::size_t v = 0; v < m.size(); ++v)
        row("hmlstm", names[v], std::to_string(n), m[v], bytes, l);
    }
  }
}

// ---------------------------------------------------------------- LSTM step with matmuls

struct gate_sum_fn {
  template <class A, class B, class C> DUALCAST_HD auto operator()(A a, B b, C c) const {
    return a + b + c;
  }
};
constexpr dc::kernel<gate_sum_fn> gate_sum{gate_sum_fn{}};

struct step_problem {
  dc::tensor<float> x, h, c, Wx, Wh, b, dh, dc2, dgates;
  step_problem(long B, long I, long H) {
    auto r = [&](dc::shape s, unsigned seed, float scale) { return random_tensor(s, seed, scale); };
    x = r({B, I}, 1, 1.f), h = r({B, H}, 2, 1.f), c = r({B, H}, 3, 1.f);
    Wx = r({I, 4 * H}, 4, 0.05f), Wh = r({H, 4 * H}, 5, 0.05f), b = r({4 * H}, 6, 0.1f);
    dh = r({B, H}, 7, 1.f), dc2 = r({B, H}, 8, 1.f), dgates = r({B, 4 * H}, 9, 1.f);
  }
};

// variant 0: fused (gate sum and cell one node each), 1: unfused, 2: the two matmuls alone.
void step(step_problem const &p, int variant, long H) {
  dc::tape tp;
  auto Wx = tp.variable(p.Wx), Wh = tp.variable(p.Wh), b = tp.variable(p.b);
  auto h = tp.variable(p.h), c = tp.variable(p.c);
  auto x = tp.constant(p.x);
  auto mx = dc::matmul(x, Wx), mh = dc::matmul(h, Wh);
  if (variant == 2) {
    tp.backward(std::vector<dc::var<float>>{mx, mh},
                std::vector<dc::tensor<float>>{p.dgates, p.dgates});
    return;
  }
  auto gates = variant == 0 ? dc::fused(gate_sum, mx, mh, b) : dc::unfused(gate_sum, mx, mh, b);
  dc::var<float> gs[4];
  for (int k = 0; k < 4; ++k)
    gs[k] = dc::slice(gates, 1, k * H, (k + 1) * H);
  auto r = variant == 0 ? dc::fused(dc::cells::lstm, gs[0], gs[1], gs[2], gs[3], c)
                        : dc::unfused(dc::cells::lstm, gs[0], gs[1], gs[2], gs[3], c);
  tp.backward(std::vector<dc::var<float>>{r[0], r[1]}, std::vector<dc::tensor<float>>{p.dh, p.dc2});
}

void lstm_step(int reps, bool quick) {
  struct dims {
    long B, I, H;
  };
  std::vector<dims> sizes = {{256, 512, 1024}, {4096, 1024, 1024}};
  if (quick)
    sizes = {{64, 128, 256}};
  for (auto [B, I, H] : sizes) {
    step_problem const p(B, I, H);
    auto m = interleaved(
        reps, [&] { step(p, 0, H); }, [&] { step(p, 1, H); }, [&] { step(p, 2, H); });
    std::string const size = std::to_string(B) + "x" + std::to_string(I) + "x" + std::to_string(H);
    char const *names[] = {"fused", "unfused", "matmuls_only"};
    for (std::size_t v = 0; v < m.size(); ++v)
      row("lstm_step", names[v], size, m[v], 0, "");
  }
}

// Each fused cell kernel once after a warm-up (ncu profiles these launches).
void profile() {
  dc::cuda const ex{nullptr, 256, true};
  lstm_arrays a(16384, 1024);
  for (auto &p : a.part)
    p = darray(std::size_t(a.n));
  hm_problem p(2048, "1_x_n");
  for (int k = 0; k < 2; ++k) {
    fused_vjp(ex, a);
    fused_store(ex, a);
    hm_run(0, p, ex);
    hm_run(1, p, ex);
  }
  // (after the two rounds above, whose launches keep their numbers)
  fused_value_vjp(ex, a);
  fused_value_vjp(ex, a);
  check(cudaDeviceSynchronize(), "profile");
}

} // namespace

int main(int argc, char **argv) {
  int reps = 31;
  bool quick = false, prof = false;
  for (int k = 1; k < argc; ++k) {
    if (!std::strcmp(argv[k], "--reps") && k + 1 < argc)
      reps = std::atoi(argv[++k]);
    else if (!std::strcmp(argv[k], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[k], "--profile"))
      prof = true;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device");
  if (prof) {
    profile();
    return 0;
  }
  std::fprintf(stderr, "gpu_cells on %s (%d SMs, %.0f MiB L2)\n", prop.name,
               prop.multiProcessorCount, prop.l2CacheSize / 1048576.0);
  std::printf("benchmark,variant,size,median_ms,gb_per_s,note\n");
  double const bw = copy_gb_per_s(reps);
  lstm_cell(reps, bw, quick);
  lstm_cell_16(reps, bw, quick);
  hmlstm(reps, quick);
  lstm_step(reps, quick);
}

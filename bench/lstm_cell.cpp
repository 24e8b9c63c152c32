// bench/lstm_cell.cpp: the LSTM cell update, forward + backward, float32, over B x H sizes.
//
//   c2 = sigmoid(f) * c + sigmoid(i) * tanh(g);   h = sigmoid(o) * tanh(c2)
//
// Variants (each computes values, then the input cotangents for given output cotangents):
//   fused_vjp      dualcast::apply (values) + dualcast::vjp (re-evaluates duals; stores nothing)
//   fused_value_vjp  dualcast::value_and_vjp: values and input cotangents in ONE pass (14 arrays;
//                  what JAX's jit of forward + vjp computes), when the cotangents are known
//   fused_store    dualcast::apply with partials (10 arrays) + one fused pass contracting them
//   separate       the same math as one dualcast pass per elementwise operation (unfused)
//   hand_simd      a hand-written loop over SIMD batches with hand-derived derivatives
//   hand_scalar    a hand-written scalar loop calling the C library (no -ffast-math)
//   tape_fused     on the tape: the cell ONE fused node (the cost model's policy: recompute),
//                  forward + backward from the two output cotangents
//   tape_store     the same with policy::store (the node keeps its 10 partial arrays)
//   tape_unfused   the same lambda on the tape operation by operation (one node per operation)
//   copy           (first row) a copy between two 256 MiB buffers: the memory-bandwidth reference
//   floor_at_copy_bw  not timed: the 19 arrays fused forward + VJP must move (5 + 2 forward,
//                  7 + 5 backward), divided by the copy bandwidth -- no two-pass variant can beat
//                  it
//   floor_one_pass_at_copy_bw  the same for one pass (fused_value_vjp): 14 arrays
// Output: CSV rows benchmark,variant,size,threads,median_ms,melem_per_s,gb_per_s,added_mib to
// stdout; added_mib: the memory one cold run adds over its 5 inputs and 2 output cotangents
// (outputs, gradients, partials, temporaries, the tape), measured in a fresh process
// (bench::memory_probe through --memory VARIANT --size BxH).
//   lstm_cell [--quick] [--threads N] [--reps N]
#include "common.hpp"

#include <dualcast/autodiff.hpp>
#include <dualcast/dualcast.hpp>

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

constexpr auto lstm = dc::kernel([](auto i, auto f, auto g, auto o, auto c) {
  auto c2 = dc::sigmoid(f) * c + dc::sigmoid(i) * dc::tanh(g);
  return dc::outputs(dc::sigmoid(o) * dc::tanh(c2), c2);
});

struct arrays {
  long n;
  bench::aligned_vector<float> in[5], h, c2, hbar, c2bar, xbar[5], part[10], tmp[12];
  explicit arrays(long n_) : n(n_) {
    std::mt19937 gen(42);
    std::uniform_real_distribution<float> u(-2.f, 2.f);
    for (auto &v : in) {
      v.resize(n);
      for (auto &x : v)
        x = u(gen);
    }
    hbar.assign(n, 0.f), c2bar.assign(n, 0.f);
    for (auto &x : hbar)
      x = u(gen);
    for (auto &x : c2bar)
      x = u(gen);
  }
  void need_outputs() {
    h.assign(n, 0.f), c2.assign(n, 0.f);
    for (auto &v : xbar)
      v.assign(n, 0.f);
  }
  void need_partials() {
    for (auto &v : part)
      v.assign(n, 0.f);
  }
  void need_tmp() {
    for (auto &v : tmp)
      v.assign(n, 0.f);
  }
};

template <class F> double median_ms(F &&f, int reps) {
  f(); // warm up (first touch of pages)
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(bench::ms_since(t0));
  }
  return bench::median(t);
}

dc::view<const float> cv(bench::aligned_vector<float> const &v, dc::shape s) {
  return {v.data(), s};
}
dc::view<float> mv(bench::aligned_vector<float> &v, dc::shape s) { return {v.data(), s}; }

void fused_vjp(dc::cpu ex, arrays &a, dc::shape s) {
  dc::apply(ex, lstm, dc::out(mv(a.h, s), mv(a.c2, s)), cv(a.in[0], s), cv(a.in[1], s),
            cv(a.in[2], s), cv(a.in[3], s), cv(a.in[4], s));
  dc::vjp(ex, lstm,
          dc::out(mv(a.xbar[0], s), mv(a.xbar[1], s), mv(a.xbar[2], s), mv(a.xbar[3], s),
                  mv(a.xbar[4], s)),
          dc::in(cv(a.in[0], s), cv(a.in[1], s), cv(a.in[2], s), cv(a.in[3], s), cv(a.in[4], s)),
          dc::in(cv(a.hbar, s), cv(a.c2bar, s)));
}

void fused_value_vjp(dc::cpu ex, arrays &a, dc::shape s) {
  dc::value_and_vjp(
      ex, lstm, dc::out(mv(a.h, s), mv(a.c2, s)),
      dc::out(mv(a.xbar[0], s), mv(a.xbar[1], s), mv(a.xbar[2], s), mv(a.xbar[3], s),
              mv(a.xbar[4], s)),
      dc::in(cv(a.in[0], s), cv(a.in[1], s), cv(a.in[2], s), cv(a.in[3], s), cv(a.in[4], s)),
      dc::in(cv(a.hbar, s), cv(a.c2bar, s)));
}

// Backward of the store policy: xbar_j = hbar * dh/dx_j + c2bar * dc2/dx_j, one fused pass.
constexpr auto contract =
    dc::kernel([](auto hb, auto cb, auto ph, auto pc) { return hb * ph + cb * pc; });

void fused_store(dc::cpu ex, arrays &a, dc::shape s) {
  auto p = [&](int k) { return mv(a.part[k], s); };
  dc::apply(ex, lstm, dc::active<0, 1, 2, 3, 4>, dc::out(mv(a.h, s), mv(a.c2, s)),
            dc::out(p(0), p(1), p(2), p(3), p(4), p(5), p(6), p(7), p(8), p(9)), cv(a.in[0], s),
            cv(a.in[1], s), cv(a.in[2], s), cv(a.in[3], s), cv(a.in[4], s));
  for (int j = 0; j < 5; ++j)
    dc::apply(ex, contract, dc::out(mv(a.xbar[j], s)), cv(a.hbar, s), cv(a.c2bar, s),
              cv(a.part[j], s), cv(a.part[5 + j], s));
}

// One pass per operation, forward and backward, as an operator-by-operator framework would run.
void separate(dc::cpu ex, arrays &a, dc::shape s) {
  constexpr auto sig = dc::kernel([](auto x) { return dc::sigmoid(x); });
  constexpr auto th = dc::kernel([](auto x) { return dc::tanh(x); });
  constexpr auto mul = dc::kernel([](auto x, auto y) { return x * y; });
  constexpr auto add = dc::kernel([](auto x, auto y) { return x + y; });
  constexpr auto dsig = dc::kernel([](auto gy, auto y) { return gy * y * (1.0f - y); });
  constexpr auto dth = dc::kernel([](auto gy, auto y) { return gy * (1.0f - y * y); });
  constexpr auto fma_ = dc::kernel([](auto x, auto y, auto z) { return x * y + z; });
  auto t = [&](int k) { return mv(a.tmp[k], s); };
  auto c = [&](int k) { return cv(a.tmp[k], s); };
  auto x = [&](int k) { return cv(a.in[k], s); };
  // forward: 0 si, 1 sf, 2 tg, 3 so, 4 a=sf*c, 5 b=si*tg, c2, 6 tc, h
  dc::apply(ex, sig, dc::out(t(0)), x(0));
  dc::apply(ex, sig, dc::out(t(1)), x(1));
  dc::apply(ex, th, dc::out(t(2)), x(2));
  dc::apply(ex, sig, dc::out(t(3)), x(3));
  dc::apply(ex, mul, dc::out(t(4)), c(1), x(4));
  dc::apply(ex, mul, dc::out(t(5)), c(0), c(2));
  dc::apply(ex, add, dc::out(mv(a.c2, s)), c(4), c(5));
  dc::apply(ex, th, dc::out(t(6)), cv(a.c2, s));
  dc::apply(ex, mul, dc::out(mv(a.h, s)), c(3), c(6));
  // backward: gc2 = c2bar + hbar * so * dtanh(c2)
  dc::apply(ex, mul, dc::out(t(7)), cv(a.hbar, s), c(6));      // d so
  dc::apply(ex, dsig, dc::out(mv(a.xbar[3], s)), c(7), c(3));  // obar
  dc::apply(ex, mul, dc::out(t(8)), cv(a.hbar, s), c(3));      // d tc
  dc::apply(ex, dth, dc::out(t(9)), c(8), c(6));               // through tanh
  dc::apply(ex, add, dc::out(t(10)), c(9), cv(a.c2bar, s));    // gc2
  dc::apply(ex, mul, dc::out(mv(a.xbar[4], s)), c(10), c(1));  // cbar = gc2 * sf
  dc::apply(ex, mul, dc::out(t(11)), c(10), x(4));             // d sf
  dc::apply(ex, dsig, dc::out(mv(a.xbar[1], s)), c(11), c(1)); // fbar
  dc::apply(ex, mul, dc::out(t(11)), c(10), c(2));             // d si
  dc::apply(ex, dsig, dc::out(mv(a.xbar[0], s)), c(11), c(0)); // ibar
  dc::apply(ex, mul, dc::out(t(11)), c(10), c(0));             // d tg
  dc::apply(ex, dth, dc::out(mv(a.xbar[2], s)), c(11), c(2));  // gbar
  (void)fma_;
}

// On the tape: the inputs as variables, the cell one fused node (policy 0: the cost model's,
// 1: store) or one node per operation (2), backward from the output cotangents.
struct tape_inputs {
  dc::tensor<float> x[5], hbar, c2bar;
  tape_inputs(arrays const &a, dc::shape s) {
    auto const from = [&](bench::aligned_vector<float> const &v) {
      return dc::tensor<float>::from(s, std::vector<float>(v.begin(), v.end()));
    };
    for (int k = 0; k < 5; ++k)
      x[k] = from(a.in[k]);
    hbar = from(a.hbar);
    c2bar = from(a.c2bar);
  }
};
void on_tape(tape_inputs const &in, int mode) {
  dc::tape tp;
  dc::var<float> v[5];
  for (int k = 0; k < 5; ++k)
    v[k] = tp.variable(in.x[k]);
  auto r = mode == 1   ? dc::fused(dc::policy::store, lstm, v[0], v[1], v[2], v[3], v[4])
           : mode == 2 ? dc::unfused(lstm, v[0], v[1], v[2], v[3], v[4])
                       : dc::fused(lstm, v[0], v[1], v[2], v[3], v[4]);
  tp.backward(std::vector<dc::var<float>>{r[0], r[1]},
              std::vector<dc::tensor<float>>{in.hbar, in.c2bar});
}

// Hand-written: values in one loop, then a backward loop recomputing the activations.
void hand_simd(int threads, arrays &a) {
  using B = dc::batch<float, dc::native_width<float>>;
  constexpr long W = B::size;
  const long n = a.n; // multiple of W in every size used here
  float const *pi = a.in[0].data(), *pf = a.in[1].data(), *pg = a.in[2].data(),
              *po = a.in[3].data(), *pc = a.in[4].data();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (long e = 0; e < n; e += W) {
    B si = dc::sigmoid(B::load(pi + e)), sf = dc::sigmoid(B::load(pf + e)),
      tg = dc::tanh(B::load(pg + e));
    B so = dc::sigmoid(B::load(po + e));
    B c2 = sf * B::load(pc + e) + si * tg;
    (so * dc::tanh(c2)).store(a.h.data() + e);
    c2.store(a.c2.data() + e);
  }
#pragma omp parallel for schedule(static) num_threads(threads)
  for (long e = 0; e < n; e += W) {
    B si = dc::sigmoid(B::load(pi + e)), sf = dc::sigmoid(B::load(pf + e)),
      tg = dc::tanh(B::load(pg + e));
    B so = dc::sigmoid(B::load(po + e));
    B c = B::load(pc + e);
    B c2 = sf * c + si * tg;
    B tc = dc::tanh(c2);
    B hb = B::load(a.hbar.data() + e);
    B gc2 = B::load(a.c2bar.data() + e) + hb * so * (1.0f - tc * tc);
    (gc2 * tg * si * (1.0f - si)).store(a.xbar[0].data() + e);
    (gc2 * c * sf * (1.0f - sf)).store(a.xbar[1].data() + e);
    (gc2 * si * (1.0f - tg * tg)).store(a.xbar[2].data() + e);
    (hb * tc * so * (1.0f - so)).store(a.xbar[3].data() + e);
    (gc2 * sf).store(a.xbar[4].data() + e);
  }
}

void hand_scalar(int threads, arrays &a) {
  const long n = a.n;
  auto sig = [](float x) { return 1.0f / (1.0f + std::exp(-x)); };
#pragma omp parallel for schedule(static) num_threads(threads)
  for (long e = 0; e < n; ++e) {
    float si = sig(a.in[0][e]), sf = sig(a.in[1][e]), tg = std::tanh(a.in[2][e]),
          so = sig(a.in[3][e]);
    float c2 = sf * a.in[4][e] + si * tg;
    a.h[e] = so * std::tanh(c2);
    a.c2[e] = c2;
  }
#pragma omp parallel for schedule(static) num_threads(threads)
  for (long e = 0; e < n; ++e) {
    float si = sig(a.in[0][e]), sf = sig(a.in[1][e]), tg = std::tanh(a.in[2][e]),
          so = sig(a.in[3][e]);
    float c = a.in[4][e], c2 = sf * c + si * tg, tc = std::tanh(c2), hb = a.hbar[e];
    float gc2 = a.c2bar[e] + hb * so * (1.0f - tc * tc);
    a.xbar[0][e] = gc2 * tg * si * (1.0f - si);
    a.xbar[1][e] = gc2 * c * sf * (1.0f - sf);
    a.xbar[2][e] = gc2 * si * (1.0f - tg * tg);
    a.xbar[3][e] = hb * tc * so * (1.0f - so);
    a.xbar[4][e] = gc2 * sf;
  }
}

// Copy bandwidth between two 256 MiB buffers (far larger than any cache): the memory floor.
// Returns the median time of one copy.
double copy_ms(int threads, int reps, long n) {
  bench::aligned_vector<float> src(std::size_t(n), 1.0f), dst(std::size_t(n), 0.0f);
  float const *s = src.data();
  float *d = dst.data();
  return median_ms(
      [&] {
#pragma omp parallel for schedule(static) num_threads(threads)
        for (long e = 0; e < n; ++e)
          d[e] = s[e];
      },
      reps);
}

constexpr char const *variants[] = {"fused_vjp",  "fused_value_vjp", "fused_store",
                                    "separate",   "hand_simd",       "hand_scalar",
                                    "tape_fused", "tape_store",      "tape_unfused"};

// Variant v on `a` (or on the tape inputs `in`; the arrays it needs allocated first), `reps`
// repetitions after a warm-up (0: one cold run); the median time.
double run_variant(int v, dc::cpu ex, int threads, arrays &a, tape_inputs const &in, dc::shape s,
                   int reps) {
  a.need_outputs();
  std::string const name = variants[v];
  if (name == "fused_vjp")
    return median_ms([&] { fused_vjp(ex, a, s); }, reps);
  if (name == "fused_value_vjp")
    return median_ms([&] { fused_value_vjp(ex, a, s); }, reps);
  if (name == "fused_store") {
    a.need_partials();
    double const ms = median_ms([&] { fused_store(ex, a, s); }, reps);
    for (auto &p : a.part)
      p.clear(), p.shrink_to_fit();
    return ms;
  }
  if (name == "separate") {
    a.need_tmp();
    double const ms = median_ms([&] { separate(ex, a, s); }, reps);
    for (auto &p : a.tmp)
      p.clear(), p.shrink_to_fit();
    return ms;
  }
  if (name == "hand_simd")
    return median_ms([&] { hand_simd(threads, a); }, reps);
  if (name == "hand_scalar")
    return median_ms([&] { hand_scalar(threads, a); }, reps);
  int const mode = name == "tape_fused" ? 0 : name == "tape_store" ? 1 : 2;
  return median_ms([&] { on_tape(in, mode); }, reps);
}

// One cold run of variant `name` at B x H in this (fresh) process: the MiB it adds.
int memory_run(std::string const &name, std::string const &size, int threads) {
  long B = 0, H = 0;
  if (std::sscanf(size.c_str(), "%ldx%ld", &B, &H) != 2)
    return 2;
  int const v = int(std::find_if(std::begin(variants), std::end(variants),
                                 [&](char const *n) { return name == n; }) -
                    std::begin(variants));
  if (v == int(std::size(variants)))
    return 2;
  arrays a(B * H);
  tape_inputs const in(a, dc::shape{B, H});
  bench::memory_probe probe;
  run_variant(v, dc::cpu{threads}, threads, a, in, dc::shape{B, H}, 0);
  std::printf("%.1f\n", probe.added_mib());
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  bench::options const o = bench::parse(argc, argv, 11, 3);
  int const threads = o.threads, reps = o.reps;
  if (!o.memory.empty())
    return memory_run(o.memory, o.rest.empty() ? "" : o.rest[0], threads);
  std::vector<std::pair<long, long>> sizes = {
      {256, 256}, {512, 512}, {1024, 1024}, {2048, 1024}, {4096, 1024}};
  if (o.quick)
    sizes = {{256, 256}};
  std::printf("benchmark,variant,size,threads,median_ms,melem_per_s,gb_per_s,added_mib\n");
  double copy_gb_per_s = 0;
  {
    const long n = 64L << 20;
    double ms = copy_ms(threads, reps, n);
    copy_gb_per_s = 8.0 * double(n) / ms / 1e6;
    std::printf("copy,copy_256MiB,%ld,%d,%.3f,%.1f,%.2f,0\n", n, threads, ms, double(n) / ms / 1e3,
                copy_gb_per_s);
  }
  dc::cpu ex{threads};
  for (auto [B, H] : sizes) {
    arrays a(B * H);
    dc::shape s{B, H};
    tape_inputs const in(a, s);
    std::string size = std::to_string(B) + "x" + std::to_string(H);
    // Bytes that must move: forward reads 5 and writes 2 arrays; backward reads 7 and writes 5.
    double fb_bytes = 19.0 * 4.0 * double(a.n);
    auto row = [&](char const *variant, double ms, double bytes, double mib) {
      std::printf("lstm_cell,%s,%s,%d,%.3f,%.1f,%.2f,%.1f\n", variant, size.c_str(), threads, ms,
                  double(a.n) / ms / 1e3, bytes / ms / 1e6, mib);
      std::fflush(stdout);
    };
    // The floor's memory: the 2 outputs and 5 input cotangents.
    row("floor_at_copy_bw", fb_bytes / copy_gb_per_s / 1e6, fb_bytes,
        7.0 * 4.0 * double(a.n) / 1048576.0);
    // One pass (fused_value_vjp) reads the 5 inputs and 2 output cotangents once and writes the 2
    // outputs and 5 input cotangents: 14 arrays.
    double const one_pass_bytes = 14.0 * 4.0 * double(a.n);
    row("floor_one_pass_at_copy_bw", one_pass_bytes / copy_gb_per_s / 1e6, one_pass_bytes,
        7.0 * 4.0 * double(a.n) / 1048576.0);
    for (int v = 0; v < int(std::size(variants)); ++v) {
      std::string const name = variants[v];
      if (name == "hand_scalar" && B * H > 1024 * 1024)
        continue; // ~25x the others: seconds per size, and its speed is known from the small ones
      double const mib = bench::memory_in_fresh_process(threads, variants[v], size);
      double const ms = run_variant(v, ex, threads, a, in, s, reps);
      // fused_store also moves its 10 partial arrays (written forward, read backward).
      double const bytes = name == "fused_store"       ? fb_bytes + 20.0 * 4.0 * double(a.n)
                           : name == "fused_value_vjp" ? one_pass_bytes
                                                       : fb_bytes;
      row(variants[v], ms, bytes, mib);
    }
  }
}

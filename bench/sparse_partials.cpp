// bench/sparse_partials.cpp: issue 41, item 1 -- the LSTM cell's fused forward + VJP with dense
// partials (every intermediate carries all 5) against sparse partials (dualcast::sparse_partials:
// each carries only the inputs it depends on), interleaved in one run with paired ratios, beside
// the hand-written SIMD loop and the memory floor (19 arrays at the measured copy bandwidth;
// 14 for the one-pass value_and_vjp).
//
//   c2 = sigmoid(f) * c + sigmoid(i) * tanh(g);   h = sigmoid(o) * tanh(c2)
//
// Variants: dense_vjp / sparse_vjp (apply + vjp), dense_value_vjp / sparse_value_vjp (one pass),
// hand_simd (the loop of bench/lstm_cell.cpp), hand_accurate (the same with the kernel's
// saturation-accurate derivatives), hand_forward (the same in forward mode), gru_dense_vjp /
// gru_sparse_vjp (the GRU cell's apply + vjp: its formula with dense duals, cells::gru with sparse
// ones; its floor 23 arrays), copy (64 Mi floats, the bandwidth reference).
// Output CSV: benchmark,variant,size,threads,median_ms,ratio_to_dense,ratio_to_hand,
// ratio_to_floor,wins_vs_dense,reps,p_vs_dense (ratios: medians of per-repetition ratios).
//   sparse_partials [--threads N] [--reps N] [--quick] [--only VARIANT]
// --only VARIANT runs that variant twice at 256 x 256 (for callgrind / perf: instructions per
// element, less those of --only none, the setup alone).
#include "common.hpp"

#include <dualcast/dualcast.hpp>

#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace dc = dualcast;

namespace {

constexpr auto lstm = dc::kernel([](auto i, auto f, auto g, auto o, auto c) {
  auto c2 = dc::sigmoid(f) * c + dc::sigmoid(i) * dc::tanh(g);
  return dc::outputs(dc::sigmoid(o) * dc::tanh(c2), c2);
});
constexpr auto lstm_sparse = dc::sparse_partials(lstm);

struct arrays {
  long n;
  dc::shape s;
  bench::aligned_vector<float> in[5], h, c2, hbar, c2bar, xbar[5];
  arrays(long B, long H) : n(B * H), s{B, H} {
    std::mt19937 gen(42);
    std::uniform_real_distribution<float> u(-2.f, 2.f);
    auto fill = [&](bench::aligned_vector<float> &v) {
      v.resize(std::size_t(n));
      for (auto &x : v)
        x = u(gen);
    };
    for (auto &v : in)
      fill(v);
    fill(hbar), fill(c2bar);
    h.assign(std::size_t(n), 0.f), c2.assign(std::size_t(n), 0.f);
    for (auto &v : xbar)
      v.assign(std::size_t(n), 0.f);
  }
  dc::view<const float> c(bench::aligned_vector<float> const &v) const { return {v.data(), s}; }
  dc::view<float> m(bench::aligned_vector<float> &v) const { return {v.data(), s}; }
};

// The ready GRU cell (kernel/cells.hpp: sparse partials on the host) beside its formula with
// dense duals, apply + vjp: 7 inputs, 1 output.
constexpr auto gru_dense =
    dc::kernel([](auto xr, auto xz, auto xn, auto hr, auto hz, auto hn, auto h) {
      auto r = dc::sigmoid(xr + hr);
      auto z = dc::sigmoid(xz + hz);
      auto n = dc::tanh(xn + r * hn);
      return n + z * (h - n);
    });
struct gru_arrays {
  dc::shape s;
  bench::aligned_vector<float> in[7], h, hbar, xbar[7];
  explicit gru_arrays(dc::shape s_) : s(s_) {
    std::mt19937 gen(43);
    std::uniform_real_distribution<float> u(-2.f, 2.f);
    auto const n = std::size_t(s.size());
    for (auto *v : {&in[0], &in[1], &in[2], &in[3], &in[4], &in[5], &in[6], &hbar})
      for (std::size_t j = 0; j < n; ++j)
        v->push_back(u(gen));
    h.assign(n, 0.f);
    for (auto &v : xbar)
      v.assign(n, 0.f);
  }
};
template <class K> void gru_vjp(dc::cpu ex, K const &k, gru_arrays &a) {
  auto c = [&](bench::aligned_vector<float> const &v) {
    return dc::view<const float>(v.data(), a.s);
  };
  auto m = [&](bench::aligned_vector<float> &v) { return dc::view<float>(v.data(), a.s); };
  dc::apply(ex, k, dc::out(m(a.h)), c(a.in[0]), c(a.in[1]), c(a.in[2]), c(a.in[3]), c(a.in[4]),
            c(a.in[5]), c(a.in[6]));
  dc::vjp(
      ex, k,
      dc::out(m(a.xbar[0]), m(a.xbar[1]), m(a.xbar[2]), m(a.xbar[3]), m(a.xbar[4]), m(a.xbar[5]),
              m(a.xbar[6])),
      dc::in(c(a.in[0]), c(a.in[1]), c(a.in[2]), c(a.in[3]), c(a.in[4]), c(a.in[5]), c(a.in[6])),
      dc::in(c(a.hbar)));
}

template <class K> void fused_vjp(dc::cpu ex, K const &k, arrays &a) {
  dc::apply(ex, k, dc::out(a.m(a.h), a.m(a.c2)), a.c(a.in[0]), a.c(a.in[1]), a.c(a.in[2]),
            a.c(a.in[3]), a.c(a.in[4]));
  dc::vjp(ex, k,
          dc::out(a.m(a.xbar[0]), a.m(a.xbar[1]), a.m(a.xbar[2]), a.m(a.xbar[3]), a.m(a.xbar[4])),
          dc::in(a.c(a.in[0]), a.c(a.in[1]), a.c(a.in[2]), a.c(a.in[3]), a.c(a.in[4])),
          dc::in(a.c(a.hbar), a.c(a.c2bar)));
}
template <class K> void fused_value_vjp(dc::cpu ex, K const &k, arrays &a) {
  dc::value_and_vjp(
      ex, k, dc::out(a.m(a.h), a.m(a.c2)),
      dc::out(a.m(a.xbar[0]), a.m(a.xbar[1]), a.m(a.xbar[2]), a.m(a.xbar[3]), a.m(a.xbar[4])),
      dc::in(a.c(a.in[0]), a.c(a.in[1]), a.c(a.in[2]), a.c(a.in[3]), a.c(a.in[4])),
      dc::in(a.c(a.hbar), a.c(a.c2bar)));
}

// bench/lstm_cell.cpp's hand-written loop: values, then a backward loop recomputing activations
// (hand_simd). Two variants of its backward loop answer where the fused VJP's time goes:
// Accurate takes the kernel's derivatives where a gate saturates (dual sigmoid and tanh, math/
// dual.hpp: s (1 - s) with 1 - s as e s for x >= 0, and 1 - t^2 as 4 e / (1 + e)^2 =
// e (1 + |t|)^2 with e = exp(-2 |x|), which costs an exp more per tanh); Forward computes the
// partials of c2 and h with respect to each input first and contracts them with the cotangents
// after, as sparse forward mode does (issue 41 item 2: a reverse sweep against sparse forward, by
// hand).
template <bool Accurate, bool Forward> void hand_loop(int threads, arrays &a) {
  using B = dc::batch<float, dc::native_width<float>>;
  constexpr long W = B::size;
  const long n = a.n; // a multiple of W at every size used here
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
  // d sigmoid / dx and d tanh / dx at x, from the activation s or t
  auto dsig = [](B x, B s) {
    if constexpr (Accurate)
      return s * dc::select(x >= 0.0f, dc::exp(-x) * s, 1.0f - s);
    else
      return s * (1.0f - s);
  };
  auto dtanh = [](B x, B t) {
    if constexpr (Accurate) {
      B u = 1.0f + dc::abs(t);
      return dc::exp(-2.0f * dc::abs(x)) * (u * u);
    } else {
      return 1.0f - t * t;
    }
  };
#pragma omp parallel for schedule(static) num_threads(threads)
  for (long e = 0; e < n; e += W) {
    B xi = B::load(pi + e), xf = B::load(pf + e), xg = B::load(pg + e), xo = B::load(po + e);
    B si = dc::sigmoid(xi), sf = dc::sigmoid(xf), tg = dc::tanh(xg), so = dc::sigmoid(xo);
    B c = B::load(pc + e);
    B c2 = sf * c + si * tg;
    B tc = dc::tanh(c2);
    B hb = B::load(a.hbar.data() + e), cb = B::load(a.c2bar.data() + e);
    B di = dsig(xi, si), df = dsig(xf, sf), dg = dtanh(xg, tg), dc2 = dtanh(c2, tc),
      dout = dsig(xo, so);
    if constexpr (Forward) { // each output's partials, then the contraction
      B c2_i = tg * di, c2_f = c * df, c2_g = si * dg, c2_c = sf;
      B sd = so * dc2;
      B h_i = sd * c2_i, h_f = sd * c2_f, h_g = sd * c2_g, h_o = tc * dout, h_c = sd * c2_c;
      (hb * h_i + cb * c2_i).store(a.xbar[0].data() + e);
      (hb * h_f + cb * c2_f).store(a.xbar[1].data() + e);
      (hb * h_g + cb * c2_g).store(a.xbar[2].data() + e);
      (hb * h_o).store(a.xbar[3].data() + e);
      (hb * h_c + cb * c2_c).store(a.xbar[4].data() + e);
    } else { // reverse: the cotangent of c2 first
      B gc2 = cb + hb * so * dc2;
      (gc2 * tg * di).store(a.xbar[0].data() + e);
      (gc2 * c * df).store(a.xbar[1].data() + e);
      (gc2 * si * dg).store(a.xbar[2].data() + e);
      (hb * tc * dout).store(a.xbar[3].data() + e);
      (gc2 * sf).store(a.xbar[4].data() + e);
    }
  }
}

} // namespace

int main(int argc, char **argv) {
  bench::options const o = bench::parse(argc, argv, 31, 5);
  int const threads = o.threads;
  dc::cpu ex{threads};
  std::vector<std::pair<std::string, std::function<void(arrays &)>>> const variants = {
      {"dense_vjp", [&](arrays &a) { fused_vjp(ex, lstm, a); }},
      {"sparse_vjp", [&](arrays &a) { fused_vjp(ex, lstm_sparse, a); }},
      {"dense_value_vjp", [&](arrays &a) { fused_value_vjp(ex, lstm, a); }},
      {"sparse_value_vjp", [&](arrays &a) { fused_value_vjp(ex, lstm_sparse, a); }},
      {"hand_simd", [&](arrays &a) { hand_loop<false, false>(threads, a); }},
      {"hand_accurate", [&](arrays &a) { hand_loop<true, false>(threads, a); }},
      {"hand_forward", [&](arrays &a) { hand_loop<false, true>(threads, a); }}};
  if (!o.only.empty()) {
    arrays a(256, 256);
    if (o.only == "none") // the setup alone, to subtract
      return 0;
    for (auto const &[name, run] : variants)
      if (name == o.only) {
        run(a);
        run(a);
        return 0;
      }
    std::fprintf(stderr, "sparse_partials: no variant %s\n", o.only.c_str());
    return 2;
  }
  std::vector<std::pair<long, long>> sizes = {{1024, 1024}, {4096, 1024}};
  if (o.quick)
    sizes = {{256, 256}};
  long const copy_n = 64L << 20;
  std::vector<float> src(std::size_t(copy_n), 1.0f), dst(std::size_t(copy_n), 0.0f);
  auto copy = [&] {
    float const *s = src.data();
    float *d = dst.data();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long e = 0; e < copy_n; ++e)
      d[e] = s[e];
  };
  std::printf("benchmark,variant,size,threads,median_ms,ratio_to_dense,ratio_to_hand,"
              "ratio_to_floor,wins_vs_dense,reps,p_vs_dense\n");
  for (auto [B, H] : sizes) {
    arrays a(B, H);
    std::vector<std::function<void()>> runs;
    for (auto const &v : variants)
      runs.emplace_back([&a, &v] { v.second(a); });
    gru_arrays ga(a.s);
    std::size_t const gru_at = runs.size();
    runs.emplace_back([&] { gru_vjp(ex, gru_dense, ga); });
    runs.emplace_back([&] { gru_vjp(ex, dc::cells::gru, ga); });
    runs.emplace_back(copy);
    auto t = bench::interleaved(runs, o.reps);
    std::vector<double> const &copy_t = t.back();
    // The floors per repetition: 19 (two passes) or 14 (one pass) arrays at that repetition's
    // copy bandwidth (a copy moves 2 arrays of copy_n floats).
    // The GRU's apply + vjp: 23 arrays (7 + 1, then 7 + 1 read and 7 written).
    std::vector<double> floor2(copy_t.size()), floor1(copy_t.size()), floor_gru(copy_t.size());
    for (std::size_t r = 0; r < copy_t.size(); ++r) {
      double const ms_per_float = copy_t[r] / (2.0 * double(copy_n));
      floor2[r] = 19.0 * double(a.n) * ms_per_float;
      floor1[r] = 14.0 * double(a.n) * ms_per_float;
      floor_gru[r] = 23.0 * double(a.n) * ms_per_float;
    }
    std::string const size = std::to_string(B) + "x" + std::to_string(H);
    auto row = [&](std::string const &name, std::vector<double> const &tv,
                   std::vector<double> const *dense, std::vector<double> const *floor) {
      double rd = dense ? bench::paired_ratio(tv, *dense) : std::nan("");
      bool const gru = name.rfind("gru", 0) == 0; // (no hand-written GRU loop)
      double rh = gru ? std::nan("") : bench::paired_ratio(tv, t[4]);
      double rf = floor ? bench::paired_ratio(tv, *floor) : std::nan("");
      bench::paired c = dense ? bench::compare(tv, *dense) : bench::paired{0, 0, 0, std::nan("")};
      std::printf("sparse_partials,%s,%s,%d,%.3f,%.3f,%.3f,%.3f,%ld,%d,%.2g\n", name.c_str(),
                  size.c_str(), threads, bench::median(tv), rd, rh, rf, c.wins, o.reps, c.p);
      std::fflush(stdout);
    };
    row("floor_at_copy_bw", floor2, nullptr, nullptr);
    row("floor_one_pass_at_copy_bw", floor1, nullptr, nullptr);
    row("dense_vjp", t[0], &t[0], &floor2);
    row("sparse_vjp", t[1], &t[0], &floor2);
    row("dense_value_vjp", t[2], &t[2], &floor1);
    row("sparse_value_vjp", t[3], &t[2], &floor1);
    row("hand_simd", t[4], &t[0], &floor2);
    row("hand_accurate", t[5], &t[0], &floor2);
    row("hand_forward", t[6], &t[0], &floor2);
    row("gru_dense_vjp", t[gru_at], &t[gru_at], &floor_gru);
    row("gru_sparse_vjp", t[gru_at + 1], &t[gru_at], &floor_gru);
  }
}

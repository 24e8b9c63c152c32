// bench/lstm_cell_16.cpp: the LSTM cell forward + VJP with its arrays stored in bfloat16 or half
// (computed in float, rounded once on store) against float32, interleaved in one run.
//
// Modes: value_and_vjp (one pass: 7 arrays read, 7 written), apply_vjp (apply, then vjp: 19
// arrays), tape (lstm_cell on tape variables, then backward with the cotangents as seeds; its
// bytes and floor are apply_vjp's: over 16 bits the 16-bit node, ops/fused/float16_node.hpp) and
// tape_store (the same under policy::store: over 16 bits the 16-bit store node, which keeps float
// partials; its bytes are apply_vjp's, the partials not counted).
// Storage: float32; bfloat16; half; bf16_mixed (bfloat16 gates, float cell state: c, c',
// its cotangent and the cell state's cotangent in float -- a float cell state beside 16-bit gates).
// Each row: the median time, the bytes that mode and storage must move, the floor (those bytes at
// the copy bandwidth of a 256 MiB float copy, measured first), GB/s, and the paired ratio to
// float32 of the same mode with the sign test's p-value that the variant is no faster.
// Output: CSV benchmark,mode,storage,size,threads,median_ms,bytes,floor_ms,gb_per_s,
//                ratio_to_float32,wins,reps,p_no_faster
// Then a tape_memory row per tape mode and storage, in the same columns: bytes = the storages the
// tape's nodes keep for backward after the forward call (tape::saved_bytes, the inputs' own
// storage included), wins = its node count, reps = its arena bytes (bookkeeping).
//   lstm_cell_16 [--quick] [--threads N] [--reps N]
#include "common.hpp"

#include <dualcast/autodiff.hpp>
#include <dualcast/dualcast.hpp>

#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace dc = dualcast;

namespace {

// Arrays of the cell in gate storage G and cell storage C.
template <class G, class C> struct cell_arrays {
  dc::shape s;
  bench::aligned_vector<G> gate[4], h, hbar, gbar[4];
  bench::aligned_vector<C> c, c2, cbar, xbar_c;
  explicit cell_arrays(dc::shape s_) : s(s_) {
    auto const n = std::size_t(s.size());
    std::mt19937 gen(42);
    std::uniform_real_distribution<float> u(-2.f, 2.f);
    for (auto &v : gate)
      for (std::size_t j = 0; j < n; ++j)
        v.push_back(G(u(gen)));
    for (std::size_t j = 0; j < n; ++j) {
      c.push_back(C(u(gen)));
      hbar.push_back(G(u(gen)));
      cbar.push_back(C(u(gen)));
    }
    h.assign(n, G(0.f)), c2.assign(n, C(0.f)), xbar_c.assign(n, C(0.f));
    for (auto &v : gbar)
      v.assign(n, G(0.f));
  }
  template <class E> dc::view<E> m(bench::aligned_vector<E> &v) { return {v.data(), s}; }
  template <class E> dc::view<E const> r(bench::aligned_vector<E> const &v) {
    return {v.data(), s};
  }
  auto inputs() { return dc::in(r(gate[0]), r(gate[1]), r(gate[2]), r(gate[3]), r(c)); }
  void value_and_vjp(dc::cpu ex) {
    dc::value_and_vjp(ex, dc::cells::lstm, dc::out(m(h), m(c2)),
                      dc::out(m(gbar[0]), m(gbar[1]), m(gbar[2]), m(gbar[3]), m(xbar_c)), inputs(),
                      dc::in(r(hbar), r(cbar)));
  }
  void apply_vjp(dc::cpu ex) {
    dc::apply(ex, dc::cells::lstm, dc::out(m(h), m(c2)), r(gate[0]), r(gate[1]), r(gate[2]),
              r(gate[3]), r(c));
    dc::vjp(ex, dc::cells::lstm, dc::out(m(gbar[0]), m(gbar[1]), m(gbar[2]), m(gbar[3]), m(xbar_c)),
            inputs(), dc::in(r(hbar), r(cbar)));
  }
  // The cell on the tape: a fresh tape, the gates and c as variables, lstm_cell, backward seeded
  // with hbar / cbar (in the outputs' type: float where c is float, else G). The tensors are made
  // once (prepare_tape): the timed part is the tape's work. The tape runs on the ambient CPU
  // executor, whose thread count is OpenMP's (bench::parse sets it from --threads).
  template <class E, class S>
  static dc::tensor<E> as_tensor(dc::shape s, bench::aligned_vector<S> const &x) {
    std::vector<E> v;
    for (S e : x)
      v.push_back(E(float(e)));
    return dc::tensor<E>::from(s, v);
  }
  using out_t = std::conditional_t<std::is_same_v<C, float>, float, G>;
  std::vector<dc::tensor<G>> tg;
  dc::tensor<C> tc;
  dc::tensor<out_t> th, tcb;
  void prepare_tape() {
    for (auto const &v : gate)
      tg.push_back(as_tensor<G>(s, v));
    tc = as_tensor<C>(s, c), th = as_tensor<out_t>(s, hbar), tcb = as_tensor<out_t>(s, cbar);
  }
  // (P: policy::automatic, the default; policy::store: over 16 bits the operands through cast
  // nodes into the float node, which keeps float partials -- the path before the 16-bit node)
  template <class P = dc::policy::tag<dc::policy_kind::automatic>> void tape(P pol = {}) {
    dc::tape tp;
    auto [h, c2] = dc::lstm_cell(pol, tp.variable(tg[0]), tp.variable(tg[1]), tp.variable(tg[2]),
                                 tp.variable(tg[3]), tp.variable(tc));
    tp.backward(std::vector<dc::var<out_t>>{h, c2}, std::vector<dc::tensor<out_t>>{th, tcb});
  }
  // The tape's memory after the forward call: its node count, the bytes of the storages its nodes
  // keep for backward (tape::saved_bytes: the inputs' own storage counted too) and its arena.
  template <class P>
  void memory(P pol, char const *mode, char const *storage, std::string const &size, int threads) {
    dc::tape tp;
    auto [h, c2] = dc::lstm_cell(pol, tp.variable(tg[0]), tp.variable(tg[1]), tp.variable(tg[2]),
                                 tp.variable(tg[3]), tp.variable(tc));
    std::printf("tape_memory,%s,%s,%s,%d,0,%zu,0,0,0,%zu,%zu,0\n", mode, storage, size.c_str(),
                threads, tp.saved_bytes(), tp.node_count(), tp.node_memory_bytes());
  }
  // Bytes moved: one pass reads gates, c, hbar, cbar and writes h, c2, 4 gbar, xbar_c; apply + vjp
  // also reads the inputs a second time and writes the values once.
  static double bytes(bool one_pass, double n) {
    double const g = sizeof(G), cs = sizeof(C);
    double const reads = 4 * g + cs + g + cs, writes = g + cs + 4 * g + cs;
    return n * (one_pass ? reads + writes : reads + writes + 4 * g + cs);
  }
};

double copy_ms(int threads, int reps, long n) {
  bench::aligned_vector<float> src(std::size_t(n), 1.0f), dst(std::size_t(n), 0.0f);
  float const *s = src.data();
  float *d = dst.data();
  auto run = [&] {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long e = 0; e < n; ++e)
      d[e] = s[e];
  };
  run();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    run();
    t.push_back(bench::ms_since(t0));
  }
  return bench::median(t);
}

} // namespace

int main(int argc, char **argv) {
  bench::options const o = bench::parse(argc, argv, 31, 5);
  int const threads = o.threads, reps = o.reps;
  long B = 4096, H = 1024;
  if (o.quick)
    B = 256, H = 256;
  dc::shape const s{B, H};
  double const n = double(B * H);
  std::printf("benchmark,mode,storage,size,threads,median_ms,bytes,floor_ms,gb_per_s,"
              "ratio_to_float32,wins,reps,p_no_faster\n");
  long const copy_n = 64L << 20;
  double const copy = copy_ms(threads, reps, copy_n);
  double const copy_gbps = 8.0 * double(copy_n) / copy / 1e6;
  std::printf("copy,copy_256MiB,float32,%ld,%d,%.3f,%.0f,%.3f,%.2f,1,0,0,1\n", copy_n, threads,
              copy, 8.0 * double(copy_n), copy, copy_gbps);

  dc::cpu const ex{threads};
  cell_arrays<float, float> f32(s);
  cell_arrays<dc::bfloat16, dc::bfloat16> bf16(s);
  cell_arrays<dc::half, dc::half> f16(s);
  cell_arrays<dc::bfloat16, float> mixed(s);
  char const *storages[] = {"float32", "bfloat16", "half", "bf16_mixed"};
  double const bytes[4][4] = {
      {f32.bytes(true, n), bf16.bytes(true, n), f16.bytes(true, n), mixed.bytes(true, n)},
      {f32.bytes(false, n), bf16.bytes(false, n), f16.bytes(false, n), mixed.bytes(false, n)},
      {f32.bytes(false, n), bf16.bytes(false, n), f16.bytes(false, n), mixed.bytes(false, n)},
      {f32.bytes(false, n), bf16.bytes(false, n), f16.bytes(false, n), mixed.bytes(false, n)}};
  char const *modes[] = {"value_and_vjp", "apply_vjp", "tape", "tape_store"};
  f32.prepare_tape(), bf16.prepare_tape(), f16.prepare_tape(), mixed.prepare_tape();
  std::string const size = std::to_string(B) + "x" + std::to_string(H);
  for (int mode = 0; mode < 4; ++mode) {
    auto each = [&](auto &a) {
      return [&a, &ex, mode] {
        if (mode == 0)
          a.value_and_vjp(ex);
        else if (mode == 1)
          a.apply_vjp(ex);
        else if (mode == 2)
          a.tape();
        else
          a.tape(dc::policy::store);
      };
    };
    std::vector<std::function<void()>> runs = {each(f32), each(bf16), each(f16), each(mixed)};
    auto t = bench::interleaved(runs, reps);
    for (int v = 0; v < 4; ++v) {
      double const ms = bench::median(t[std::size_t(v)]);
      auto const cmp = bench::compare(t[std::size_t(v)], t[0]);
      std::printf("lstm_cell_16,%s,%s,%s,%d,%.3f,%.0f,%.3f,%.2f,%.3f,%ld,%ld,%.3g\n", modes[mode],
                  storages[v], size.c_str(), threads, ms, bytes[mode][v],
                  bytes[mode][v] / copy_gbps / 1e6, bytes[mode][v] / ms / 1e6,
                  bench::paired_ratio(t[std::size_t(v)], t[0]), cmp.wins, cmp.n, cmp.p);
      std::fflush(stdout);
    }
  }
  auto mem = [&](auto &a, char const *storage) {
    a.memory(dc::policy::automatic, "tape", storage, size, threads);
    a.memory(dc::policy::store, "tape_store", storage, size, threads);
  };
  mem(f32, "float32"), mem(bf16, "bfloat16"), mem(f16, "half"), mem(mixed, "bf16_mixed");
}

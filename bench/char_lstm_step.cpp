// bench/char_lstm_step.cpp: one training step of the headline demo's character-level LSTM
// (examples/models/char_lstm.hpp: forward over `seq` characters, backward, Adam), float32, with
// the fused LSTM cell (one fused node per step) against the unfused tape (every operation of the
// cell its own node) on the same model. The peers (bench/peers/char_lstm.py) build the same model
// in PyTorch eager and JAX jit.
//
// Size: batch 64, hidden 512, 32 characters per window (--quick: 16 x 64 x 8); vocabulary from
// the demo's text (30 characters).
// Output: CSV benchmark,variant,size,threads,median_ms,p10_ms,p90_ms,added_mib,
// saving_vs_unfused_ms,wins,sign_test_p. added_mib: the memory one cold step adds over its inputs
// (measured in a fresh process, bench::memory_probe). The variants run interleaved; fused is
// compared with unfused in the same repetitions (paired: median saving, repetitions won,
// one-sided sign test).
//   char_lstm_step [--quick] [--threads N] [--reps N] [--memory fused|unfused]
#include "common.hpp"
#include "models/char_lstm.hpp"

#include <dualcast/autodiff.hpp>

#include <cstdio>
#include <random>
#include <string>

namespace dc = dualcast;

namespace {

struct sizes {
  int batch, hidden, seq;
};

// A model, its optimizer and a fixed batch: one training step per call of step().
struct trainer {
  dc::tape tp;
  char_lstm::vocabulary voc{char_lstm::corpus};
  char_lstm::model<float> m;
  dc::adam<float> opt;
  char_lstm::window_batch wb;
  trainer(sizes s)
      : m(tp, voc.size(), s.hidden, 42), opt(m.ps, {.lr = 1e-3}), wb([&] {
          std::mt19937_64 rng(1);
          return char_lstm::sample_batch(voc, s.batch, s.seq, rng);
        }()) {}
  double step(bool fused) {
    tp.fused = fused;
    auto loss = char_lstm::loss_of(tp, m, wb);
    tp.backward(loss);
    opt.step();
    tp.zero_grad();
    tp.clear();
    return loss.item();
  }
};

} // namespace

int main(int argc, char **argv) {
  bench::options const o = bench::parse(argc, argv, 21, 3);
  sizes const s = o.quick ? sizes{16, 64, 8} : sizes{64, 512, 32};
  std::string const size =
      std::to_string(s.batch) + "x" + std::to_string(s.hidden) + "x" + std::to_string(s.seq);
  char const *names[] = {"dualcast_fused", "dualcast_unfused"};
  if (!o.memory.empty()) { // one cold step in this fresh process
    bool const fused = o.memory == "fused";
    trainer tr(s);
    bench::memory_probe probe;
    tr.step(fused);
    std::printf("%.1f\n", probe.added_mib());
    return 0;
  }
  double mib[2]; // each cold, in a fresh process
  for (int v = 0; v < 2; ++v)
    mib[v] = bench::memory_in_fresh_process(o.threads, v == 0 ? "fused" : "unfused",
                                            o.quick ? "--quick" : "");
  trainer tr(s);
  double const l0 = tr.step(true), l1 = tr.step(false); // warm-up; the loss must fall
  if (!(l1 < l0 + 1e-3)) {
    std::fprintf(stderr, "char_lstm_step: the loss did not fall (%g -> %g)\n", l0, l1);
    return 1;
  }
  auto t = bench::interleaved(2, o.reps, [&](int v) { tr.step(v == 0); });
  auto const pair = bench::compare(t[0], t[1]);
  std::printf("benchmark,variant,size,threads,median_ms,p10_ms,p90_ms,added_mib,"
              "saving_vs_unfused_ms,wins,sign_test_p\n");
  for (int v = 0; v < 2; ++v) {
    std::printf("char_lstm_step,%s,%s,%d,%.3f,%.3f,%.3f,%.1f,", names[v], size.c_str(), o.threads,
                bench::median(t[std::size_t(v)]), bench::quantile(t[std::size_t(v)], 0.1),
                bench::quantile(t[std::size_t(v)], 0.9), mib[v]);
    if (v == 0)
      std::printf("%.3f,%ld/%ld,%.2g\n", pair.median_saving_ms, pair.wins, pair.n, pair.p);
    else
      std::printf("0,-,-\n");
  }
  return 0;
}

// The headline demo: a character-level LSTM language model trained with dualcast's tape.
//
// Model (examples/models/char_lstm.hpp): each character picks a row of W_x (4H gate
// pre-activations: an embedding straight into gate space), h W_h + b is added, and the ready fused
// LSTM cell (dualcast::lstm_cell: ONE fused kernel with mixed-mode gradients) gives the next
// (h, c); the hidden states of all steps go through one matmul to logits, log_softmax and the
// negative log-likelihood of the next character. Adam updates the parameters in place. The text
// is embedded in the model's header (no download).
//
// Prints: the loss falling, a sampled line before and after training, a gradient check of a few
// parameters against central differences (double precision, a small model), and the time per
// training step with the fused cells against the unfused tape on the same model.
//
//   char_lstm [steps = 300] [hidden = 128] [batch = 32] [seq = 32] [precision = float]
// precision bf16 or half trains the LSTM in 16 bits on float master weights (loss_of_16;
// half under dualcast::loss_scaler): docs/mixed-precision.md.
// Exit status non-zero when the loss did not fall or the gradient check failed.
#include "models/char_lstm.hpp"

#include <dualcast/autodiff.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace dc = dualcast;

namespace {

using clock_type = std::chrono::steady_clock;
using char_lstm::corpus;
using char_lstm::loss_of;
using char_lstm::model;
using char_lstm::sample_batch;
using char_lstm::vocabulary;
using char_lstm::window_batch;

// A line of text sampled from the model (temperature 0.7), starting from `seed_text`.
// (On the model's tape, recording nothing.)
template <class T>
std::string sample_line(dc::tape &tp, model<T> const &m, vocabulary const &voc,
                        std::string const &seed_text, int length, std::uint64_t seed) {
  dc::no_grad off(tp);
  auto h = tp.constant(dc::tensor<T>::zeros({1, m.hidden}));
  auto c = tp.constant(dc::tensor<T>::zeros({1, m.hidden}));
  std::mt19937_64 rng(seed);
  std::string out = seed_text;
  int next = voc(seed_text[0]);
  for (int k = 0; k < int(seed_text.size()) + length - 1; ++k) {
    auto gates = dc::index_select(m.wx, 0, {dc::index_t(next)}) + dc::matmul(h, m.wh) + m.b;
    auto [h2, c2] = dc::lstm_cell(gates, c);
    h = h2;
    c = c2;
    if (k + 1 < int(seed_text.size())) {
      next = voc(seed_text[std::size_t(k + 1)]);
      continue;
    }
    auto p =
        dc::softmax(dc::var<T>(dc::matmul(h, m.wy) + m.by) * T(1 / 0.7), 1).value().to_vector();
    std::discrete_distribution<int> pick(p.begin(), p.end());
    next = pick(rng);
    out.push_back(voc.chars[std::size_t(next)]);
  }
  return out;
}
// Central differences of the loss for a few parameter entries of a small double model.
bool gradient_check(vocabulary const &voc) {
  dc::tape tp;
  model<double> m(tp, voc.size(), 8, 7);
  std::mt19937_64 rng(3);
  window_batch wb = sample_batch(voc, 3, 5, rng);
  tp.backward(loss_of(tp, m, wb));
  double worst = 0;
  std::printf("gradient check (double, hidden 8, 3 x 5 characters), tape vs central "
              "differences:\n");
  for (auto const &[name, v, k] : {std::tuple{"wx", m.wx, 17}, std::tuple{"wh", m.wh, 5},
                                   std::tuple{"b", m.b, 9}, std::tuple{"wy", m.wy, 11}}) {
    double const g = v.grad().to_vector()[std::size_t(k)];
    double *p = v.value().raw_data() + k;
    double const keep = *p, h = 1e-6;
    auto loss_at = [&](double x) {
      *p = x;
      dc::no_grad off(tp);
      return loss_of(tp, m, wb).item();
    };
    double const fd = (loss_at(keep + h) - loss_at(keep - h)) / (2 * h);
    *p = keep;
    // Central differences with h = 1e-6 are good to about 1e-10 here: relative error where the
    // derivative is not tiny, absolute below.
    double const err = std::abs(g - fd) / std::max(1e-4, std::abs(fd));
    worst = std::max(worst, err);
    std::printf("  d loss / d %s[%d] = %+.9f, central difference %+.9f (relative error %.1e)\n",
                name, k, g, fd, err);
  }
  return worst < 1e-5;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  int const steps = argc > 1 ? std::atoi(argv[1]) : 300;
  dc::index_t const hidden = argc > 2 ? std::atol(argv[2]) : 128;
  int const batch = argc > 3 ? std::atoi(argv[3]) : 32;
  int const seq = argc > 4 ? std::atoi(argv[4]) : 32;
  std::string const precision = argc > 5 ? argv[5] : "float";
  if (precision != "float" && precision != "bf16" && precision != "half") {
    std::fprintf(stderr, "char_lstm: precision is float, bf16 or half (got %s)\n",
                 precision.c_str());
    return 2;
  }
  vocabulary const voc(corpus);
  std::printf("char-LSTM: %zu characters of text, vocabulary %d, hidden %ld, batch %d x %d "
              "characters, %d Adam steps, LSTM in %s\n",
              corpus.size(), voc.size(), long(hidden), batch, seq, steps, precision.c_str());

  dc::tape tp;
  model<float> m(tp, voc.size(), hidden, 42);
  dc::adam opt(m.ps, {.lr = 1e-2});
  // (16 bits: half's gradients need the loss scaled; bfloat16 has float's range)
  dc::loss_scaler<float> scaler(m.ps, {.enabled = precision == "half"});
  std::mt19937_64 rng(1);
  std::printf("sample before training: \"%s\"\n", sample_line(tp, m, voc, "the ", 56, 5).c_str());

  auto const start = clock_type::now();
  double first = 0, last = 0, smooth = 0;
  for (int it = 1; it <= steps; ++it) {
    window_batch wb = sample_batch(voc, batch, seq, rng);
    auto loss = precision == "bf16"   ? char_lstm::loss_of_16<dc::bfloat16>(tp, m, wb)
                : precision == "half" ? char_lstm::loss_of_16<dc::half>(tp, m, wb)
                                      : loss_of(tp, m, wb);
    scaler.backward(tp, loss);
    scaler.step(opt);
    tp.zero_grad();
    tp.clear();
    double const l = loss.item();
    smooth = it == 1 ? l : 0.9 * smooth + 0.1 * l;
    if (it == 1)
      first = l;
    last = smooth;
    if (it % std::max(1, steps / 10) == 0 || it == steps)
      std::printf("step %4d  loss %.3f (smoothed %.3f)  %.1f s\n", it, l, smooth,
                  std::chrono::duration<double>(clock_type::now() - start).count());
  }
  std::printf("sample after training:  \"%s\"\n", sample_line(tp, m, voc, "the ", 56, 5).c_str());

  bool const grads_ok = gradient_check(voc);

  // Time per training step (forward + backward + Adam), fused cells vs the unfused tape (every
  // operation of the cell its own node), interleaved.
  std::vector<double> fused_ms, unfused_ms;
  for (int rep = 0; rep < 6; ++rep)
    for (int mode = 0; mode < 2; ++mode) {
      tp.fused = mode == 0;
      window_batch wb = sample_batch(voc, batch, seq, rng);
      auto const t0 = clock_type::now();
      auto loss = loss_of(tp, m, wb);
      tp.backward(loss);
      opt.step();
      tp.zero_grad();
      tp.clear();
      double const ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
      (mode == 0 ? fused_ms : unfused_ms).push_back(ms);
    }
  tp.fused = true;
  std::printf("time per training step (median of 6, interleaved): fused cells %.1f ms, unfused "
              "tape %.1f ms (%.2fx)\n",
              median(fused_ms), median(unfused_ms), median(unfused_ms) / median(fused_ms));

  bool const fell = last < first * 0.9;
  std::printf("loss %.3f -> %.3f: %s; gradient check: %s\n", first, last,
              fell ? "falling" : "NOT FALLING", grads_ok ? "ok" : "MISMATCH");
  return fell && grads_ok ? 0 : 1;
}

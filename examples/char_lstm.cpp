// The headline demo: a character-level LSTM language model trained with dualcast's tape.
//
// Model: each character picks a row of W_x (4H gate pre-activations: an embedding straight into
// gate space), h W_h + b is added, and the ready fused LSTM cell (dualcast::lstm_cell: ONE fused
// kernel with mixed-mode gradients) gives the next (h, c); the hidden states of all steps go
// through one matmul to logits, log_softmax and the negative log-likelihood of the next
// character. Adam updates the parameters in place. The text is embedded below (no download).
//
// Prints: the loss falling, a sampled line before and after training, a gradient check of a few
// parameters against central differences (double precision, a small model), and the time per
// training step with the fused cells against the unfused tape on the same model.
//
//   char_lstm [steps = 300] [hidden = 128] [batch = 32] [seq = 32]
// Exit status non-zero when the loss did not fall or the gradient check failed.
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

constexpr std::string_view corpus =
    "the little boat left the harbour at dawn. the sea was calm and the sky was grey. "
    "the old sailor held the rope and watched the water. the boy sat at the front of the "
    "boat and looked for fish. the wind came from the west and the sail filled. "
    "the sailor said: the sea is kind today, but the sea is never kind for long. "
    "the boy said: then we will be home before the rain. the sailor laughed and said: "
    "we will see. the boat went out past the rocks and past the light on the hill. "
    "the water turned from grey to green and from green to blue. the boy saw a fish, "
    "then two fish, then a great many fish. the sailor let out the net and the net "
    "went down into the blue water. they waited. the sun came out and the sea was "
    "bright. the boy said: the net is heavy now. the sailor said: pull, and pull "
    "again. they pulled the net into the boat and the boat was full of fish. the wind "
    "turned and came from the north. the sky went dark and the first rain fell on the "
    "sail. the sailor said: now we go home. the boy held the rope and the sailor held "
    "the wheel, and the little boat ran before the wind, past the light on the hill "
    "and past the rocks, into the harbour, as the rain came down on the sea. ";

using clock_type = std::chrono::steady_clock;

struct vocabulary {
  std::string chars;
  std::array<int, 256> id{};
  explicit vocabulary(std::string_view text) {
    for (char ch : text)
      if (chars.find(ch) == std::string::npos)
        chars.push_back(ch);
    std::sort(chars.begin(), chars.end());
    for (std::size_t k = 0; k < chars.size(); ++k)
      id[static_cast<unsigned char>(chars[k])] = int(k);
  }
  int size() const { return int(chars.size()); }
  int operator()(char ch) const { return id[static_cast<unsigned char>(ch)]; }
};

// The model's parameters (tape variables that live across iterations) and its sizes.
template <class T> struct model {
  dc::index_t vocab, hidden;
  dc::parameters<T> ps;
  dc::var<T> wx, wh, b, wy, by;
  model(dc::tape &tp, dc::index_t v, dc::index_t h, std::uint64_t seed) : vocab(v), hidden(h) {
    wx = ps.add("wx", tp.variable(dc::normal<T>({v, 4 * h}, T(0), T(0.1), seed)));
    wh = ps.add("wh", tp.variable(dc::xavier_uniform<T>({h, 4 * h}, seed + 1)));
    // Forget-gate bias 1 (gate order i, f, g, o), as is usual for LSTMs.
    std::vector<T> bias(std::size_t(4 * h), T(0));
    std::fill(bias.begin() + h, bias.begin() + 2 * h, T(1));
    b = ps.add("b", tp.variable(dc::tensor<T>::from({4 * h}, bias)));
    wy = ps.add("wy", tp.variable(dc::xavier_uniform<T>({h, v}, seed + 2)));
    by = ps.add("by", tp.variable(dc::tensor<T>::zeros({v})));
  }
};

// A batch: `batch` windows of seq + 1 characters at random offsets.
struct window_batch {
  int batch, seq;
  std::vector<std::vector<dc::index_t>> inputs; // [t][row]: the character at step t
  std::vector<dc::index_t> targets;             // [t * batch + row]: the next character
};
window_batch sample_batch(vocabulary const &voc, int batch, int seq, std::mt19937_64 &rng) {
  window_batch wb{batch, seq, std::vector<std::vector<dc::index_t>>(std::size_t(seq)), {}};
  std::uniform_int_distribution<std::size_t> start(0, corpus.size() - std::size_t(seq) - 2);
  std::vector<std::size_t> at(static_cast<std::size_t>(batch));
  for (auto &a : at)
    a = start(rng);
  for (int t = 0; t < seq; ++t)
    for (int r = 0; r < batch; ++r) {
      std::size_t const p = at[std::size_t(r)] + std::size_t(t);
      wb.inputs[std::size_t(t)].push_back(voc(corpus[p]));
      wb.targets.push_back(voc(corpus[p + 1]));
    }
  return wb;
}

// The mean negative log-likelihood of the batch's next characters, recorded on m's tape.
template <class T> dc::var<T> loss_of(dc::tape &tp, model<T> const &m, window_batch const &wb) {
  dc::index_t const B = wb.batch, H = m.hidden;
  dc::var<T> h = tp.constant(dc::tensor<T>::zeros({B, H}));
  dc::var<T> c = tp.constant(dc::tensor<T>::zeros({B, H}));
  std::vector<dc::var<T>> hs;
  for (int t = 0; t < wb.seq; ++t) {
    auto gates = dc::index_select(m.wx, 0, wb.inputs[std::size_t(t)]) + dc::matmul(h, m.wh) + m.b;
    auto [h2, c2] = dc::lstm_cell(gates, c); // ONE fused node: the whole cell, mixed mode
    h = h2;
    c = c2;
    hs.push_back(h);
  }
  auto logits = dc::matmul(dc::concat(hs, 0), m.wy) + m.by; // (seq * B, V)
  auto logp = dc::log_softmax(logits, 1);
  dc::index_t const n = dc::index_t(wb.targets.size());
  auto picked = dc::gather(logp, 1, dc::index_array{dc::shape{n, 1}, wb.targets});
  return dc::sum(picked) * T(-1.0 / double(n));
}

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
  vocabulary const voc(corpus);
  std::printf("char-LSTM: %zu characters of text, vocabulary %d, hidden %ld, batch %d x %d "
              "characters, %d Adam steps\n",
              corpus.size(), voc.size(), long(hidden), batch, seq, steps);

  dc::tape tp;
  model<float> m(tp, voc.size(), hidden, 42);
  dc::adam opt(m.ps, {.lr = 1e-2});
  std::mt19937_64 rng(1);
  std::printf("sample before training: \"%s\"\n", sample_line(tp, m, voc, "the ", 56, 5).c_str());

  auto const start = clock_type::now();
  double first = 0, last = 0, smooth = 0;
  for (int it = 1; it <= steps; ++it) {
    window_batch wb = sample_batch(voc, batch, seq, rng);
    auto loss = loss_of(tp, m, wb);
    tp.backward(loss);
    opt.step();
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

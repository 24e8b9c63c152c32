// examples/models/char_lstm.hpp: the headline demo's character-level LSTM language model, written
// with dualcast's public API: the text it trains on, its vocabulary, the model's parameters,
// random windows of the text, and the loss of a batch recorded on the tape. Used by
// examples/char_lstm.cpp and bench/char_lstm_step.cpp (whose PyTorch and JAX peers,
// bench/peers/char_lstm.py, build the same model).
//
// Model: each character picks a row of W_x (4H gate pre-activations: an embedding straight into
// gate space), h W_h + b is added, and the ready fused LSTM cell (dualcast::lstm_cell: ONE fused
// kernel with mixed-mode gradients) gives the next (h, c); the hidden states of all steps go
// through one matmul to logits, log_softmax and the negative log-likelihood of the next
// character.
#pragma once

#include <dualcast/autodiff.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace char_lstm {

namespace dc = dualcast;

inline constexpr std::string_view corpus =
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
// The windows starting at `starts` (seq + 1 characters each).
inline window_batch batch_at(vocabulary const &voc, std::vector<std::size_t> const &starts,
                             int seq) {
  int const batch = int(starts.size());
  window_batch wb{batch, seq, std::vector<std::vector<dc::index_t>>(std::size_t(seq)), {}};
  for (int t = 0; t < seq; ++t)
    for (int r = 0; r < batch; ++r) {
      std::size_t const p = starts[std::size_t(r)] + std::size_t(t);
      wb.inputs[std::size_t(t)].push_back(voc(corpus[p]));
      wb.targets.push_back(voc(corpus[p + 1]));
    }
  return wb;
}
// Where `batch` random windows of seq + 1 characters start.
inline std::vector<std::size_t> random_starts(int batch, int seq, std::mt19937_64 &rng) {
  std::uniform_int_distribution<std::size_t> start(0, corpus.size() - std::size_t(seq) - 2);
  std::vector<std::size_t> at(static_cast<std::size_t>(batch));
  for (auto &a : at)
    a = start(rng);
  return at;
}
inline window_batch sample_batch(vocabulary const &voc, int batch, int seq, std::mt19937_64 &rng) {
  return batch_at(voc, random_starts(batch, seq, rng), seq);
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

// The same loss with the LSTM in 16 bits (S: bfloat16 or half; docs/mixed-precision.md): the
// float parameters (master weights) are cast to S on the tape, so their gradients come back in
// float. The embedding lookup runs on float rows (index_select takes no 16-bit variables), W_h is
// cast at each step so that its gradient is summed over the steps in float, the gates, the cell
// and the output matmul are in S, and log_softmax and the loss are in float, as under PyTorch's
// autocast. The loss is float.
template <class S>
dc::var<float> loss_of_16(dc::tape &tp, model<float> const &m, window_batch const &wb) {
  dc::index_t const B = wb.batch, H = m.hidden;
  dc::var<S> h = tp.constant(dc::tensor<S>::zeros({B, H}));
  dc::var<S> c = tp.constant(dc::tensor<S>::zeros({B, H}));
  dc::var<S> const b = dc::cast<S>(m.b);
  std::vector<dc::var<float>> hs;
  for (int t = 0; t < wb.seq; ++t) {
    auto gates = dc::cast<S>(dc::index_select(m.wx, 0, wb.inputs[std::size_t(t)])) +
                 dc::matmul(h, dc::cast<S>(m.wh)) + b;
    auto [h2, c2] = dc::lstm_cell(gates, c); // ONE fused node, computed in float
    h = h2;
    c = c2;
    hs.push_back(dc::cast<float>(h)); // (concat takes no 16-bit variables)
  }
  auto logits = dc::matmul(dc::cast<S>(dc::concat(hs, 0)), dc::cast<S>(m.wy)) + dc::cast<S>(m.by);
  auto logp = dc::log_softmax(dc::cast<float>(logits), 1);
  dc::index_t const n = dc::index_t(wb.targets.size());
  auto picked = dc::gather(logp, 1, dc::index_array{dc::shape{n, 1}, wb.targets});
  return dc::sum(picked) * float(-1.0 / double(n));
}

} // namespace char_lstm

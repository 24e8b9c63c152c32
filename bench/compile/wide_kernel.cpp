// A compile-time benchmark (bench/compile-time builds it; it is not a test): ONE kernel holding a
// whole step of a LAYERS-layer D-LSTM (ADBench's diagonal LSTM, ../shared/notes/adbench-dlstm.md)
// on tape variables of 14 elements: 2 + 10 * LAYERS inputs (the layer input, per layer its state
// h, s and 8 weight / bias vectors, and the output weight) and 2 * LAYERS + 1 outputs (per layer
// h, s; the prediction). LAYERS = 2: 22 inputs, 5 outputs; LAYERS = 4: 42 inputs, 9 outputs.
//
// MODE 0: dc::fused(dc::policy::recompute, ...)   what a user picks for a wide kernel
// MODE 1: dc::call(...)                            fused (automatic policy) or unfused by the
//                                                  tape's switch: both compiled
// MODE 2: dc::fused(dc::policy::automatic, ...)    the cost model
// MODE 3: dc::apply + dc::vjp on views             the kernel outside the tape, for reference
// SPARSE 1: the kernel with compile-time sparse partials (kernel/kernel.hpp, sparse_partials)
#include <dualcast/autodiff.hpp>
#include <dualcast/dualcast.hpp>

#include <cstdio>
#include <utility>
#include <vector>

#ifndef LAYERS
#define LAYERS 2
#endif
#ifndef MODE
#define MODE 0
#endif
#ifndef SPARSE
#define SPARSE 0
#endif

namespace dc = dualcast;

namespace {
constexpr int layers = LAYERS;
constexpr int n_in = 2 + 10 * layers, n_out = 2 * layers + 1;

template <int L> struct dlstm_step {
#if SPARSE
  static constexpr bool sparse_partials = true; // issue 41: compile-time sparse partials
#endif
  template <class... A> DUALCAST_HD auto operator()(A const &...a) const {
    return layer<0>(dc::detail::nth<0>(a...), a...);
  }
  // Layer k reads arguments 1 + 10 k ... 10 + 10 k: h, s, w_f, w_i, w_o, w_g, b_f, b_i, b_o, b_g.
  template <int k, class X, class... A> DUALCAST_HD static auto layer(X const &x, A const &...a) {
    constexpr std::size_t p = 1 + 10 * k;
    auto const &h = dc::detail::nth<p>(a...);
    auto const &s = dc::detail::nth<p + 1>(a...);
    auto f = dc::sigmoid(x * dc::detail::nth<p + 2>(a...) + dc::detail::nth<p + 6>(a...));
    auto i = dc::sigmoid(h * dc::detail::nth<p + 3>(a...) + dc::detail::nth<p + 7>(a...));
    auto o = dc::sigmoid(x * dc::detail::nth<p + 4>(a...) + dc::detail::nth<p + 8>(a...));
    auto g = dc::tanh(h * dc::detail::nth<p + 5>(a...) + dc::detail::nth<p + 9>(a...));
    auto s2 = s * f + i * g;
    auto h2 = o * dc::tanh(s2);
    if constexpr (k + 1 == L) {
      return dc::outputs(h2, s2, h2 * dc::detail::nth<sizeof...(A) - 1>(a...));
    } else {
      auto rest = layer<k + 1>(h2, a...);
      return dc::detail::concat_outputs(dc::outputs(h2, s2), rest, std::make_index_sequence<2>{},
                                        std::make_index_sequence<decltype(rest)::size>{});
    }
  }
};
constexpr dc::kernel<dlstm_step<layers>> step{dlstm_step<layers>{}};
} // namespace

int main() {
  constexpr dc::index_t b = 14;
  std::vector<dc::tensor<double>> values;
  for (int i = 0; i < n_in; ++i)
    values.push_back(dc::tensor<double>::full({b}, 0.01 * (i + 1)));
#if MODE == 3
  std::vector<dc::tensor<double>> outs, grads, seeds;
  for (int i = 0; i < n_out; ++i)
    outs.push_back(dc::tensor<double>::empty({b})),
        seeds.push_back(dc::tensor<double>::full({b}, 1.0));
  for (int i = 0; i < n_in; ++i)
    grads.push_back(dc::tensor<double>::empty({b}));
  [&]<std::size_t... I, std::size_t... O>(std::index_sequence<I...>, std::index_sequence<O...>) {
    dc::cpu ex{1};
    dc::apply(ex, step, dc::out(outs[O].raw_view()...), values[I].cview()...);
    dc::vjp(ex, step, dc::out(grads[I].raw_view()...), dc::in(values[I].cview()...),
            dc::in(seeds[O].cview()...));
  }
  (std::make_index_sequence<n_in>{}, std::make_index_sequence<n_out>{});
  std::printf("%g\n", grads[0].item() + outs[0].item());
#else
  dc::tape tp;
  std::vector<dc::var<double>> v;
  for (auto const &x : values)
    v.push_back(tp.variable(x));
  auto r = [&]<std::size_t... I>(std::index_sequence<I...>) {
#if MODE == 0
    return dc::fused(dc::policy::recompute, step, v[I]...);
#elif MODE == 1
    return dc::call(step, v[I]...);
#else
    return dc::fused(step, v[I]...);
#endif
  }
  (std::make_index_sequence<n_in>{});
  auto loss = dc::sum(r[0]);
  for (int k = 1; k < n_out; ++k)
    loss = loss + dc::sum(r[std::size_t(k)]);
  tp.backward(loss);
  std::printf("%g\n", v[0].grad().to_vector()[0]);
#endif
}

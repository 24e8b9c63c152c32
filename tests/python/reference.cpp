// dualcast's own answer for the PyTorch tests: runs a kernel with dualcast::apply and
// dualcast::vjp (every differentiable argument active, 1 thread) on float64 arrays from an .npz
// file and writes the outputs and input cotangents to another, which test_torch_ops.py compares
// bit for bit with the torch operators' results on the same data.
//   dualcast_python_reference KERNEL IN.npz OUT.npz
// KERNEL: softclip (x, t, s; cotangents gy, gw), lstm (i, f, g, o, c; gh, gc),
// hmlstm (z, zb, c, f, i, g; gc: masks not differentiated).
#include "kernels.hpp"

#include <dualcast/dualcast.hpp>
#include <dualcast/io/npz.hpp>

#include <array>
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <utility>

namespace dc = dualcast;
using arrays = std::map<std::string, dc::tensor<double>>;

namespace {

dc::tensor<double> const &get(arrays const &a, std::string const &n) {
  auto it = a.find(n);
  if (it == a.end())
    throw dc::io_error("reference: no array " + n);
  return it->second;
}

dc::tensor<double> like(dc::tensor<double> const &t) { return dc::tensor<double>::zeros(t.dims()); }

// NI arguments, NO outputs (apply), cotangents of the active arguments A (vjp).
template <std::size_t NI, std::size_t NO, class K, int... A>
void run(K const &k, dc::active_set<dc::default_chunk, A...> act, arrays const &in,
         std::array<char const *, NI> names, std::array<char const *, NO> outs,
         std::array<char const *, NO> cots, arrays &res) {
  dc::cpu ex{1};
  std::array<dc::view<double const>, NI> x;
  std::array<dc::shape, NI> shapes;
  std::array<int, NI> pos;
  for (std::size_t a = 0; a < NI; ++a) {
    x[a] = get(in, names[a]).cview();
    shapes[a] = x[a].dims();
    pos[a] = int(a);
  }
  dc::shape const *sp = shapes.data();
  dc::shape s = dc::broadcast_shapes("reference", sp, pos.data(), int(NI));
  std::array<dc::tensor<double>, NO> y, ybar;
  std::array<dc::tensor<double>, NI> xbar;
  for (std::size_t o = 0; o < NO; ++o) {
    y[o] = res[outs[o]] = dc::tensor<double>::zeros(s);
    ybar[o] = get(in, cots[o]);
  }
  for (std::size_t a = 0; a < NI; ++a)
    xbar[a] = res[std::string(names[a]) + "_bar"] = like(get(in, names[a]));
  [&]<std::size_t... J, std::size_t... O>(std::index_sequence<J...>, std::index_sequence<O...>) {
    dc::apply(ex, k, dc::out(y[O].mview()...), x[J]...);
    dc::vjp(ex, k, act, dc::out(xbar[std::size_t(A)].mview()...), dc::in(x[J]...),
            dc::in(ybar[O].cview()...));
  }
  (std::make_index_sequence<NI>{}, std::make_index_sequence<NO>{});
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s softclip|lstm|hmlstm IN.npz OUT.npz\n", argv[0]);
    return 2;
  }
  try {
    std::string kernel = argv[1];
    arrays in = dc::load_npz<double>(argv[2]), res;
    if (kernel == "softclip")
      run<3, 2>(dualcast_tests::softclip, dc::active<0, 1, 2>, in, {"x", "t", "s"}, {"y", "w"},
                {"gy", "gw"}, res);
    else if (kernel == "lstm")
      run<5, 2>(dc::cells::lstm, dc::active<0, 1, 2, 3, 4>, in, {"i", "f", "g", "o", "c"},
                {"h", "c2"}, {"gh", "gc"}, res);
    else if (kernel == "hmlstm")
      run<6, 1>(dc::cells::hmlstm_update, dc::active<2, 3, 4, 5>, in,
                {"z", "zb", "c", "f", "i", "g"}, {"c2"}, {"gc"}, res);
    else
      throw dc::io_error("reference: unknown kernel " + kernel);
    dc::save_npz(argv[3], res);
  } catch (std::exception const &e) {
    std::fprintf(stderr, "reference: %s\n", e.what());
    return 1;
  }
  return 0;
}

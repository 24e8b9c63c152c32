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

#include <cstdio>
#include <exception>
#include <map>
#include <string>

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

template <class K, int... A>
void run(K const &k, dc::active_set<dc::default_chunk, A...> act, arrays const &in,
         std::initializer_list<char const *> names, std::initializer_list<char const *> outs,
         std::initializer_list<char const *> cots, arrays &res) {
  dc::cpu ex{1};
  std::vector<dc::view<double const>> x;
  std::vector<dc::shape> shapes;
  for (auto n : names) {
    x.push_back(get(in, n).cview());
    shapes.push_back(x.back().dims());
  }
  std::vector<int> pos(x.size());
  for (std::size_t a = 0; a < x.size(); ++a)
    pos[a] = int(a);
  dc::shape s = dc::broadcast_shapes("reference", shapes.data(), pos.data(), int(x.size()));
  std::vector<dc::tensor<double>> y, ybar, xbar;
  for (auto n : outs)
    y.push_back(res[n] = dc::tensor<double>::zeros(s));
  for (auto n : cots)
    ybar.push_back(get(in, n));
  for (auto n : names) {
    xbar.push_back(like(get(in, n)));
    res[std::string(n) + "_bar"] = xbar.back();
  }
  auto go = [&](auto... J) {
    if constexpr (sizeof...(J) == 3) { // softclip: 3 arguments, 2 outputs
      dc::apply(ex, k, dc::out(y[0].mview(), y[1].mview()), x[std::size_t(J)]...);
      dc::vjp(ex, k, act, dc::out(xbar[std::size_t(A)].mview()...), dc::in(x[std::size_t(J)]...),
              dc::in(ybar[0].cview(), ybar[1].cview()));
    } else if constexpr (sizeof...(J) == 5) { // lstm: 5 arguments, 2 outputs
      dc::apply(ex, k, dc::out(y[0].mview(), y[1].mview()), x[std::size_t(J)]...);
      dc::vjp(ex, k, act, dc::out(xbar[std::size_t(A)].mview()...), dc::in(x[std::size_t(J)]...),
              dc::in(ybar[0].cview(), ybar[1].cview()));
    } else { // hmlstm: 6 arguments, 1 output
      dc::apply(ex, k, dc::out(y[0].mview()), x[std::size_t(J)]...);
      dc::vjp(ex, k, act, dc::out(xbar[std::size_t(A)].mview()...), dc::in(x[std::size_t(J)]...),
              dc::in(ybar[0].cview()));
    }
  };
  if (names.size() == 3)
    go(0, 1, 2);
  else if (names.size() == 5)
    go(0, 1, 2, 3, 4);
  else
    go(0, 1, 2, 3, 4, 5);
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
      run(dualcast_tests::softclip, dc::active<0, 1, 2>, in, {"x", "t", "s"}, {"y", "w"},
          {"gy", "gw"}, res);
    else if (kernel == "lstm")
      run(dc::cells::lstm, dc::active<0, 1, 2, 3, 4>, in, {"i", "f", "g", "o", "c"}, {"h", "c2"},
          {"gh", "gc"}, res);
    else if (kernel == "hmlstm")
      run(dc::cells::hmlstm_update, dc::active<2, 3, 4, 5>, in, {"z", "zb", "c", "f", "i", "g"},
          {"c2"}, {"gc"}, res);
    else
      throw dc::io_error("reference: unknown kernel " + kernel);
    dc::save_npz(argv[3], res);
  } catch (std::exception const &e) {
    std::fprintf(stderr, "reference: %s\n", e.what());
    return 1;
  }
  return 0;
}

// tests/cases/lstm_case.hpp: a test body written once and run on every backend (the CPU test
// and, where a GPU exists, the CUDA test). It checks the fused LSTM-cell kernel's values, diagonal
// partials and VJP, on a broadcast layout, against a host reference evaluated on double duals.
// Returns an empty string on success, else a description of the first mismatch.
#pragma once

#include <dualcast/dualcast.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace dualcast_tests {

namespace dc = dualcast;

struct lstm_update {
  template <class I, class F, class G, class O, class C>
  DUALCAST_HD auto operator()(I i, F f, G g, O o, C c) const {
    auto c2 = dc::sigmoid(f) * c + dc::sigmoid(i) * dc::tanh(g);
    return dc::outputs(dc::sigmoid(o) * dc::tanh(c2), c2);
  }
};

// Memory must provide: T* alloc(n), upload(T* dst, std::vector<T> const&), download(vector&, T*),
// release(T*).
template <class T, class Ex, class Memory>
std::string check_lstm_case(Ex const &ex, Memory &mem, long rows, long cols) {
  constexpr dc::kernel<lstm_update> lstm{lstm_update{}};
  const long n = rows * cols;
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> u(-2, 2);
  // i, f, g, o are (rows, cols); c is a (cols,) row broadcast over the rows.
  std::vector<T> host[5], hbar(n), cbar(n);
  for (int k = 0; k < 5; ++k) {
    host[k].resize(k == 4 ? cols : n);
    for (auto &x : host[k])
      x = T(u(gen));
  }
  for (auto &x : hbar)
    x = T(u(gen));
  for (auto &x : cbar)
    x = T(u(gen));
  T *dev_in[5];
  for (int k = 0; k < 5; ++k)
    dev_in[k] = mem.alloc(long(host[k].size())), mem.upload(dev_in[k], host[k]);
  T *dev_h = mem.alloc(n), *dev_c2 = mem.alloc(n), *dev_hbar = mem.alloc(n),
    *dev_cbar = mem.alloc(n);
  mem.upload(dev_hbar, hbar);
  mem.upload(dev_cbar, cbar);
  T *dev_part[10];
  for (auto &p : dev_part)
    p = mem.alloc(n);
  T *dev_xbar[5];
  for (int k = 0; k < 5; ++k)
    dev_xbar[k] = mem.alloc(long(host[k].size()));

  dc::shape s{rows, cols}, row{cols};
  auto in = [&](int k) { return dc::view<const T>(dev_in[k], k == 4 ? row : s); };
  auto part = [&](int k) { return dc::view<T>(dev_part[k], s); };
  dc::apply(ex, lstm, dc::active<0, 1, 2, 3, 4>,
            dc::out(dc::view<T>(dev_h, s), dc::view<T>(dev_c2, s)),
            dc::out(part(0), part(1), part(2), part(3), part(4), part(5), part(6), part(7), part(8),
                    part(9)),
            in(0), in(1), in(2), in(3), in(4));
  dc::vjp(ex, lstm,
          dc::out(dc::view<T>(dev_xbar[0], s), dc::view<T>(dev_xbar[1], s),
                  dc::view<T>(dev_xbar[2], s), dc::view<T>(dev_xbar[3], s),
                  dc::view<T>(dev_xbar[4], row)),
          dc::in(in(0), in(1), in(2), in(3), in(4)),
          dc::in(dc::view<const T>(dev_hbar, s), dc::view<const T>(dev_cbar, s)));

  std::vector<T> h(n), c2(n), parts[10], xbar[5];
  mem.download(h, dev_h);
  mem.download(c2, dev_c2);
  for (int k = 0; k < 10; ++k)
    parts[k].resize(n), mem.download(parts[k], dev_part[k]);
  for (int k = 0; k < 5; ++k)
    xbar[k].resize(host[k].size()), mem.download(xbar[k], dev_xbar[k]);
  for (int k = 0; k < 5; ++k)
    mem.release(dev_in[k]), mem.release(dev_xbar[k]);
  for (auto p : dev_part)
    mem.release(p);
  for (T *p : {dev_h, dev_c2, dev_hbar, dev_cbar})
    mem.release(p);

  // Reference: the same functor on double duals, element by element.
  const double tol = sizeof(T) == 4 ? 2e-5 : 1e-12;
  auto close = [&](double got, double want) {
    return std::abs(got - want) <= tol * (1 + std::abs(want));
  };
  std::vector<double> cbar_ref(cols, 0.0);
  for (long r = 0; r < rows; ++r)
    for (long c = 0; c < cols; ++c) {
      long e = r * cols + c;
      using D = dc::dual<double, 5>;
      D x[5];
      for (int k = 0; k < 5; ++k)
        x[k] = D::variable(double(host[k][k == 4 ? c : e]), k);
      auto out = lstm(x[0], x[1], x[2], x[3], x[4]);
      auto const &ho = dc::get<0>(out);
      auto const &co = dc::get<1>(out);
      if (!close(h[e], ho.val) || !close(c2[e], co.val))
        return "value mismatch at element " + std::to_string(e);
      for (int k = 0; k < 5; ++k) {
        if (!close(parts[k][e], ho.d[k]) || !close(parts[5 + k][e], co.d[k]))
          return "partial mismatch at element " + std::to_string(e) + ", input " +
                 std::to_string(k);
        double want = double(hbar[e]) * ho.d[k] + double(cbar[e]) * co.d[k];
        if (k < 4 && !close(xbar[k][e], want))
          return "vjp mismatch at element " + std::to_string(e);
        if (k == 4)
          cbar_ref[c] += want;
      }
    }
  for (long c = 0; c < cols; ++c)
    if (std::abs(xbar[4][c] - cbar_ref[c]) > tol * 10 * (rows + std::abs(cbar_ref[c])))
      return "broadcast vjp mismatch at column " + std::to_string(c);
  return {};
}

// Host memory for the CPU backend.
template <class T> struct host_memory_of {
  std::vector<std::vector<T>> blocks;
  T *alloc(long n) {
    blocks.emplace_back(std::size_t(n));
    return blocks.back().data();
  }
  void upload(T *dst, std::vector<T> const &src) { std::copy(src.begin(), src.end(), dst); }
  void download(std::vector<T> &dst, T const *src) {
    std::copy(src, src + dst.size(), dst.begin());
  }
  void release(T *) {}
};

} // namespace dualcast_tests

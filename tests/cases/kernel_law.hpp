// tests/cases/kernel_law.hpp: CPU == GPU, the fused kernels' side. The same inputs go through a
// reference (the CPU backend, one thread) and another executor (the CUDA backend where a GPU
// exists; on the host, the CPU backend with two threads), in every mode of a fused kernel --
// values, partials, chunked partials, JVP, VJP with broadcast reductions, accumulating -- on
// strided and broadcast layouts and with lanes that take different branches; the results are
// compared directly.
//
// The bound: with `bits` every number must have the same bits (the host's law: the thread count
// changes nothing). Else arithmetic that rounds once per operation on both sides (+, -, *, exact
// selects) must still agree bit for bit, and anything through a transcendental function within
// 32 units of T's epsilon times max(|a|, |b|, 1): CUDA's libm and dualcast's CPU math (SIMD
// polynomials in float, the C library in double) are each a few ulp from the true value, and the
// kernels' values and derivatives are of order 1. Cotangents summed over R broadcast rows get R
// instead of 1 (the GPU adds them in another order). Returns an empty string on success, else a
// description of the first mismatch.
#pragma once

#include "lstm_case.hpp"

#include <dualcast/dualcast.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace dualcast_tests {

// |a - b| <= ulps * epsilon * max(|a|, |b|, floor); ulps 0: the same bits.
struct bound {
  int ulps = 0;
  double floor = 1;
};

template <class T>
std::string compare_results(std::string const &what, std::vector<T> const &a,
                            std::vector<T> const &b, bound bd) {
  if (a.size() != b.size())
    return what + ": sizes differ";
  for (std::size_t e = 0; e < a.size(); ++e) {
    bool same;
    if (bd.ulps == 0) {
      same = std::memcmp(&a[e], &b[e], sizeof(T)) == 0;
    } else {
      double const x = double(a[e]), y = double(b[e]);
      double const scale = std::max({std::abs(x), std::abs(y), bd.floor});
      same = (std::isnan(x) && std::isnan(y)) ||
             std::abs(x - y) <= bd.ulps * double(std::numeric_limits<T>::epsilon()) * scale;
    }
    if (!same)
      return what + ": element " + std::to_string(e) + " is " + std::to_string(double(a[e])) +
             " on the reference, " + std::to_string(double(b[e])) + " on the other backend";
  }
  return {};
}

// The arrays of one run on one executor: inputs uploaded, outputs pre-filled (so that
// accumulating modes add to known values), results downloaded, everything released after.
template <class T, class Memory> class run_arrays {
public:
  explicit run_arrays(Memory &mem) : mem_(mem) {}
  run_arrays(run_arrays const &) = delete;
  run_arrays &operator=(run_arrays const &) = delete;
  ~run_arrays() {
    for (T *p : ptrs_)
      mem_.release(p);
  }
  T *upload(std::vector<T> const &v) {
    T *p = mem_.alloc(long(v.size()));
    ptrs_.push_back(p);
    mem_.upload(p, v);
    return p;
  }
  T *output(long n, T init) { return upload(std::vector<T>(std::size_t(n), init)); }
  std::vector<T> download(T const *p, long n) {
    std::vector<T> v(static_cast<std::size_t>(n));
    mem_.download(v, p);
    return v;
  }

private:
  Memory &mem_;
  std::vector<T *> ptrs_;
};

// A kernel whose every operation rounds once on any backend: the same bits everywhere.
struct exact_arith {
  template <class A, class B> DUALCAST_HD auto operator()(A a, B b) const {
    return dc::outputs(a * b, a - b, dc::select(a > b, a, b * 0.5));
  }
};

// The law's cases for element type T. Each case runs the reference and the other executor on the
// same host inputs and compares every output.
template <class T, class Ex, class Memory> class kernel_law_runner {
public:
  kernel_law_runner(Ex const &other, Memory &mem, bool bits)
      : other_(other), mem_(mem), bits_(bits) {
    std::mt19937 gen(11);
    std::uniform_real_distribution<double> u(-2, 2);
    auto fill = [&](long n) {
      std::vector<T> v(static_cast<std::size_t>(n));
      for (auto &x : v)
        x = T(u(gen));
      return v;
    };
    for (auto &x : full_)
      x = fill(R * C);
    col_ = fill(R);
    row_ = fill(C);
    for (auto &x : mask_) {
      x.resize(std::size_t(R * C));
      for (auto &m : x)
        m = T(gen() % 2);
    }
  }

  std::string run() {
    std::string err;
    constexpr dc::kernel<lstm_update> lstm{lstm_update{}};
    constexpr dc::kernel<dc::cells::hmlstm_update_fn> hm{dc::cells::hmlstm_update_fn{}};
    constexpr dc::kernel<exact_arith> arith{exact_arith{}};
    bound const smooth{32, 1}, summed{32, double(R)}, exact{0, 0};

    // The LSTM update on mixed layouts: i contiguous, f a transposed (strided) view, g
    // contiguous, o a (R, 1) column and c a (C,) row broadcast.
    auto lstm_inputs = [&](auto &a) {
      std::vector<T> ft(static_cast<std::size_t>(R * C)); // f stored column-major
      for (long r = 0; r < R; ++r)
        for (long c = 0; c < C; ++c)
          ft[std::size_t(c * R + r)] = full_[1][std::size_t(r * C + c)];
      return std::array<dc::view<const T>, 5>{
          dc::view<const T>(a.upload(full_[0]), dc::shape{R, C}),
          dc::view<const T>(a.upload(ft), dc::shape{R, C}, {1, R}),
          dc::view<const T>(a.upload(full_[2]), dc::shape{R, C}),
          dc::view<const T>(a.upload(col_), dc::shape{R, 1}),
          dc::view<const T>(a.upload(row_), dc::shape{C})};
    };
    dc::shape const s{R, C};
    auto v = [&](T *p) { return dc::view<T>(p, s); };

    err = compare("lstm values", smooth, 2, [&](auto const &ex, auto &a) {
      auto x = lstm_inputs(a);
      T *y[] = {a.output(R * C, T(0)), a.output(R * C, T(0))};
      dc::apply(ex, lstm, dc::out(v(y[0]), v(y[1])), x[0], x[1], x[2], x[3], x[4]);
      return std::vector<std::vector<T>>{a.download(y[0], R * C), a.download(y[1], R * C)};
    });
    if (!err.empty())
      return err;

    auto partials = [&](auto active) {
      return [&, active](auto const &ex, auto &a) {
        auto x = lstm_inputs(a);
        T *y[12];
        for (auto &p : y)
          p = a.output(R * C, T(0));
        dc::apply(ex, lstm, active, dc::out(v(y[0]), v(y[1])),
                  dc::out(v(y[2]), v(y[3]), v(y[4]), v(y[5]), v(y[6]), v(y[7]), v(y[8]), v(y[9]),
                          v(y[10]), v(y[11])),
                  x[0], x[1], x[2], x[3], x[4]);
        std::vector<std::vector<T>> r;
        for (T *p : y)
          r.push_back(a.download(p, R * C));
        return r;
      };
    };
    err = compare("lstm partials", smooth, 12, partials(dc::active<0, 1, 2, 3, 4>));
    if (err.empty())
      err = compare("lstm partials in chunks of 2", smooth, 12,
                    partials(dc::active_set<2, 0, 1, 2, 3, 4>{}));
    if (!err.empty())
      return err;

    err = compare("lstm jvp", smooth, 4, [&](auto const &ex, auto &a) {
      auto x = lstm_inputs(a);
      // Tangents with the inputs' shapes (here all contiguous).
      dc::view<const T> t[] = {dc::view<const T>(a.upload(full_[3]), s),
                               dc::view<const T>(a.upload(full_[4]), s),
                               dc::view<const T>(a.upload(full_[0]), s),
                               dc::view<const T>(a.upload(col_), dc::shape{R, 1}),
                               dc::view<const T>(a.upload(row_), dc::shape{C})};
      T *y[4];
      for (auto &p : y)
        p = a.output(R * C, T(0));
      dc::jvp(ex, lstm, dc::active<0, 1, 2, 3, 4>, dc::out(v(y[0]), v(y[1])),
              dc::out(v(y[2]), v(y[3])), dc::in(x[0], x[1], x[2], x[3], x[4]),
              dc::in(t[0], t[1], t[2], t[3], t[4]));
      std::vector<std::vector<T>> r;
      for (T *p : y)
        r.push_back(a.download(p, R * C));
      return r;
    });
    if (!err.empty())
      return err;

    // VJP, accumulating into pre-filled cotangents; o's and c's summed over broadcast dimensions.
    auto lstm_vjp = [&](auto const &ex, auto &a) {
      auto x = lstm_inputs(a);
      dc::view<const T> ybar[] = {dc::view<const T>(a.upload(full_[3]), s),
                                  dc::view<const T>(a.upload(full_[4]), s)};
      T *xb[] = {a.output(R * C, T(0.5)), a.output(R * C, T(0.5)), a.output(R * C, T(0.5)),
                 a.output(R, T(0.5)), a.output(C, T(0.5))};
      dc::vjp(ex, lstm,
              dc::out(v(xb[0]), v(xb[1]), v(xb[2]), dc::view<T>(xb[3], dc::shape{R, 1}),
                      dc::view<T>(xb[4], dc::shape{C})),
              dc::in(x[0], x[1], x[2], x[3], x[4]), dc::in(ybar[0], ybar[1]), true);
      return std::vector<std::vector<T>>{a.download(xb[0], R * C), a.download(xb[1], R * C),
                                         a.download(xb[2], R * C), a.download(xb[3], R),
                                         a.download(xb[4], C)};
    };
    err = compare("lstm vjp (elementwise cotangents)", smooth, 3, lstm_vjp);
    if (err.empty())
      err =
          compare("lstm vjp (cotangents summed over broadcast dimensions)", summed, 2, lstm_vjp, 3);
    if (!err.empty())
      return err;

    // Values and VJP in one pass (value_and_vjp), overwriting the cotangents (in double too:
    // its broadcast-row kernel, map_rows with 7 inputs and 7 outputs, no longer spills).
    {
      auto lstm_value_vjp = [&](auto const &ex, auto &a) {
        auto x = lstm_inputs(a);
        dc::view<const T> ybar[] = {dc::view<const T>(a.upload(full_[3]), s),
                                    dc::view<const T>(a.upload(full_[4]), s)};
        T *y[] = {a.output(R * C, T(0)), a.output(R * C, T(0))};
        T *xb[] = {a.output(R * C, T(0.5)), a.output(R * C, T(0.5)), a.output(R * C, T(0.5)),
                   a.output(R, T(0.5)), a.output(C, T(0.5))};
        dc::value_and_vjp(ex, lstm, dc::out(v(y[0]), v(y[1])),
                          dc::out(v(xb[0]), v(xb[1]), v(xb[2]), dc::view<T>(xb[3], dc::shape{R, 1}),
                                  dc::view<T>(xb[4], dc::shape{C})),
                          dc::in(x[0], x[1], x[2], x[3], x[4]), dc::in(ybar[0], ybar[1]));
        return std::vector<std::vector<T>>{a.download(y[0], R * C),  a.download(y[1], R * C),
                                           a.download(xb[0], R * C), a.download(xb[1], R * C),
                                           a.download(xb[2], R * C), a.download(xb[3], R),
                                           a.download(xb[4], C)};
      };
      err =
          compare("lstm value_and_vjp (values, elementwise cotangents)", smooth, 5, lstm_value_vjp);
      if (err.empty())
        err = compare("lstm value_and_vjp (cotangents summed over broadcast dimensions)", summed, 2,
                      lstm_value_vjp, 5);
      if (!err.empty())
        return err;
    }

    // The HM-LSTM update with random masks: neighbouring elements take different branches.
    auto hm_inputs = [&](auto &a) {
      return std::array<dc::view<const T>, 6>{dc::view<const T>(a.upload(mask_[0]), s),
                                              dc::view<const T>(a.upload(mask_[1]), s),
                                              dc::view<const T>(a.upload(full_[0]), s),
                                              dc::view<const T>(a.upload(full_[1]), s),
                                              dc::view<const T>(a.upload(full_[2]), s),
                                              dc::view<const T>(a.upload(row_), dc::shape{C})};
    };
    err =
        compare("hm-lstm (divergent) values and partials", smooth, 5, [&](auto const &ex, auto &a) {
          auto x = hm_inputs(a);
          T *y[5];
          for (auto &p : y)
            p = a.output(R * C, T(0));
          dc::apply(ex, hm, dc::active<2, 3, 4, 5>, dc::out(v(y[0])),
                    dc::out(v(y[1]), v(y[2]), v(y[3]), v(y[4])), x[0], x[1], x[2], x[3], x[4],
                    x[5]);
          std::vector<std::vector<T>> r;
          for (T *p : y)
            r.push_back(a.download(p, R * C));
          return r;
        });
    auto hm_vjp = [&](auto const &ex, auto &a) {
      auto x = hm_inputs(a);
      auto ybar = dc::view<const T>(a.upload(full_[3]), s);
      T *xb[] = {a.output(R * C, T(0)), a.output(R * C, T(0)), a.output(R * C, T(0)),
                 a.output(C, T(0))};
      dc::vjp(ex, hm, dc::active<2, 3, 4, 5>,
              dc::out(v(xb[0]), v(xb[1]), v(xb[2]), dc::view<T>(xb[3], dc::shape{C})),
              dc::in(x[0], x[1], x[2], x[3], x[4], x[5]), dc::in(ybar));
      return std::vector<std::vector<T>>{a.download(xb[0], R * C), a.download(xb[1], R * C),
                                         a.download(xb[2], R * C), a.download(xb[3], C)};
    };
    if (err.empty())
      err = compare("hm-lstm (divergent) vjp", smooth, 3, hm_vjp);
    if (err.empty())
      err = compare("hm-lstm (divergent) vjp, summed over rows", summed, 1, hm_vjp, 3);
    if (!err.empty())
      return err;

    // Exact arithmetic: values and partials the same bits on every backend.
    return compare("exact arithmetic values and partials", exact, 9, [&](auto const &ex, auto &a) {
      auto x0 = dc::view<const T>(a.upload(full_[0]), s);
      auto x1 = dc::view<const T>(a.upload(row_), dc::shape{C});
      T *y[9];
      for (auto &p : y)
        p = a.output(R * C, T(0));
      dc::apply(ex, arith, dc::active<0, 1>, dc::out(v(y[0]), v(y[1]), v(y[2])),
                dc::out(v(y[3]), v(y[4]), v(y[5]), v(y[6]), v(y[7]), v(y[8])), x0, x1);
      std::vector<std::vector<T>> r;
      for (T *p : y)
        r.push_back(a.download(p, R * C));
      return r;
    });
  }

private:
  static constexpr long R = 37, C = 70; // neither a multiple of a SIMD width nor of a warp

  // Runs body on the reference and on the other executor; compares the results from `first` on
  // (`count` of them) within bd (the same bits if bits_).
  template <class Body>
  std::string compare(std::string const &what, bound bd, std::size_t count, Body const &body,
                      std::size_t first = 0) {
    host_memory_of<T> host;
    std::vector<std::vector<T>> ref, got;
    {
      run_arrays<T, host_memory_of<T>> a(host);
      ref = body(dc::cpu{1}, a);
    }
    {
      run_arrays<T, Memory> a(mem_);
      got = body(other_, a);
    }
    if (ref.size() < first + count || got.size() != ref.size())
      return what + ": the case returned too few results";
    for (std::size_t k = first; k < first + count; ++k) {
      auto err = compare_results(what + ", result " + std::to_string(k), ref[k], got[k],
                                 bits_ ? bound{0, 0} : bd);
      if (!err.empty())
        return err;
    }
    return {};
  }

  Ex other_;
  Memory &mem_;
  bool bits_;
  std::vector<T> full_[5], col_, row_, mask_[2];
};

template <class T, class Ex, class Memory>
std::string kernel_law(Ex const &other, Memory &mem, bool bits) {
  return kernel_law_runner<T, Ex, Memory>(other, mem, bits).run();
}

} // namespace dualcast_tests

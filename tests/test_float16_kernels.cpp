// Fused calls over bfloat16 and half arrays (computed in float, rounded once on store): the
// conversions the CPU backend makes (vector and portable paths) against numbers/float16.hpp bit
// for bit, and the LSTM cell's values and derivatives in every mode against a float64 reference
// (values in double, derivatives by the complex step in double) evaluated at the widened 16-bit
// inputs, within a stated bound per element:
//   |result - reference| <= u |reference| + 2 e,
// u the storage's rounding (bfloat16: 2^-8, half: 2^-11, plus 2^-25 absolute for half's
// subnormals) and e the float arithmetic's error, 2^-18 times the sum of the magnitudes of the
// terms that make the reference (64 float ulps: a saturated derivative computed as s (1 - s)
// from a rounded s is off by far more).
#include <dualcast/dualcast.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace dc = dualcast;

namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

template <class H> std::uint16_t ref_bits(float x) {
  if constexpr (std::is_same_v<H, dc::bfloat16>)
    return dc::detail::bfloat16_bits_of(x);
  else
    return dc::detail::half_bits_of(x);
}

// Floats that exercise rounding: specials, subnormals, every binade's ties, random patterns.
std::vector<float> rounding_inputs() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          1e-8f,
                          -3e-8f,
                          6.1e-5f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          from_bits(0x7f800001u), // a signalling NaN
                          from_bits(0xff812345u),
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          from_bits(0x3f808000u), // bfloat16 ties, to even either way
                          from_bits(0x3f818000u),
                          from_bits(0x7f7f8000u)}; // rounds to infinity in bfloat16
  std::mt19937 rng(37);
  for (int i = 0; i < 4000; ++i)
    v.push_back(from_bits(rng()));
  for (int i = 0; i < 1000; ++i) // ties of half: 13 low bits 0x1000
    v.push_back(from_bits((rng() & 0xffffe000u) | 0x1000u));
  v.push_back(2.5f); // an odd count: a partial last batch
  return v;
}

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
bool same_bits(float a, float b) { return bits_of(a) == bits_of(b); }

auto const copy = dc::kernel([](auto x) { return x; });

template <class H> void check_conversions() {
  dc::cpu const ex{2};
  std::vector<float> x = rounding_inputs();
  auto const n = dc::index_t(x.size());
  dc::view<float> xv(x.data(), dc::shape{n});
  // float -> 16 bits (contiguous: the vector path), then back (widening is exact)
  std::vector<H> y(x.size());
  dc::view<H> yv(y.data(), dc::shape{n});
  dc::apply(ex, copy, dc::out(yv), xv);
  std::vector<float> back(x.size());
  dc::apply(ex, copy, dc::out(dc::view<float>(back.data(), dc::shape{n})), dc::view<H const>(yv));
  for (std::size_t j = 0; j < x.size(); ++j) {
    INFO("element " << j << ": " << x[j]);
    CHECK(y[j].bits == ref_bits<H>(x[j]));
    CHECK(same_bits(back[j], float(y[j])));
  }
  // strided outputs (the portable path) and outputs added to (in float, rounded once)
  std::vector<H> z(2 * x.size(), H(0.0f));
  dc::view<H> zv(z.data(), dc::shape{n}, {2});
  for (std::size_t j = 0; j < x.size(); ++j)
    z[2 * j] = H(0.5f);
  dc::apply(ex, copy, dc::add_to(zv), xv);
  for (std::size_t j = 0; j < x.size(); ++j) {
    INFO("element " << j << ": " << x[j]);
    CHECK(z[2 * j].bits == ref_bits<H>(0.5f + x[j]));
    CHECK(z[2 * j + 1].bits == H(0.0f).bits);
  }
}

// ---- the LSTM cell against float64 ------------------------------------------------------------

// The cell in double, on real or complex numbers: its derivatives by the complex step,
// d f / d a = Im f(a + i h) / h (h = 1e-30): a difference quotient without the cancellation of
// central differences, so derivatives far smaller than the values (saturated gates: 1e-14 beside
// values of 1) come out to double's relative precision.
template <class X> X sig(X x) { return X(1) / (X(1) + std::exp(-x)); }
template <class X> struct cell_ref { X h, c; };
template <class X> cell_ref<X> lstm64(X const *a) { // a: i, f, g, o, c
  X c2 = sig(a[1]) * a[4] + sig(a[0]) * std::tanh(a[2]);
  return {sig(a[3]) * std::tanh(c2), c2};
}
// d h / d a_k and d c' / d a_k.
void lstm64_derivs(double const *a, double dh[5], double dc_[5]) {
  constexpr double step = 1e-30;
  for (int k = 0; k < 5; ++k) {
    std::complex<double> z[5];
    for (int j = 0; j < 5; ++j)
      z[j] = {a[j], j == k ? step : 0.0};
    cell_ref<std::complex<double>> r = lstm64(z);
    dh[k] = r.h.imag() / step;
    dc_[k] = r.c.imag() / step;
  }
}

template <class H> constexpr double unit() {
  return std::is_same_v<H, dc::bfloat16> ? 0x1p-8 : 0x1p-11;
}
template <class H> constexpr double tiny() { return std::is_same_v<H, dc::half> ? 0x1p-25 : 0.0; }
template <class E> double bound(double ref, double mag) {
  double const e = 0x1p-18 * mag;
  if constexpr (std::is_same_v<E, float>)
    return 2 * e + 0x1p-24 * std::abs(ref);
  else
    return unit<E>() * std::abs(ref) + tiny<E>() + 2 * e;
}

int failures = 0;
template <class E>
void check_close(char const *what, std::size_t j, double got, double ref, double mag) {
  double const tol = bound<E>(ref, mag);
  if (!(std::abs(got - ref) <= tol)) {
    if (++failures <= 10)
      MESSAGE(std::string(what) << " at " << j << ": " << got << " vs " << ref << " (tolerance "
                                << tol << ")");
    CHECK(std::abs(got - ref) <= tol);
  }
}

// Gates G (i, f, g, o) and outputs / cotangents of the gates in G; the cell state, its output and
// cotangent in C: the mixed call of a float cell state beside 16-bit gates when C = float.
template <class G, class C> void check_lstm_cell() {
  dc::cpu const ex{2};
  constexpr int n = 3001;
  std::mt19937 rng(1207);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_real_distribution<float> sat(8.0f, 16.0f);
  std::vector<G> gate[4];
  std::vector<C> cell(n);
  std::vector<G> hbar(n), tan_g[4];
  std::vector<C> cbar(n), tan_c(n);
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < n; ++j) {
      // every 5th element of every gate saturated (|x| in [8, 16]), either sign
      float x = j % 5 == 1 ? (rng() % 2 ? 1 : -1) * sat(rng) : normal(rng);
      gate[k].push_back(G(x));
      tan_g[k].push_back(G(normal(rng)));
    }
  for (int j = 0; j < n; ++j) {
    cell[std::size_t(j)] = C(normal(rng));
    hbar[std::size_t(j)] = G(normal(rng));
    cbar[std::size_t(j)] = C(normal(rng));
    tan_c[std::size_t(j)] = C(normal(rng));
  }
  dc::shape const s{n};
  auto gv = [&](std::vector<G> &v) { return dc::view<G>(v.data(), s); };
  auto cv = [&](std::vector<C> &v) { return dc::view<C>(v.data(), s); };
  auto in = dc::in(gv(gate[0]), gv(gate[1]), gv(gate[2]), gv(gate[3]), cv(cell));

  std::vector<G> h(n), h2(n), xbar_g[4], xbar_g2[4], th(n);
  std::vector<C> c(n), c2(n), xbar_c(n), xbar_c2(n), tc(n);
  for (int k = 0; k < 4; ++k)
    xbar_g[k].resize(n), xbar_g2[k].resize(n);
  // every mode: values, values and VJP in one pass, VJP, JVP
  dc::apply(ex, dc::cells::lstm, dc::out(gv(h), cv(c)), gv(gate[0]), gv(gate[1]), gv(gate[2]),
            gv(gate[3]), cv(cell));
  dc::value_and_vjp(ex, dc::cells::lstm, dc::out(gv(h2), cv(c2)),
                    dc::out(gv(xbar_g[0]), gv(xbar_g[1]), gv(xbar_g[2]), gv(xbar_g[3]), cv(xbar_c)),
                    in, dc::in(gv(hbar), cv(cbar)));
  dc::vjp(ex, dc::cells::lstm,
          dc::out(gv(xbar_g2[0]), gv(xbar_g2[1]), gv(xbar_g2[2]), gv(xbar_g2[3]), cv(xbar_c2)), in,
          dc::in(gv(hbar), cv(cbar)));
  dc::jvp(ex, dc::cells::lstm, dc::out(gv(h), cv(c)), dc::out(gv(th), cv(tc)), in,
          dc::in(gv(tan_g[0]), gv(tan_g[1]), gv(tan_g[2]), gv(tan_g[3]), cv(tan_c)));
  // partials d h / d f and d c' / d f (one active input)
  std::vector<G> dh_df(n);
  std::vector<C> dc_df(n);
  dc::apply(ex, dc::cells::lstm, dc::active<1>, dc::out(gv(h2), cv(c2)),
            dc::out(gv(dh_df), cv(dc_df)), gv(gate[0]), gv(gate[1]), gv(gate[2]), gv(gate[3]),
            cv(cell));

  failures = 0;
  int saturated_nonzero = 0;
  for (std::size_t j = 0; j < std::size_t(n); ++j) {
    double a[5] = {gate[0][j], gate[1][j], gate[2][j], gate[3][j], double(cell[j])};
    cell_ref<double> r = lstm64(a);
    double dh[5], dcs[5];
    lstm64_derivs(a, dh, dcs);
    double const sf = sig(a[1]), si = sig(a[0]), tg = std::tanh(a[2]);
    double const mag_c = std::abs(sf * a[4]) + std::abs(si * tg);
    check_close<G>("h", j, double(h[j]), r.h, std::abs(r.h) + mag_c);
    check_close<C>("c'", j, double(c[j]), r.c, mag_c);
    check_close<G>("h (value_and_vjp)", j, double(h2[j]), r.h, std::abs(r.h) + mag_c);
    check_close<C>("c' (value_and_vjp)", j, double(c2[j]), r.c, mag_c);
    double const hb = hbar[j], cb = cbar[j];
    double t_h = 0, t_c = 0, m_h = 0, m_c = 0;
    for (int k = 0; k < 5; ++k) {
      double const ref = hb * dh[k] + cb * dcs[k],
                   mag = std::abs(hb * dh[k]) + std::abs(cb * dcs[k]);
      double const got = k < 4 ? double(xbar_g[k][j]) : double(xbar_c[j]);
      double const got2 = k < 4 ? double(xbar_g2[k][j]) : double(xbar_c2[j]);
      if (k < 4) {
        check_close<G>("xbar (value_and_vjp)", j, got, ref, mag);
        check_close<G>("xbar (vjp)", j, got2, ref, mag);
      } else {
        check_close<C>("xbar c (value_and_vjp)", j, got, ref, mag);
        check_close<C>("xbar c (vjp)", j, got2, ref, mag);
      }
      if (k < 4 && std::abs(a[k]) >= 8 && ref != 0)
        saturated_nonzero += got != 0;
      double const t = k < 4 ? double(tan_g[k][j]) : double(tan_c[j]);
      t_h += dh[k] * t, m_h += std::abs(dh[k] * t);
      t_c += dcs[k] * t, m_c += std::abs(dcs[k] * t);
    }
    check_close<G>("h tangent", j, double(th[j]), t_h, m_h);
    check_close<C>("c' tangent", j, double(tc[j]), t_c, m_c);
    check_close<G>("d h / d f", j, double(dh_df[j]), dh[1], std::abs(dh[1]));
    check_close<C>("d c' / d f", j, double(dc_df[j]), dcs[1], std::abs(dcs[1]));
  }
  CHECK(failures == 0);
  CHECK(saturated_nonzero > 4 * n / 5 / 2); // the saturated derivatives did not flush to zero
}

} // namespace

TEST_CASE("bfloat16 / half arrays in fused calls: float rounded once on store, bit for bit") {
  check_conversions<dc::bfloat16>();
  check_conversions<dc::half>();
}

// Every 16-bit pattern widened by a contiguous call (the vector conversions,
// backend/cpu/convert.hpp) and from a strided input (the portable path), against
// numbers/float16.hpp; the patterns through a 16-bit -> 16-bit kernel (widened and rounded again:
// the same bits, NaN made quiet), and a broadcast 16-bit input beside them.
template <class H> std::uint16_t requantize(std::uint16_t b) {
  if constexpr (std::is_same_v<H, dc::bfloat16>)
    return dc::detail::bfloat16_bits_of(dc::detail::float_of_bfloat16(b));
  else
    return dc::detail::half_bits_of(dc::detail::float_of_half(b));
}
template <class H> float widened(std::uint16_t b) {
  if constexpr (std::is_same_v<H, dc::bfloat16>)
    return dc::detail::float_of_bfloat16(b);
  else
    return dc::detail::float_of_half(b);
}
template <class H> void check_every_pattern() {
  dc::cpu const ex{2};
  constexpr dc::index_t n = 65536 + 3; // a partial last batch
  std::vector<H> x(n);
  for (dc::index_t j = 0; j < n; ++j)
    x[std::size_t(j)] = H::from_bits(std::uint16_t(j));
  dc::view<H const> xv(x.data(), dc::shape{n});
  std::vector<H> x2(2 * std::size_t(n)); // the patterns 2 apart: a strided input
  for (std::size_t j = 0; j < x.size(); ++j)
    x2[2 * j] = x[j];
  std::vector<float> y(n), ys(n);
  dc::apply(ex, copy, dc::out(dc::view<float>(y.data(), dc::shape{n})), xv);
  dc::apply(ex, copy, dc::out(dc::view<float>(ys.data(), dc::shape{n})),
            dc::view<H const>(x2.data(), dc::shape{n}, {2}));
  std::vector<H> z(n);
  dc::apply(ex, copy, dc::out(dc::view<H>(z.data(), dc::shape{n})), xv);
  std::vector<H> s(n); // x + a broadcast 16-bit zero (-0 would change +0)
  H const zero = H(0.0f);
  auto const add = dc::kernel([](auto a, auto b) { return a + b; });
  dc::apply(ex, add, dc::out(dc::view<H>(s.data(), dc::shape{n})), xv,
            dc::view<H const>(&zero, dc::shape{n}, {0}));
  int failures = 0;
  for (dc::index_t j = 0; j < n; ++j) {
    auto const b = std::uint16_t(j);
    float const r = widened<H>(b);
    // (F16C's vcvtph2ps makes a signalling NaN quiet, numbers/float16.hpp keeps it: the same NaN
    // but for the quiet bit, as the row conversions had it)
    auto const nan_ok = [&](float v) {
      return std::isnan(r) && std::isnan(v) && (bits_of(v) | 0x400000u) == (bits_of(r) | 0x400000u);
    };
    bool const ok = (same_bits(y[std::size_t(j)], r) || nan_ok(y[std::size_t(j)])) &&
                    same_bits(ys[std::size_t(j)], r) &&
                    z[std::size_t(j)].bits == requantize<H>(b) &&
                    s[std::size_t(j)].bits == ref_bits<H>(r + 0.0f);
    if (!ok && failures++ < 5)
      FAIL_CHECK("pattern " << j);
  }
  CHECK(failures == 0);
}

TEST_CASE("every bfloat16 / half pattern widened (vector and portable paths), bit for bit") {
  check_every_pattern<dc::bfloat16>();
  check_every_pattern<dc::half>();
}

TEST_CASE("LSTM cell in bfloat16: values and derivatives in every mode against float64") {
  check_lstm_cell<dc::bfloat16, dc::bfloat16>();
}
TEST_CASE("LSTM cell in half: values and derivatives in every mode against float64") {
  check_lstm_cell<dc::half, dc::half>();
}
TEST_CASE("LSTM cell with a float cell state beside bfloat16 / half gates (one mixed call)") {
  check_lstm_cell<dc::bfloat16, float>();
  check_lstm_cell<dc::half, float>();
}

TEST_CASE("16-bit arrays: a broadcast input's cotangent is summed in float and rounded once") {
  dc::cpu const ex{1};
  auto const mul = dc::kernel([](auto x, auto b) { return x * b; });
  constexpr int rows = 37, cols = 11;
  std::vector<dc::bfloat16> x(rows * cols), b(cols), ybar(rows * cols), xbar(rows * cols),
      bbar(cols, dc::bfloat16(1.0f));
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (auto *v : {&x, &ybar})
    for (auto &e : *v)
      e = dc::bfloat16(normal(rng));
  for (auto &e : b)
    e = dc::bfloat16(normal(rng));
  dc::view<dc::bfloat16> xv(x.data(), dc::shape{rows, cols}), bv(b.data(), dc::shape{cols}),
      yv(ybar.data(), dc::shape{rows, cols}), xbv(xbar.data(), dc::shape{rows, cols}),
      bbv(bbar.data(), dc::shape{cols});
  dc::vjp(ex, mul, dc::out(xbv, bbv), dc::in(xv, bv), dc::in(yv), /*accumulate=*/true);
  for (int j = 0; j < cols; ++j) {
    double sum = 1.0, mag = 1.0; // (added to the 1 it held)
    for (int i = 0; i < rows; ++i)
      sum += double(x[std::size_t(i * cols + j)]) * double(ybar[std::size_t(i * cols + j)]),
          mag +=
          std::abs(double(x[std::size_t(i * cols + j)]) * double(ybar[std::size_t(i * cols + j)]));
    CHECK(std::abs(double(bbar[std::size_t(j)]) - sum) <= 0x1p-8 * std::abs(sum) + 0x1p-18 * mag);
  }
}

TEST_CASE("16-bit arrays: the aliasing checks count each array's own element size") {
  dc::cpu const ex{1};
  auto const twice = dc::kernel([](auto x) { return x + x; });
  std::vector<dc::bfloat16> b(64, dc::bfloat16(1.5f));
  dc::view<dc::bfloat16> all(b.data(), dc::shape{64}), lo(b.data(), dc::shape{32}),
      hi(b.data() + 32, dc::shape{32});
  dc::apply(ex, twice, dc::out(all), all); // in place: the same elements
  CHECK(float(b[0]) == 3.0f);
  CHECK(float(b[63]) == 3.0f);
  // A float view over the same bytes is never the same elements: refused, nothing written.
  dc::view<float> floats(reinterpret_cast<float *>(b.data()), dc::shape{32});
  CHECK_THROWS_AS(dc::apply(ex, twice, dc::out(floats), lo), dc::aliasing_error);
  CHECK(float(b[0]) == 3.0f);
  // The two halves of one bfloat16 array are disjoint (counted in 2-byte elements).
  dc::apply(ex, twice, dc::out(hi), lo);
  CHECK(float(b[32]) == 6.0f);
  CHECK(float(b[31]) == 3.0f);
}

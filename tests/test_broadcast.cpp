// Property tests of the fused broadcast kernels on the CPU backend
// (dualcast/broadcast/broadcast.hpp):
//
//   * random shapes (rank 0..8, extents including 1 and 0) and random broadcast patterns, float and
//     double, kernels of 1..6 arguments and 1..3 outputs with scalar arguments and captured
//     constants: values against the lambda called on plain numbers, partials against central finite
//     differences in double precision, JVP / VJP against the partials and against each other,
//     accumulation;
//   * strided views (transposed, stepped, negative strides) and 1 vs 2 threads give results
//     identical bit for bit; chunked and one-element-at-a-time evaluation give the same numbers
//     (bit for bit up to the sign of zero when the compiler does not contract multiply-adds into
//     FMAs, else to a few rounding errors: see fma_contraction);
//   * inactive inputs, data-dependent branches (the HM-LSTM cell), loops and early returns;
//   * pipe / fuse, error reporting, in-place calls, empty and rank-8 arrays.
//
// Every reference is computed here from the kernel's lambda on plain numbers (or analytically); no
// expected value is copied from dualcast's output.
#include <dualcast/dualcast.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace dc = dualcast;

namespace {

using dc::index_t;
using dc::shape;

// ---- host arrays, indexing ----------------------------------------------------------------------

template <class T> struct host {
  shape s;
  std::vector<T> v;
  host() = default;
  explicit host(shape sh, T fill = T(0)) : s(sh), v(static_cast<std::size_t>(sh.size()), fill) {}
  dc::view<T> view() { return dc::view<T>(v.data(), s); }
  T &operator[](index_t i) { return v[static_cast<std::size_t>(i)]; }
  T const &operator[](index_t i) const { return v[static_cast<std::size_t>(i)]; }
};

// Offset in a contiguous row-major array of shape a of the element that broadcasting places at
// multi-index idx of shape s.
index_t bcast_offset(shape const &a, shape const &s, index_t const *idx) {
  index_t off = 0, st = 1;
  for (int j = a.rank - 1; j >= 0; --j) {
    int d = s.rank - a.rank + j;
    if (a.ext[j] != 1)
      off += idx[d] * st;
    st *= a.ext[j];
  }
  return off;
}

template <class F> void for_each_index(shape const &s, F &&f) {
  index_t const n = s.size();
  index_t idx[dc::max_rank] = {};
  for (index_t flat = 0; flat < n; ++flat) {
    f(static_cast<index_t const *>(idx), flat);
    for (int d = s.rank - 1; d >= 0; --d) {
      if (++idx[d] < s.ext[d])
        break;
      idx[d] = 0;
    }
  }
}

template <class T> T &at(dc::view<T> const &v, index_t const *idx) {
  index_t off = 0;
  for (int d = 0; d < v.rank(); ++d)
    off += idx[d] * v.stride(d);
  return v.data()[off];
}

// Bit-for-bit equality is the property under test (it tells -0 from +0 and compares NaNs).
template <class T> bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0; // NOLINT(bugprone-suspicious-memory-comparison)
}

template <class T> void fill_uniform(std::vector<T> &v, std::mt19937 &rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  for (auto &x : v)
    x = static_cast<T>(u(rng));
}

// A random shape of rank 0..max_rank with small extents (1 and, rarely, 0 included).
shape random_shape(std::mt19937 &rng, int max_rank, index_t max_size, bool allow_zero) {
  std::uniform_int_distribution<int> rank_d(0, max_rank);
  std::uniform_int_distribution<int> pct(0, 99);
  for (;;) {
    shape s;
    s.rank = rank_d(rng);
    int const max_e = s.rank <= 2 ? 9 : s.rank <= 4 ? 5 : 3;
    std::uniform_int_distribution<int> ext_d(1, max_e);
    for (int d = 0; d < s.rank; ++d)
      s.ext[d] = (allow_zero && pct(rng) < 4) ? 0 : ext_d(rng);
    if (s.size() <= max_size)
      return s;
  }
}

// A shape that broadcasts to s: some leading dimensions dropped, some extents set to 1.
shape random_broadcast(shape const &s, std::mt19937 &rng) {
  std::uniform_int_distribution<int> pct(0, 99);
  int drop = 0;
  if (s.rank > 0 && pct(rng) < 30)
    drop = std::uniform_int_distribution<int>(1, s.rank)(rng);
  shape r;
  r.rank = s.rank - drop;
  for (int i = 0; i < r.rank; ++i)
    r.ext[i] = pct(rng) < 30 ? 1 : s.ext[i + drop];
  return r;
}

// An array stored with permuted dimensions, a step and a random sign per dimension: a view of
// logical shape s with arbitrary (possibly negative) strides. Unused storage holds NaN.
template <class T> struct strided {
  std::vector<T> store;
  dc::view<T> v;
};
template <class T> strided<T> make_strided(shape const &s, std::mt19937 &rng) {
  int const r = s.rank;
  std::array<int, dc::max_rank> perm{};
  std::iota(perm.begin(), perm.begin() + r, 0);
  std::shuffle(perm.begin(), perm.begin() + r, rng);
  std::uniform_int_distribution<int> step_d(1, 3), coin(0, 1);
  index_t step[dc::max_rank], sign[dc::max_rank];
  for (int d = 0; d < r; ++d)
    step[d] = step_d(rng), sign[d] = coin(rng) ? -1 : 1;
  // storage dimension k holds logical dimension perm[k]
  index_t sst[dc::max_rank], total = 1;
  for (int k = r - 1; k >= 0; --k) {
    sst[k] = total;
    total *= s.ext[perm[k]] * step[perm[k]];
  }
  index_t stride[dc::max_rank], base = 0;
  for (int k = 0; k < r; ++k) {
    int d = perm[k];
    stride[d] = sst[k] * step[d] * sign[d];
    if (sign[d] < 0 && s.ext[d] > 0)
      base += (s.ext[d] - 1) * sst[k] * step[d];
  }
  strided<T> out;
  out.store.assign(static_cast<std::size_t>(std::max<index_t>(total, 1)),
                   std::numeric_limits<T>::quiet_NaN());
  out.v = dc::view<T>(out.store.data() + base, s, static_cast<index_t const *>(stride));
  return out;
}

template <class T> void copy_into(dc::view<T> const &dst, host<T> const &src) {
  for_each_index(src.s, [&](index_t const *idx, index_t flat) { at(dst, idx) = src[flat]; });
}

// ---- kernels' argument lists: arrays and plain scalars ------------------------------------------

struct arr {}; // marks an array argument

template <class Slots> struct slot_info;
template <class... S> struct slot_info<std::tuple<S...>> {
  static constexpr int arity = sizeof...(S);
  static constexpr bool is_arr[sizeof...(S)] = {std::is_same_v<S, arr>...};
  static constexpr int na = (0 + ... + (std::is_same_v<S, arr> ? 1 : 0));
  static constexpr int array_index(int p) {
    int n = 0;
    for (int i = 0; i < p; ++i)
      n += is_arr[i] ? 1 : 0;
    return n;
  }
  static constexpr std::array<int, na> positions() {
    std::array<int, na> r{};
    int n = 0;
    for (int p = 0; p < arity; ++p)
      if (is_arr[p])
        r[n++] = p;
    return r;
  }
};

// dc::active<every array position>
template <class Slots, std::size_t... I> constexpr auto all_active(std::index_sequence<I...>) {
  constexpr auto pos = slot_info<Slots>::positions();
  return dc::active_set<dc::default_chunk, pos[I]...>{};
}
template <class Slots>
using all_active_t = decltype(all_active<Slots>(std::make_index_sequence<slot_info<Slots>::na>{}));

// The call's arguments: views for array slots, the stored scalar for scalar slots.
template <class Slots, class V, std::size_t NA, std::size_t... P>
auto call_args(Slots const &slots, std::array<V, NA> const &views, std::index_sequence<P...>) {
  auto one = [&](auto p) {
    constexpr int q = decltype(p)::value;
    if constexpr (slot_info<Slots>::is_arr[q])
      return views[slot_info<Slots>::array_index(q)];
    else
      return std::get<q>(slots);
  };
  return std::make_tuple(one(std::integral_constant<int, int(P)>{})...);
}
template <class Slots, class V, std::size_t NA>
auto call_args(Slots const &slots, std::array<V, NA> const &views) {
  return call_args(slots, views, std::make_index_sequence<slot_info<Slots>::arity>{});
}

// A kernel's outputs (one number or dc::outputs(...)) as doubles.
template <int K, class R> std::array<double, K> out_values(R const &r) {
  if constexpr (dc::is_outputs<R>::value) {
    static_assert(std::tuple_size<R>::value == K);
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::array<double, K>{static_cast<double>(dc::get<I>(r))...};
    }
    (std::make_index_sequence<K>{});
  } else {
    static_assert(K == 1);
    return {static_cast<double>(r)};
  }
}

// The kernel on plain numbers of type U (the values of its array arguments given in order).
template <int K, class U, class Kern, class Slots>
std::array<double, K> eval_plain(Kern const &k, Slots const &slots, U const *vals) {
  std::array<U, std::size_t(slot_info<Slots>::na > 0 ? slot_info<Slots>::na : 1)> a{};
  for (int i = 0; i < slot_info<Slots>::na; ++i)
    a[std::size_t(i)] = vals[i];
  auto args = call_args(slots, a);
  return out_values<K>(std::apply(k, args));
}

template <class... V> auto pack_of(std::tuple<V...> const &t) {
  return std::apply([](auto const &...v) { return dc::in(v...); }, t);
}
template <std::size_t N, class V> auto in_pack(std::array<V, N> const &a) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) { return dc::in(a[I]...); }
  (std::make_index_sequence<N>{});
}
template <std::size_t N, class T> auto out_pack(std::array<host<T>, N> &a) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) { return dc::out(a[I].view()...); }
  (std::make_index_sequence<N>{});
}

template <class T> struct tol;
template <> struct tol<double> {
  static constexpr double val = 1e-12; // values against the lambda on plain doubles
  static constexpr double der = 1e-6;  // partials against finite differences
  static constexpr double lin = 1e-12; // JVP / VJP against sums of partials
};
template <> struct tol<float> {
  static constexpr double val = 3e-5;
  static constexpr double der = 3e-4;
  static constexpr double lin = 2e-5;
};

bool close(double got, double want, double rel, double scale = 0) {
  if (std::isnan(want))
    return std::isnan(got);
  return std::abs(got - want) <= rel * (1 + std::max(std::abs(want), scale));
}

// Central finite differences in double of every output with respect to array argument a.
template <int K, class Kern, class Slots>
std::array<double, K> central_fd(Kern const &k, Slots const &slots, double const *vals, int a) {
  constexpr int NA = slot_info<Slots>::na;
  double p[NA], m[NA];
  for (int i = 0; i < NA; ++i)
    p[i] = m[i] = vals[i];
  double const h = 1e-6 * std::max(1.0, std::abs(vals[a]));
  p[a] += h;
  m[a] -= h;
  auto fp = eval_plain<K, double>(k, slots, p), fm = eval_plain<K, double>(k, slots, m);
  std::array<double, K> r{};
  for (int i = 0; i < K; ++i)
    r[std::size_t(i)] = (fp[std::size_t(i)] - fm[std::size_t(i)]) / (2 * h);
  return r;
}

// ---- the kernels used by the random property tests ----------------------------------------------

// 2 arrays around a double scalar, a captured constant, 2 outputs.
constexpr auto k_two = dc::kernel([c = 0.75](auto x, double s, auto y) {
  auto t = dc::tanh(x * y + c);
  return dc::outputs(t * s + dc::sin(y), dc::exp(-(x * x)) * y - t);
});
using slots_two = std::tuple<arr, double, arr>;

// 1 array, 1 output returned as a plain value.
constexpr auto k_one = dc::kernel([](auto x) { return dc::sigmoid(x) * x + dc::log1p(x * x); });
using slots_one = std::tuple<arr>;

// 5 arrays and an int scalar, a captured constant, 3 outputs.
constexpr auto k_six = dc::kernel([k = 1.5](auto a, auto b, int n, auto c, auto d, auto e) {
  auto u = a * b + c / (d * d + 1.0);
  return dc::outputs(u * k + dc::pow(e, n), dc::sqrt(a * a + e * e + 0.5),
                     dc::atan(b - c) * n + d * e);
});
using slots_six = std::tuple<arr, arr, int, arr, arr, arr>;

// ---- the random property harness ----------------------------------------------------------------

struct stats {
  index_t elements = 0, trials = 0, empty = 0, max_rank_seen = 0;
};

// One random trial of kernel k: values, partials, JVP, VJP and accumulation.
template <class T, int K, class Kern, class Slots>
void property_trial(Kern const &k, Slots const &slots, double lo, double hi, shape const &s,
                    std::mt19937 &rng, stats &st) {
  constexpr int NA = slot_info<Slots>::na;
  using Active = all_active_t<Slots>;
  dc::cpu const ex{1};
  T const sentinel = T(-12345.0);

  std::array<host<T>, NA> x;
  std::array<dc::view<T>, NA> xv;
  for (int a = 0; a < NA; ++a) {
    x[a] = host<T>(random_broadcast(s, rng));
    fill_uniform(x[a].v, rng, lo, hi);
    xv[a] = x[a].view();
  }
  std::string where = "shape " + dc::to_string(s);
  for (int a = 0; a < NA; ++a)
    where += ", arg " + std::to_string(a) + " " + dc::to_string(x[a].s);
  CAPTURE(where);
  auto args = call_args(slots, xv);

  // values
  std::array<host<T>, K> y;
  for (auto &h : y)
    h = host<T>(s, sentinel);
  std::apply([&](auto const &...a) { dc::apply(ex, k, out_pack(y), a...); }, args);

  // values and partials
  std::array<host<T>, K> y2;
  std::array<host<T>, K * NA> part;
  for (auto &h : y2)
    h = host<T>(s, sentinel);
  for (auto &h : part)
    h = host<T>(s, sentinel);
  std::apply(
      [&](auto const &...a) { dc::apply(ex, k, Active{}, out_pack(y2), out_pack(part), a...); },
      args);

  int bad_val = 0, bad_der = 0;
  for_each_index(s, [&](index_t const *idx, index_t flat) {
    T tv[NA];
    double dv[NA];
    for (int a = 0; a < NA; ++a) {
      tv[a] = x[a][bcast_offset(x[a].s, s, idx)];
      dv[a] = static_cast<double>(tv[a]);
    }
    auto ref = eval_plain<K, T>(k, slots, tv);
    for (int o = 0; o < K; ++o) {
      if (!close(double(y[o][flat]), ref[o], tol<T>::val))
        ++bad_val;
      if (!close(double(y2[o][flat]), ref[o], tol<T>::val))
        ++bad_val;
    }
    for (int a = 0; a < NA; ++a) {
      auto fd = central_fd<K>(k, slots, dv, a);
      for (int o = 0; o < K; ++o)
        if (!close(double(part[o * NA + a][flat]), fd[o], tol<T>::der)) {
          if (bad_der == 0) {
            MESSAGE("partial d out " << o << " / d arg " << a << " at flat " << flat << ": "
                                     << part[o * NA + a][flat] << " vs finite difference "
                                     << fd[o]);
          }
          ++bad_der;
        }
    }
  });
  CHECK(bad_val == 0);
  CHECK(bad_der == 0);

  // JVP: random tangents of the inputs' shapes
  std::array<host<T>, NA> tan;
  std::array<dc::view<T>, NA> tanv;
  for (int a = 0; a < NA; ++a) {
    tan[a] = host<T>(x[a].s);
    fill_uniform(tan[a].v, rng, -1, 1);
    tanv[a] = tan[a].view();
  }
  std::array<host<T>, K> yj, tj;
  for (auto &h : yj)
    h = host<T>(s, sentinel);
  for (auto &h : tj)
    h = host<T>(s, sentinel);
  dc::jvp(ex, k, out_pack(yj), out_pack(tj), pack_of(args), in_pack(tanv));

  // VJP: random output cotangents; input cotangents summed over broadcast dimensions
  std::array<host<T>, K> ybar;
  for (auto &h : ybar) {
    h = host<T>(s);
    fill_uniform(h.v, rng, -1, 1);
  }
  std::array<host<T>, NA> xbar, xacc, xacc0;
  for (int a = 0; a < NA; ++a) {
    xbar[a] = host<T>(x[a].s, sentinel);
    xacc[a] = host<T>(x[a].s);
    fill_uniform(xacc[a].v, rng, -1, 1);
    xacc0[a] = xacc[a];
  }
  auto ybar_in = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return dc::in(ybar[I].view()...);
  }
  (std::make_index_sequence<K>{});
  dc::vjp(ex, k, out_pack(xbar), pack_of(args), ybar_in);
  dc::vjp(ex, k, out_pack(xacc), pack_of(args), ybar_in, /*accumulate=*/true);

  // value_and_vjp: one pass, vjp's cotangents and the values of the dual evaluation (apply with
  // partials) to a few rounding errors (the compiler may contract other multiply-adds into FMAs
  // in the two instantiations); accumulating into the same starting cotangents as vjp's. Checked
  // below, after the expected cotangents.
  std::array<host<T>, K> yv;
  std::array<host<T>, NA> xbv, xaccv;
  for (auto &h : yv)
    h = host<T>(s, sentinel);
  for (int a = 0; a < NA; ++a) {
    xbv[a] = host<T>(x[a].s, sentinel);
    xaccv[a] = xacc0[a];
  }
  dc::value_and_vjp(ex, k, out_pack(yv), out_pack(xbv), pack_of(args), ybar_in);
  dc::value_and_vjp(ex, k, out_pack(yv), out_pack(xaccv), pack_of(args), ybar_in, true);
  double const ulps = 8 * double(std::numeric_limits<T>::epsilon());
  int bad_vv = 0;
  for (int o = 0; o < K; ++o)
    for (index_t e = 0; e < s.size(); ++e)
      bad_vv += !close(double(yv[o][e]), double(y2[o][e]), ulps);

  // Expected, from the partials
  std::vector<std::vector<double>> want_x(NA), scale_x(NA);
  for (int a = 0; a < NA; ++a) {
    want_x[a].assign(std::size_t(x[a].s.size()), 0.0);
    scale_x[a].assign(std::size_t(x[a].s.size()), 0.0);
  }
  int bad_jvp = 0, bad_jvp_val = 0;
  double u_jv = 0, u_jv_abs = 0; // <ybar, J t>
  for_each_index(s, [&](index_t const *idx, index_t flat) {
    for (int o = 0; o < K; ++o) {
      double tsum = 0, tabs = 0;
      for (int a = 0; a < NA; ++a) {
        index_t j = bcast_offset(x[a].s, s, idx);
        double p = double(part[o * NA + a][flat]);
        tsum += p * double(tan[a][j]);
        tabs += std::abs(p * double(tan[a][j]));
        double c = double(ybar[o][flat]) * p;
        want_x[a][std::size_t(j)] += c;
        scale_x[a][std::size_t(j)] += std::abs(c);
      }
      if (!close(double(tj[o][flat]), tsum, tol<T>::lin, tabs))
        ++bad_jvp;
      // the value from the width-1 dual evaluation (may differ from the width-NA one by FMA
      // contraction)
      if (!close(double(yj[o][flat]), double(y2[o][flat]), tol<T>::val))
        ++bad_jvp_val;
      u_jv += double(ybar[o][flat]) * double(tj[o][flat]);
      u_jv_abs += std::abs(double(ybar[o][flat]) * double(tj[o][flat]));
    }
  });
  CHECK(bad_jvp == 0);
  CHECK(bad_jvp_val == 0);

  int bad_vjp = 0, bad_acc = 0;
  double vjp_v = 0, vjp_v_abs = 0; // <J^T ybar, t>
  for (int a = 0; a < NA; ++a)
    for (index_t j = 0; j < x[a].s.size(); ++j) {
      if (!close(double(xbar[a][j]), want_x[a][std::size_t(j)], tol<T>::lin,
                 scale_x[a][std::size_t(j)])) {
        if (bad_vjp == 0)
          MESSAGE("vjp arg " << a << " element " << j << ": " << xbar[a][j] << " vs "
                             << want_x[a][std::size_t(j)]);
        ++bad_vjp;
      }
      // xbar += contribution (an FMA may fuse the addition, so allow the last bit)
      if (!close(double(xacc[a][j]), double(xacc0[a][j]) + double(xbar[a][j]), tol<T>::lin,
                 std::abs(double(xacc0[a][j])) + scale_x[a][std::size_t(j)]))
        ++bad_acc;
      vjp_v += double(xbar[a][j]) * double(tan[a][j]);
      vjp_v_abs += std::abs(double(xbar[a][j]) * double(tan[a][j]));
    }
  CHECK(bad_vjp == 0);
  CHECK(bad_acc == 0);
  for (int a = 0; a < NA; ++a)
    for (index_t j = 0; j < x[a].s.size(); ++j) {
      double const sc = scale_x[a][std::size_t(j)];
      bad_vv += !close(double(xbv[a][j]), double(xbar[a][j]), ulps, sc);
      bad_vv +=
          !close(double(xaccv[a][j]), double(xacc[a][j]), ulps, std::abs(double(xacc0[a][j])) + sc);
    }
  CHECK(bad_vv == 0);
  CHECK(close(vjp_v, u_jv, 10 * tol<T>::lin, std::max(vjp_v_abs, u_jv_abs)));

  ++st.trials;
  st.elements += s.size();
  st.empty += s.size() == 0;
  st.max_rank_seen = std::max<index_t>(st.max_rank_seen, s.rank);
}

template <class T, int K, class Kern, class Slots>
stats property_run(Kern const &k, Slots const &slots, double lo, double hi, unsigned seed,
                   int trials) {
  std::mt19937 rng(seed);
  stats st;
  for (int t = 0; t < trials; ++t) {
    shape s = random_shape(rng, dc::max_rank, 1200, true);
    property_trial<T, K>(k, slots, lo, hi, s, rng, st);
  }
  // the shapes drawn are not all trivial
  CHECK(st.empty > 0);
  CHECK(st.max_rank_seen == dc::max_rank);
  CHECK(st.elements > 1000);
  return st;
}

TEST_CASE_TEMPLATE("random shapes: values, partials (vs finite differences), jvp, vjp", T, double,
                   float) {
  SUBCASE("2 arrays, double scalar, captured constant, 2 outputs") {
    property_run<T, 2>(k_two, slots_two{arr{}, 1.7, arr{}}, -2, 2, 11, 60);
  }
  SUBCASE("1 array, 1 output") { property_run<T, 1>(k_one, slots_one{}, -3, 3, 12, 60); }
  SUBCASE("5 arrays, int scalar, captured constant, 3 outputs") {
    property_run<T, 3>(k_six, slots_six{arr{}, arr{}, 3, arr{}, arr{}, arr{}}, -1.5, 1.5, 13, 60);
  }
}

TEST_CASE("random shapes: scalar (rank 0) arrays and plain scalar arguments only") {
  std::mt19937 rng(5);
  stats st;
  for (int t = 0; t < 3; ++t)
    property_trial<double, 2>(k_two, slots_two{arr{}, -0.4, arr{}}, -2, 2, shape{}, rng, st);
  CHECK(st.trials == 3);
  // every argument a plain scalar: the output shape alone sets the iteration space
  double out[6];
  std::fill(out, out + 6, -1.0);
  dc::apply(dc::cpu{1}, k_two,
            dc::out(dc::view<double>(out, {2, 1}), dc::view<double>(out + 3, {2, 1})), 0.5, 1.7,
            -0.25);
  auto ref = out_values<2>(k_two(0.5, 1.7, -0.25));
  for (int i = 0; i < 2; ++i) {
    CHECK(out[i] == doctest::Approx(ref[0]).epsilon(1e-13));
    CHECK(out[3 + i] == doctest::Approx(ref[1]).epsilon(1e-13));
  }
  CHECK(out[2] == -1.0);
}

// ---- helpers for the tests below ----------------------------------------------------------------

template <class T, std::size_t N> std::array<dc::view<T>, N> views_of(std::array<host<T>, N> &a) {
  std::array<dc::view<T>, N> r;
  for (std::size_t i = 0; i < N; ++i)
    r[i] = a[i].view();
  return r;
}

// apply with partials; K values then K * NA partials, all as views
template <class Act, class Kern, class Args, class V, std::size_t K, std::size_t P>
void run_partials(dc::cpu ex, Kern const &k, Args const &args, std::array<V, K> const &ys,
                  std::array<V, P> const &ps) {
  std::apply([&](auto const &...a) { dc::apply(ex, k, Act{}, in_pack(ys), in_pack(ps), a...); },
             args);
}
template <class Act, class Kern, class Args, class V, std::size_t NA, std::size_t K>
void run_vjp(dc::cpu ex, Kern const &k, Args const &args, std::array<V, NA> const &xbars,
             std::array<V, K> const &ybars, bool accumulate = false) {
  dc::vjp(ex, k, Act{}, in_pack(xbars), pack_of(args), in_pack(ybars), accumulate);
}

template <class T> index_t bit_differences(host<T> const &a, host<T> const &b) {
  if (!(a.s == b.s))
    return -1;
  index_t n = 0;
  for (index_t i = 0; i < a.s.size(); ++i)
    n += !same_bits(a[i], b[i]);
  return n;
}
// Elements of a strided view that differ (bitwise) from a contiguous array of the same shape.
template <class T> index_t bit_differences(dc::view<T> const &a, host<T> const &b) {
  index_t n = 0;
  for_each_index(b.s,
                 [&](index_t const *idx, index_t flat) { n += !same_bits(at(a, idx), b[flat]); });
  return n;
}
template <class T>
index_t written_elements(strided<T> const &st) { // storage elements that are no longer NaN
  index_t n = 0;
  for (T x : st.store)
    n += !std::isnan(x);
  return n;
}

// Whether this translation unit fuses a * b + c into one FMA (GCC's default -ffp-contract=fast on a
// CPU with FMA, clang's -ffp-contract=on). Then two different instantiations of the same arithmetic
// (chunked and unchunked evaluation, SIMD and one element at a time) may round differently, and
// only closeness can be required of them. (Same instantiation, other threads or strides: always
// exact.)
[[gnu::noinline]] double mul_add(double a, double b, double c) { return a * b + c; }
bool fma_contraction() {
  volatile double a = 1 + 0x1p-27, c = -1; // a * a = 1 + 2^-26 + 2^-54 exactly
  return mul_add(a, a, c) != 0x1p-26;      // 2^-26 when the product is rounded first
}

// The same number: identical bits, except that +0 and -0 are not distinguished. (The sign of a zero
// partial depends on how constants enter the dual arithmetic: in a chunk where y is not seeded,
// x * y gives x.d * y where a full evaluation gives x.d * y + x * 0, which is +0 where the former
// is -0.)
template <class T> bool identical(T a, T b) { return same_bits(a, b) || (a == T(0) && b == T(0)); }
// Elements that differ: not identical (exact), or not within a few rounding errors (otherwise).
template <class T> index_t differences(host<T> const &a, host<T> const &b, bool exact) {
  if (!(a.s == b.s))
    return -1;
  double const rel = std::is_same_v<T, double> ? 1e-13 : 1e-5;
  index_t n = 0;
  for (index_t i = 0; i < a.s.size(); ++i)
    n += exact ? !identical(a[i], b[i]) : !close(double(a[i]), double(b[i]), rel);
  return n;
}

// ---- chunked evaluation -------------------------------------------------------------------------

// 7 arguments, 3 outputs.
constexpr auto k_seven = dc::kernel([](auto a, auto b, auto c, auto d, auto e, auto f, auto g) {
  auto u = a * b * c + dc::sin(d) * e;
  return dc::outputs(u - f * g, dc::exp(f * 0.3) * g - a * d, dc::tanh(b + c + d + e + f + g) * u);
});
using slots_seven = std::tuple<arr, arr, arr, arr, arr, arr, arr>;

// Partials and vjp (plain and accumulating) of kernel k with active set Act, then the same with
// each chunked active set: the same numbers. Bit for bit (up to the sign of zero) when
// multiply-adds are not contracted and the kernel does not divide: a dual quotient's value is x *
// (1 / y), a plain one's x / y, and an operand of a division may be a dual in one chunking and
// plain in the other.
template <class T, int K, class Act, class... Chunked, class Kern, class Slots>
void chunk_case(Kern const &k, Slots const &slots, bool divides, std::vector<shape> const &shapes,
                shape const &s, std::mt19937 &rng) {
  constexpr int NA = Act::count, NX = slot_info<Slots>::na;
  REQUIRE(shapes.size() == std::size_t(NX));
  std::array<host<T>, NX> x;
  for (int a = 0; a < NX; ++a) {
    x[a] = host<T>(shapes[std::size_t(a)]);
    fill_uniform(x[a].v, rng, -1.5, 1.5);
  }
  auto args = call_args(slots, views_of(x));
  auto xs_of = [&](int q) -> shape const & {
    return x[slot_info<Slots>::array_index(Act::positions[q])].s;
  };
  dc::cpu const ex{1};

  std::array<host<T>, K> y0;
  std::array<host<T>, K * NA> p0;
  for (auto &h : y0)
    h = host<T>(s, T(7));
  for (auto &h : p0)
    h = host<T>(s, T(7));
  run_partials<Act>(ex, k, args, views_of(y0), views_of(p0));

  // the unchunked partials are right (finite differences in double)
  int bad = 0;
  for_each_index(s, [&](index_t const *idx, index_t flat) {
    double v[NX];
    for (int a = 0; a < NX; ++a)
      v[a] = double(x[a][bcast_offset(x[a].s, s, idx)]);
    for (int q = 0; q < NA; ++q) {
      auto fd = central_fd<K>(k, slots, v, slot_info<Slots>::array_index(Act::positions[q]));
      for (int o = 0; o < K; ++o)
        bad += !close(double(p0[o * NA + q][flat]), fd[o], tol<T>::der);
    }
  });
  CHECK(bad == 0);

  std::array<host<T>, K> ybar;
  for (auto &h : ybar) {
    h = host<T>(s);
    fill_uniform(h.v, rng, -1, 1);
  }
  std::array<host<T>, NA> xb0, xacc0;
  for (int q = 0; q < NA; ++q) {
    xb0[q] = host<T>(xs_of(q), T(7));
    xacc0[q] = host<T>(xs_of(q));
    fill_uniform(xacc0[q].v, rng, -1, 1);
  }
  auto const xacc_init = xacc0;
  run_vjp<Act>(ex, k, args, views_of(xb0), views_of(ybar));
  run_vjp<Act>(ex, k, args, views_of(xacc0), views_of(ybar), true);

  bool const exact = !divides && !fma_contraction();
  auto one_chunking = [&](auto chunked_act) {
    using C = decltype(chunked_act);
    CAPTURE(C::chunk);
    static_assert(C::count == NA);
    std::array<host<T>, K> y1;
    std::array<host<T>, K * NA> p1;
    for (auto &h : y1)
      h = host<T>(s, T(-7));
    for (auto &h : p1)
      h = host<T>(s, T(-7));
    run_partials<C>(ex, k, args, views_of(y1), views_of(p1));
    for (int o = 0; o < K; ++o)
      CHECK(differences(y1[o], y0[o], exact) == 0);
    for (int i = 0; i < K * NA; ++i)
      CHECK(differences(p1[i], p0[i], exact) == 0);

    std::array<host<T>, NA> xb1, xacc1;
    for (int q = 0; q < NA; ++q) {
      xb1[q] = host<T>(xs_of(q), T(-7));
      xacc1[q] = xacc_init[q];
    }
    run_vjp<C>(ex, k, args, views_of(xb1), views_of(ybar));
    run_vjp<C>(ex, k, args, views_of(xacc1), views_of(ybar), true);
    for (int q = 0; q < NA; ++q) {
      CHECK(differences(xb1[q], xb0[q], exact) == 0);
      CHECK(differences(xacc1[q], xacc0[q], exact) == 0);
    }
  };
  (one_chunking(Chunked{}), ...);
  if (!exact)
    MESSAGE("chunked results compared to 1e-13 (double) / 1e-5 (float): " << std::string(
                divides ? "the kernel divides" : "multiply-adds are contracted to FMAs"));
}

TEST_CASE("chunked<1>, <2>, <3> equal the unchunked partials and vjp") {
  std::mt19937 rng(21);
  SUBCASE("double, 7 active inputs") {
    using A = std::remove_cv_t<decltype(dc::active<0, 1, 2, 3, 4, 5, 6>)>;
    chunk_case<double, 3, A, decltype(dc::chunked<1>(A{})), decltype(dc::chunked<2>(A{})),
               decltype(dc::chunked<3>(A{}))>(
        k_seven, slots_seven{}, false, {{5, 37}, {37}, {5, 1}, {5, 37}, {}, {5, 37}, {1, 37}},
        shape{5, 37}, rng);
  }
  // 5 active inputs around an int scalar (the same instantiation as the random tests)
  SUBCASE("float, 5 active inputs") {
    using A = all_active_t<slots_six>;
    chunk_case<float, 3, A, decltype(dc::chunked<1>(A{})), decltype(dc::chunked<2>(A{})),
               decltype(dc::chunked<3>(A{}))>(
        k_six, slots_six{arr{}, arr{}, 3, arr{}, arr{}, arr{}}, true,
        {{3, 1, 41}, {41}, {2, 1}, {3, 2, 41}, {1, 1, 1}}, shape{3, 2, 41}, rng);
  }
}

// ---- strided views ------------------------------------------------------------------------------

// Inputs and outputs as strided views (permuted, stepped, negative strides) against contiguous
// copies.
template <class T, int K, class Kern, class Slots>
void strided_trial(Kern const &k, Slots const &slots, std::mt19937 &rng) {
  constexpr int NA = slot_info<Slots>::na;
  using Act = all_active_t<Slots>;
  dc::cpu const ex{1};
  shape s;
  do
    s = random_shape(rng, 4, 600, false);
  while (s.rank == 0);
  std::array<host<T>, NA> x;
  std::array<strided<T>, NA> xs;
  std::array<dc::view<T>, NA> xsv;
  for (int a = 0; a < NA; ++a) {
    x[a] = host<T>(random_broadcast(s, rng));
    fill_uniform(x[a].v, rng, -1.5, 1.5);
    xs[a] = make_strided<T>(x[a].s, rng);
    copy_into(xs[a].v, x[a]);
    xsv[a] = xs[a].v;
  }
  std::string where = "shape " + dc::to_string(s);
  CAPTURE(where);
  auto args = call_args(slots, views_of(x));
  auto sargs = call_args(slots, xsv);

  std::array<host<T>, K> y;
  std::array<host<T>, K * NA> p;
  for (auto &h : y)
    h = host<T>(s);
  for (auto &h : p)
    h = host<T>(s);
  run_partials<Act>(ex, k, args, views_of(y), views_of(p));
  std::array<strided<T>, K> ys;
  std::array<strided<T>, K * NA> ps;
  std::array<dc::view<T>, K> ysv;
  std::array<dc::view<T>, K * NA> psv;
  for (int o = 0; o < K; ++o)
    ys[o] = make_strided<T>(s, rng), ysv[o] = ys[o].v;
  for (int i = 0; i < K * NA; ++i)
    ps[i] = make_strided<T>(s, rng), psv[i] = ps[i].v;
  run_partials<Act>(ex, k, sargs, ysv, psv);
  for (int o = 0; o < K; ++o) {
    CHECK(bit_differences(ysv[o], y[o]) == 0);
    CHECK(written_elements(ys[o]) == s.size()); // nothing outside the view was written
  }
  for (int i = 0; i < K * NA; ++i) {
    CHECK(bit_differences(psv[i], p[i]) == 0);
    CHECK(written_elements(ps[i]) == s.size());
  }

  // vjp: strided inputs, output cotangents and input cotangents
  std::array<host<T>, K> ybar;
  std::array<strided<T>, K> ybs;
  std::array<dc::view<T>, K> ybsv;
  for (int o = 0; o < K; ++o) {
    ybar[o] = host<T>(s);
    fill_uniform(ybar[o].v, rng, -1, 1);
    ybs[o] = make_strided<T>(s, rng);
    copy_into(ybs[o].v, ybar[o]);
    ybsv[o] = ybs[o].v;
  }
  std::array<host<T>, NA> xbar;
  std::array<strided<T>, NA> xbs;
  std::array<dc::view<T>, NA> xbsv;
  for (int a = 0; a < NA; ++a) {
    xbar[a] = host<T>(x[a].s);
    xbs[a] = make_strided<T>(x[a].s, rng);
    xbsv[a] = xbs[a].v;
  }
  run_vjp<Act>(ex, k, args, views_of(xbar), views_of(ybar));
  run_vjp<Act>(ex, k, sargs, xbsv, ybsv);
  for (int a = 0; a < NA; ++a) {
    CHECK(bit_differences(xbsv[a], xbar[a]) == 0);
    CHECK(written_elements(xbs[a]) == x[a].s.size());
  }
}

TEST_CASE_TEMPLATE("strided inputs and outputs equal contiguous copies bit for bit", T, double,
                   float) {
  std::mt19937 rng(31);
  for (int t = 0; t < 25; ++t) {
    strided_trial<T, 2>(k_two, slots_two{arr{}, 0.3, arr{}}, rng);
    strided_trial<T, 3>(k_six, slots_six{arr{}, arr{}, 2, arr{}, arr{}, arr{}}, rng);
  }
}

TEST_CASE("transposed, slice with a step and broadcast_to views") {
  using T = double;
  using Act = all_active_t<slots_two>;
  std::mt19937 rng(32);
  dc::cpu const ex{1};
  host<T> xt(shape{37, 13}), ybig(shape{75});
  fill_uniform(xt.v, rng, -2, 2);
  fill_uniform(ybig.v, rng, -2, 2);
  dc::view<T> xv = xt.view().transposed();         // (13, 37), strides (1, 13)
  dc::view<T> yv = ybig.view().slice(0, 1, 75, 2); // (37,), stride 2
  REQUIRE(xv.dims() == shape{13, 37});
  REQUIRE(yv.dims() == shape{37});
  CHECK(!xv.is_contiguous());
  // contiguous copies
  host<T> x(shape{13, 37}), y(shape{37});
  for_each_index(x.s, [&](index_t const *idx, index_t flat) { x[flat] = at(xv, idx); });
  for_each_index(y.s, [&](index_t const *idx, index_t flat) { y[flat] = at(yv, idx); });

  shape const s{13, 37};
  std::array<host<T>, 2> yc;
  std::array<host<T>, 4> pc;
  for (auto &h : yc)
    h = host<T>(s);
  for (auto &h : pc)
    h = host<T>(s);
  run_partials<Act>(ex, k_two, std::make_tuple(x.view(), 0.3, y.view()), views_of(yc),
                    views_of(pc));

  // outputs: a transposed buffer and every other column of a wider buffer
  host<T> o0(shape{37, 13}, T(99)), o1(shape{13, 74}, T(99));
  std::array<host<T>, 4> pb;
  for (auto &h : pb)
    h = host<T>(shape{37, 13}, T(99));
  std::array<dc::view<T>, 2> ysv{o0.view().transposed(), o1.view().slice(1, 0, 74, 2)};
  std::array<dc::view<T>, 4> psv;
  for (int i = 0; i < 4; ++i)
    psv[i] = pb[i].view().transposed();
  run_partials<Act>(ex, k_two, std::make_tuple(xv, 0.3, yv), ysv, psv);
  CHECK(bit_differences(ysv[0], yc[0]) == 0);
  CHECK(bit_differences(ysv[1], yc[1]) == 0);
  for (int i = 0; i < 4; ++i)
    CHECK(bit_differences(psv[i], pc[i]) == 0);
  for (index_t r = 0; r < 13; ++r)
    for (index_t c = 1; c < 74; c += 2)
      CHECK(o1[r * 74 + c] == 99); // the skipped columns are untouched

  // broadcast_to: y as a (13, 37) view with stride 0 gives the same values and partials
  std::array<host<T>, 2> yb;
  std::array<host<T>, 4> pbc;
  for (auto &h : yb)
    h = host<T>(s);
  for (auto &h : pbc)
    h = host<T>(s);
  run_partials<Act>(ex, k_two, std::make_tuple(x.view(), 0.3, y.view().broadcast_to(s)),
                    views_of(yb), views_of(pbc));
  for (int o = 0; o < 2; ++o)
    CHECK(bit_differences(yb[o], yc[o]) == 0);
  for (int i = 0; i < 4; ++i)
    CHECK(bit_differences(pbc[i], pc[i]) == 0);
  CHECK_THROWS_AS((void)y.view().broadcast_to(shape{13, 36}), dc::shape_error);
}

// ---- threads ------------------------------------------------------------------------------------

template <class T> void threads_case(shape const &s, shape const &yshape, std::mt19937 &rng) {
  using Act = all_active_t<slots_two>;
  REQUIRE(s.size() >= dc::detail::cpu_backend::parallel_threshold); // (two threads run it)
  host<T> x(s), y(yshape);
  fill_uniform(x.v, rng, -2, 2);
  fill_uniform(y.v, rng, -2, 2);
  auto args = std::make_tuple(x.view(), 0.9, y.view());
  std::array<host<T>, 2> ybar;
  for (auto &h : ybar) {
    h = host<T>(s);
    fill_uniform(h.v, rng, -1, 1);
  }
  std::array<host<T>, 2> yv[2], xbar[2];
  std::array<host<T>, 4> pv[2];
  for (int t = 0; t < 2; ++t) {
    dc::cpu const ex{t + 1};
    for (auto &h : yv[t])
      h = host<T>(s);
    for (auto &h : pv[t])
      h = host<T>(s);
    run_partials<Act>(ex, k_two, args, views_of(yv[t]), views_of(pv[t]));
    xbar[t][0] = host<T>(s);
    xbar[t][1] = host<T>(yshape);
    run_vjp<Act>(ex, k_two, args, views_of(xbar[t]), views_of(ybar));
  }
  for (int o = 0; o < 2; ++o)
    CHECK(bit_differences(yv[0][o], yv[1][o]) == 0);
  for (int i = 0; i < 4; ++i)
    CHECK(bit_differences(pv[0][i], pv[1][i]) == 0);
  for (int a = 0; a < 2; ++a)
    CHECK(bit_differences(xbar[0][a], xbar[1][a]) == 0);
  // and the broadcast input's cotangent is the sum over the broadcast dimensions
  std::vector<double> want(std::size_t(yshape.size()), 0.0), scale(want.size(), 0.0);
  for_each_index(s, [&](index_t const *idx, index_t flat) {
    index_t j = bcast_offset(yshape, s, idx);
    double c = double(ybar[0][flat]) * double(pv[0][1][flat]) +
               double(ybar[1][flat]) * double(pv[0][3][flat]);
    want[std::size_t(j)] += c;
    scale[std::size_t(j)] += std::abs(c);
  });
  int bad = 0;
  for (index_t j = 0; j < yshape.size(); ++j)
    bad += !close(double(xbar[1][1][j]), want[std::size_t(j)], tol<T>::lin, scale[std::size_t(j)]);
  CHECK(bad == 0);
}

TEST_CASE_TEMPLATE("1 thread and 2 threads give identical results", T, double, float) {
#if defined(_OPENMP)
  CHECK(dc::cpu{2}.thread_count() == 2);
#endif
  std::mt19937 rng(41);
  threads_case<T>(shape{181, 363}, shape{363}, rng);    // 65703 elements, a broadcast row
  threads_case<T>(shape{181, 363}, shape{181, 1}, rng); // a broadcast column
  threads_case<T>(shape{3, 77, 191}, shape{77, 1}, rng);
  // just above the two blocks from which the threads share a pass: three blocks, the last short
  threads_case<T>(shape{20001}, shape{1}, rng);
  threads_case<T>(shape{97, 211}, shape{211}, rng); // 20467 elements in rows of 211
}

// ---- inactive inputs ----------------------------------------------------------------------------

template <class X> constexpr double width_code() {
  if constexpr (dc::is_dual_v<X>)
    return std::remove_cvref_t<X>::size;
  else
    return 0;
}

// The second output reports 10 * (dual width of x) + (dual width of m).
constexpr auto k_mask = dc::kernel([](auto x, auto m, auto y) {
  double const code = 10 * width_code<decltype(x)>() + width_code<decltype(m)>();
  auto r = x * y;
  if (m > 0.5)
    r = x + y * y;
  return dc::outputs(r, code);
});

TEST_CASE_TEMPLATE("inactive inputs: not dualized, and a mask input decides the branch", T, double,
                   float) {
  std::mt19937 rng(51);
  dc::cpu const ex{1};
  shape const s{7, 29};
  host<T> x(s), m(shape{29}), y(shape{7, 1});
  fill_uniform(x.v, rng, -2, 2);
  fill_uniform(y.v, rng, -2, 2);
  std::bernoulli_distribution coin(0.5);
  for (auto &v : m.v)
    v = coin(rng) ? T(1) : T(0); // differs between SIMD lanes of a row
  auto args = std::make_tuple(x.view(), m.view(), y.view());
  using A02 = std::remove_cv_t<decltype(dc::active<0, 2>)>;

  std::array<host<T>, 2> yv, yv1, yvals;
  std::array<host<T>, 4> pv, pv1;
  for (auto &h : yv)
    h = host<T>(s, T(-1));
  for (auto &h : yv1)
    h = host<T>(s, T(-1));
  for (auto &h : yvals)
    h = host<T>(s, T(-1));
  for (auto &h : pv)
    h = host<T>(s, T(-1));
  for (auto &h : pv1)
    h = host<T>(s, T(-1));
  run_partials<A02>(ex, k_mask, args, views_of(yv), views_of(pv));
  run_partials<decltype(dc::chunked<1>(A02{}))>(ex, k_mask, args, views_of(yv1), views_of(pv1));
  std::apply([&](auto const &...a) { dc::apply(ex, k_mask, out_pack(yvals), a...); }, args);

  int bad = 0, n_true = 0;
  bool const exact = !fma_contraction();
  for_each_index(s, [&](index_t const *idx, index_t flat) {
    double xv = double(x[flat]), mv = double(m[idx[1]]), yy = double(y[idx[0]]);
    bool on = mv > 0.5;
    n_true += on;
    double r = on ? xv + yy * yy : xv * yy, dx = on ? 1 : yy, dy = on ? 2 * yy : xv;
    bad += !close(double(yv[0][flat]), r, tol<T>::val);
    bad += !close(double(yvals[0][flat]), r, tol<T>::val);
    bad += !close(double(pv[0][flat]), dx, tol<T>::val); // d r / d x
    bad += !close(double(pv[1][flat]), dy, tol<T>::val); // d r / d y
    bad += yv[1][flat] != T(20);                         // x is a dual of width 2, m a plain value
    bad += yv1[1][flat] != T(10);                        // chunked<1>: width 1
    bad += yvals[1][flat] != T(0);                       // values only: nothing dualized
    bad += pv[2][flat] != T(0) || pv[3][flat] != T(0);   // the code is a constant
    for (int i = 0; i < 2; ++i)                          // chunked<1>: the same partials
      bad += exact ? !identical(pv1[i][flat], pv[i][flat])
                   : !close(double(pv1[i][flat]), double(pv[i][flat]), 1e-6);
  });
  CHECK(bad == 0);
  CHECK(n_true > 0);
  CHECK(n_true < s.size());

  // jvp seeds one tangent direction: width 1
  host<T> tx(x.s), ty(y.s);
  fill_uniform(tx.v, rng, -1, 1);
  fill_uniform(ty.v, rng, -1, 1);
  std::array<host<T>, 2> yj, tj;
  for (auto &h : yj)
    h = host<T>(s);
  for (auto &h : tj)
    h = host<T>(s);
  dc::jvp(ex, k_mask, dc::active<0, 2>, out_pack(yj), out_pack(tj), pack_of(args),
          dc::in(tx.view(), ty.view()));
  int badj = 0;
  for_each_index(s, [&](index_t const *idx, index_t flat) {
    double want = double(pv[0][flat]) * double(tx[flat]) + double(pv[1][flat]) * double(ty[idx[0]]);
    badj += !close(double(tj[0][flat]), want, tol<T>::lin, 10);
    badj += yj[1][flat] != T(10) || tj[1][flat] != T(0);
  });
  CHECK(badj == 0);
}

// ---- HM-LSTM cell update: data-dependent branches on inactive masks -----------------------------

constexpr auto hm_cell = [](auto z, auto zb, auto c, auto f, auto i, auto g) {
  if (z == 1)
    return dc::sigmoid(i) * dc::tanh(g); // FLUSH
  if (z == 0 && zb == 0)
    return c;                                               // COPY
  return dc::sigmoid(f) * c + dc::sigmoid(i) * dc::tanh(g); // UPDATE
};
constexpr auto k_hm = dc::kernel(hm_cell);
constexpr auto k_hm_elem = dc::kernel(hm_cell, dc::per_element);
using slots_hm = std::tuple<arr, arr, arr, arr, arr, arr>;

template <class T> void hm_case(bool row_uniform, std::mt19937 &rng) {
  using Act = std::remove_cv_t<decltype(dc::active<2, 3, 4, 5>)>;
  dc::cpu const ex{1};
  int const n = 67;
  shape const s{n, n};
  shape const ms = row_uniform ? shape{n, 1} : shape{n};
  host<T> z(ms), zb(ms);
  std::uniform_int_distribution<int> three(0, 2);
  for (index_t j = 0; j < ms.size(); ++j) {
    int b = three(rng); // FLUSH, COPY or UPDATE about equally often
    z[j] = T(b == 0 ? 1 : 0);
    zb[j] = T(b == 2 ? 1 : 0);
  }
  std::array<host<T>, 4> cfig;
  for (auto &h : cfig) {
    h = host<T>(s);
    fill_uniform(h.v, rng, -2, 2);
  }
  std::array<dc::view<T>, 6> xv{z.view(),       zb.view(),      cfig[0].view(),
                                cfig[1].view(), cfig[2].view(), cfig[3].view()};
  auto args = call_args(slots_hm{}, xv);

  std::array<host<T>, 1> y{host<T>(s, T(-9))}, ye{host<T>(s, T(-9))};
  std::array<host<T>, 4> p, pe;
  for (auto &h : p)
    h = host<T>(s, T(-9));
  for (auto &h : pe)
    h = host<T>(s, T(-9));
  run_partials<Act>(ex, k_hm, args, views_of(y), views_of(p));
  run_partials<Act>(ex, k_hm_elem, args, views_of(ye), views_of(pe));

  auto sig = [](double a) { return 1 / (1 + std::exp(-a)); };
  int count[3] = {0, 0, 0}, bad = 0, bad_fd = 0, bad_exact = 0;
  for_each_index(s, [&](index_t const *idx, index_t flat) {
    index_t mj = bcast_offset(ms, s, idx);
    double zz = double(z[mj]), zzb = double(zb[mj]);
    double c = double(cfig[0][flat]), f = double(cfig[1][flat]), i = double(cfig[2][flat]),
           g = double(cfig[3][flat]);
    double si = sig(i), sf = sig(f), tg = std::tanh(g);
    double di = si * (1 - si) * tg, dg = si * (1 - tg * tg);
    double want[5]; // value, d/dc, d/df, d/di, d/dg
    int branch;
    if (zz == 1) {
      branch = 0;
      double w[5] = {si * tg, 0, 0, di, dg};
      std::copy(w, w + 5, want);
    } else if (zzb == 0) {
      branch = 1;
      double w[5] = {c, 1, 0, 0, 0};
      std::copy(w, w + 5, want);
    } else {
      branch = 2;
      double w[5] = {sf * c + si * tg, sf, sf * (1 - sf) * c, di, dg};
      std::copy(w, w + 5, want);
    }
    ++count[branch];
    bad += !close(double(y[0][flat]), want[0], tol<T>::val);
    for (int a = 0; a < 4; ++a)
      bad += !close(double(p[a][flat]), want[a + 1], tol<T>::val);
    // the structural zeros and ones are exact
    if (branch == 0)
      bad_exact += p[0][flat] != 0 || p[1][flat] != 0;
    if (branch == 1)
      bad_exact += y[0][flat] != cfig[0][flat] || p[0][flat] != 1 || p[1][flat] != 0 ||
                   p[2][flat] != 0 || p[3][flat] != 0;
    // and against finite differences of the lambda itself
    double v[6] = {zz, zzb, c, f, i, g};
    for (int a = 0; a < 4; ++a) {
      auto fd = central_fd<1>(k_hm, slots_hm{}, v, a + 2);
      bad_fd += !close(double(p[a][flat]), fd[0], tol<T>::der);
    }
  });
  CHECK(count[0] > 0);
  CHECK(count[1] > 0);
  CHECK(count[2] > 0);
  CHECK(bad == 0);
  CHECK(bad_exact == 0);
  CHECK(bad_fd == 0);

  // one element at a time gives the same results, up to the SIMD exp / tanh approximations (a
  // few ulp from the C library, in float and double)
  double const rel = std::is_same_v<T, double> ? 1e-14 : 2e-6;
  int badf = 0;
  for (index_t j = 0; j < s.size(); ++j) {
    badf += !close(double(ye[0][j]), double(y[0][j]), rel);
    for (int a = 0; a < 4; ++a)
      badf += !close(double(pe[a][j]), double(p[a][j]), rel);
  }
  CHECK(badf == 0);
}

TEST_CASE_TEMPLATE("HM-LSTM cell: FLUSH / COPY / UPDATE branches on inactive masks", T, double,
                   float) {
  std::mt19937 rng(61);
  SUBCASE("random masks (divergent SIMD lanes)") { hm_case<T>(false, rng); }
  SUBCASE("row-uniform masks") { hm_case<T>(true, rng); }
}

// ---- dc::branch: divergent batches at select's cost, select's results (issue 41 item 3) ---------
// The library's HM-LSTM cell (cells::hmlstm_update, written with dc::branch) and the same cell
// with `if` statements (hm_cell above: one evaluation per path) equal, bit for bit in values,
// partials and VJP, the branch-free select formulation doing the same operations in the same order,
// for masks all FLUSH, all COPY, all UPDATE, and random per element, per row (1 x n: every batch
// divergent), per column (n x 1: every batch uniform); on 1 and 2 threads alike.
constexpr auto k_hm_select = dc::kernel([](auto z, auto zb, auto c, auto f, auto i, auto g) {
  using R = decltype(dc::sigmoid(f) * c + dc::sigmoid(i) * dc::tanh(g));
  auto ig = dc::sigmoid(i) * dc::tanh(g);
  return R(dc::select(z == 0 && zb == 0, R(c),
                      R(dc::select(z == 1, R(ig), R(dc::sigmoid(f) * c + ig)))));
});

template <class T, class K>
std::array<std::vector<T>, 9> hm_results(K const &k, int threads, shape const &ms, shape const &s,
                                         std::vector<T> const &z, std::vector<T> const &zb,
                                         std::array<host<T>, 5> &x) {
  dc::cpu const ex{threads};
  std::array<std::vector<T>, 9> r; // value, 4 partials, 4 cotangents
  for (auto &v : r)
    v.assign(std::size_t(s.size()), T(-7));
  auto o = [&](std::size_t q) { return dc::view<T>(r[q].data(), s); };
  dc::view<T const> zv(z.data(), ms), zbv(zb.data(), ms);
  dc::apply(ex, k, dc::active<2, 3, 4, 5>, dc::out(o(0)), dc::out(o(1), o(2), o(3), o(4)), zv, zbv,
            x[0].view(), x[1].view(), x[2].view(), x[3].view());
  dc::vjp(ex, k, dc::active<2, 3, 4, 5>, dc::out(o(5), o(6), o(7), o(8)),
          dc::in(zv, zbv, x[0].view(), x[1].view(), x[2].view(), x[3].view()), dc::in(x[4].view()));
  return r;
}

TEST_CASE_TEMPLATE("dc::branch: the HM-LSTM cell equals its select formulation bit for bit", T,
                   float, double) {
  std::mt19937 rng(41);
  index_t const rows = 181, cols = 203; // > 2^15 elements: 2 threads split it; partial batches
  shape const s{rows, cols};
  char const *names[] = {"all FLUSH", "all COPY", "all UPDATE", "1 x n", "n x 1", "n x n"};
  for (int m = 0; m < 6; ++m) {
    CAPTURE(names[m]);
    shape const ms = m == 3 ? shape{cols} : m == 4 ? shape{rows, 1} : m == 5 ? s : shape{1};
    std::vector<T> z(std::size_t(ms.size())), zb(z.size());
    std::uniform_int_distribution<int> three(0, 2);
    for (std::size_t j = 0; j < z.size(); ++j) {
      int const b = m < 3 ? m : three(rng); // 0 FLUSH, 1 COPY, 2 UPDATE
      z[j] = T(b == 0 ? 1 : 0);
      zb[j] = T(b == 2 ? 1 : 0);
    }
    std::array<host<T>, 5> x; // c, f, i, g, the output cotangent
    for (auto &h : x) {
      h = host<T>(s);
      fill_uniform(h.v, rng, -3, 3);
    }
    auto const want = hm_results<T>(k_hm_select, 1, ms, s, z, zb, x);
    int bad_branch = 0, bad_if = 0, bad_threads = 0;
    for (int threads : {1, 2}) {
      auto const br = hm_results<T>(dc::cells::hmlstm_update, threads, ms, s, z, zb, x);
      auto const fi = hm_results<T>(k_hm, threads, ms, s, z, zb, x);
      auto const sel2 = hm_results<T>(k_hm_select, threads, ms, s, z, zb, x);
      for (std::size_t q = 0; q < want.size(); ++q) {
        std::size_t const bytes = want[q].size() * sizeof(T);
        bad_branch += std::memcmp(br[q].data(), want[q].data(), bytes) != 0;
        bad_if += std::memcmp(fi[q].data(), want[q].data(), bytes) != 0;
        bad_threads += std::memcmp(sel2[q].data(), want[q].data(), bytes) != 0;
      }
    }
    CHECK(bad_branch == 0);
    CHECK(bad_if == 0);
    CHECK(bad_threads == 0);
  }
}

// dc::branch in general: results equal select's bit for bit (the lanes of the side not taken --
// log of a negative x, NaN -- blended away), also under an `if` that splits the batch first (the
// uniformity test then looks at the running lanes only), and on plain numbers.
constexpr auto k_branch_log = dc::kernel([](auto x, auto y) {
  auto a = x * y;
  if (y > 1) // an `if` that splits batches before the branch: both paths use it
    a = a + y;
  return dc::branch(
      x > 0, [&] { return dc::log(x) * a; }, [&] { return a + a; });
});
constexpr auto k_select_log = dc::kernel([](auto x, auto y) {
  auto a = x * y;
  if (y > 1)
    a = a + y;
  return dc::select(x > 0, dc::log(x) * a, a + a);
});

TEST_CASE_TEMPLATE("dc::branch equals select bit for bit, after an if, on batches and numbers", T,
                   float, double) {
  std::mt19937 rng(42);
  index_t const n = 40000;
  shape const s{n};
  std::array<host<T>, 3> x; // x, y, the output cotangent
  for (auto &h : x) {
    h = host<T>(s);
    fill_uniform(h.v, rng, -2, 2);
  }
  for (index_t j = 0; j < n / 2; ++j) // the first half in blocks: uniform batches both ways
    x[0][j] = (j / 64) % 2 ? std::abs(x[0][j]) + T(0.1) : -std::abs(x[0][j]);
  auto run = [&](auto const &k, int threads) {
    dc::cpu const ex{threads};
    std::array<std::vector<T>, 5> r;
    for (auto &v : r)
      v.assign(std::size_t(n), T(-7));
    auto o = [&](std::size_t q) { return dc::view<T>(r[q].data(), s); };
    dc::apply(ex, k, dc::active<0, 1>, dc::out(o(0)), dc::out(o(1), o(2)), x[0].view(),
              x[1].view());
    dc::vjp(ex, k, dc::active<0, 1>, dc::out(o(3), o(4)), dc::in(x[0].view(), x[1].view()),
            dc::in(x[2].view()));
    return r;
  };
  auto const want = run(k_select_log, 1);
  int bad = 0, nan = 0;
  for (int threads : {1, 2}) {
    auto const got = run(k_branch_log, threads);
    for (std::size_t q = 0; q < want.size(); ++q)
      bad += std::memcmp(got[q].data(), want[q].data(), want[q].size() * sizeof(T)) != 0;
  }
  for (index_t j = 0; j < n; ++j) // the NaN of log(x < 0) never reaches a result
    nan += std::isnan(want[0][std::size_t(j)]) || std::isnan(want[1][std::size_t(j)]);
  CHECK(bad == 0);
  CHECK(nan == 0);
  // plain numbers: one side, the other never evaluated
  int calls = 0;
  auto one = dc::branch(
      T(2) > T(0), [&] { return ++calls, T(1); }, [&] { return ++calls, T(2); });
  CHECK(one == T(1));
  CHECK(calls == 1);
}

// ---- data-dependent loops and early returns -----------------------------------------------------

// A loop whose trip count depends on the value (against a float scalar limit), an early return, and
// a second loop whose condition compares two duals; SIMD lanes diverge.
constexpr auto k_loop = dc::kernel([](auto x, float limit, auto y) {
  auto a = x;
  int halvings = 0;
  while (a > limit && halvings < 64) {
    a = a * 0.5;
    ++halvings;
  }
  if (y < 0.0)
    return dc::outputs(a * y, a); // early return
  auto b = y;
  for (int j = 0; j < 4 && b < a; ++j)
    b = b * 1.5 + a * 0.25;
  return dc::outputs(a + b, a * b);
});

TEST_CASE_TEMPLATE("data-dependent loops and early returns: finite-difference-correct derivatives",
                   T, double, float) {
  property_run<T, 2>(k_loop, std::tuple<arr, float, arr>{arr{}, 2.0f, arr{}}, -3, 30, 71, 60);
}

// ---- a lane's results do not depend on its neighbours ------------------------------------------
// A divergent batch is evaluated once per path with every lane computing; the lanes of the other
// path -- log of a negative x under `if (x > 0)` -- are blended away and must not send the batch
// down the lane-by-lane rerun (plain numbers: for float another log, other bits, and 8x slower),
// and a lane whose partials are not finite (log at 0, NaN data) is rerun alone, not with its
// batch. Each element's value, partials and VJP in a mixed array equal, bit for bit, those of an
// array holding only that element's data.
constexpr auto k_guarded_log = dc::kernel([](auto x, auto y) {
  if (x > 0)
    return dc::log(x) * y;
  return y + y;
});
constexpr auto k_log_times = dc::kernel([](auto x, auto y) { return dc::log(x) * y; });
// Nested ifs, a loop whose trip count differs per lane, and early returns on four paths.
constexpr auto k_nested = dc::kernel([](auto x, auto y) {
  auto a = x;
  for (int j = 0; j < 40 && a > 1.5; ++j)
    a = a * 0.75 + y * 0.125;
  if (y > 0) {
    if (a > 1)
      return dc::exp(a - 1) * y;
    if (x < 0.5)
      return a * y + dc::sin(y);
  } else if (y < -1) {
    return dc::log(x) - y;
  }
  return a + y * y;
});

template <class T, class K> void check_lanes_independent(K const &k, std::vector<T> const &x) {
  using A01 = std::remove_cv_t<decltype(dc::active<0, 1>)>;
  std::mt19937 rng(92);
  index_t const n = index_t(x.size());
  std::vector<T> y(x.size()), yb(x.size());
  fill_uniform(y, rng, -2, 2);
  fill_uniform(yb, rng, -2, 2);
  dc::cpu const ex{1};
  // value, d/dx, d/dy, xbar, ybar of the elements of (x, y, yb)
  auto run = [&](std::vector<T> const &xs, std::vector<T> const &ys, std::vector<T> const &ybs) {
    shape const s{index_t(xs.size())};
    std::array<std::vector<T>, 5> r;
    for (auto &v : r)
      v.assign(xs.size(), T(0));
    dc::view<T const> xv(xs.data(), s), yv(ys.data(), s), bv(ybs.data(), s);
    dc::apply(ex, k, A01{}, dc::out(dc::view<T>(r[0].data(), s)),
              dc::out(dc::view<T>(r[1].data(), s), dc::view<T>(r[2].data(), s)), xv, yv);
    dc::vjp(ex, k, A01{}, dc::out(dc::view<T>(r[3].data(), s), dc::view<T>(r[4].data(), s)),
            dc::in(xv, yv), dc::in(bv));
    return r;
  };
  auto const mixed = run(x, y, yb);
  int bad = 0;
  for (index_t i = 0; i < n; ++i) {
    std::size_t const e = std::size_t(i);
    std::size_t const copies = 37; // a full SIMD batch or two and a tail, all of element i
    auto const alone = run(std::vector<T>(copies, x[e]), std::vector<T>(copies, y[e]),
                           std::vector<T>(copies, yb[e]));
    for (std::size_t q = 0; q < 5; ++q)
      bad += std::memcmp(&mixed[q][e], &alone[q][0], sizeof(T)) != 0;
  }
  CHECK(bad == 0);
}

TEST_CASE_TEMPLATE("a lane's results do not depend on its neighbours' branches or data", T, float,
                   double) {
  std::mt19937 rng(91);
  std::vector<T> x(203);
  fill_uniform(x, rng, T(0.05), T(3));
  SUBCASE("divergent: log under if (x > 0), every third x negative") {
    for (std::size_t i = 0; i < x.size(); i += 3)
      x[i] = -x[i];
    check_lanes_independent<T>(k_guarded_log, x);
  }
  SUBCASE("nested ifs, per-lane loop trip counts, early returns (log of negative x blended)") {
    for (std::size_t i = 0; i < x.size(); i += 5)
      x[i] = -x[i];
    check_lanes_independent<T>(k_nested, x);
  }
  SUBCASE("non-finite partials in some lanes: log at 0, NaN data") {
    for (std::size_t i = 0; i < x.size(); i += 7)
      x[i] = i % 2 ? T(0) : std::numeric_limits<T>::quiet_NaN();
    check_lanes_independent<T>(k_log_times, x);
  }
}

// ---- pipe and fuse ------------------------------------------------------------------------------

constexpr auto k_p1 = dc::kernel([](auto x, auto y) { return dc::outputs(x * y, x + y); });
constexpr auto k_p2 = dc::kernel([](auto a, auto b) { return dc::sin(a) * b + a; });
constexpr auto k_p3 = dc::kernel([](auto x, auto y) { return dc::exp(x) - y; });

TEST_CASE("pipe and fuse equal the manual composition") {
  using T = double;
  using A01 = std::remove_cv_t<decltype(dc::active<0, 1>)>;
  std::mt19937 rng(81);
  dc::cpu const ex{1};
  shape const s{6, 35};
  host<T> x(s), y(shape{35});
  fill_uniform(x.v, rng, -2, 2);
  fill_uniform(y.v, rng, -2, 2);
  auto args = std::make_tuple(x.view(), y.view());

  // manual: k_p1, then k_p2 on its outputs
  std::array<host<T>, 2> uv;
  std::array<host<T>, 4> duv; // du/dx, du/dy, dv/dx, dv/dy
  for (auto &h : uv)
    h = host<T>(s);
  for (auto &h : duv)
    h = host<T>(s);
  run_partials<A01>(ex, k_p1, args, views_of(uv), views_of(duv));
  std::array<host<T>, 1> w{host<T>(s)};
  std::array<host<T>, 2> dw; // dw/du, dw/dv
  for (auto &h : dw)
    h = host<T>(s);
  run_partials<A01>(ex, k_p2, std::make_tuple(uv[0].view(), uv[1].view()), views_of(w),
                    views_of(dw));

  constexpr auto piped = dc::pipe(k_p1, k_p2);
  std::array<host<T>, 1> pw{host<T>(s)}, pw_vals{host<T>(s)};
  std::array<host<T>, 2> pdw;
  for (auto &h : pdw)
    h = host<T>(s);
  run_partials<A01>(ex, piped, args, views_of(pw), views_of(pdw));
  std::apply([&](auto const &...a) { dc::apply(ex, piped, out_pack(pw_vals), a...); }, args);
  int bad = 0;
  for (index_t j = 0; j < s.size(); ++j) {
    bad += !close(pw[0][j], w[0][j], 1e-14) || !close(pw_vals[0][j], w[0][j], 1e-14);
    for (int a = 0; a < 2; ++a) {
      double chain = dw[0][j] * duv[0 * 2 + a][j] + dw[1][j] * duv[1 * 2 + a][j];
      bad += !close(pdw[a][j], chain, 1e-13);
    }
  }
  CHECK(bad == 0);
  CHECK(pw[0][0] ==
        doctest::Approx(std::sin(x[0] * y[0]) * (x[0] + y[0]) + x[0] * y[0]).epsilon(1e-14));

  // fuse: the outputs of k_p1 then of k_p3, same inputs
  constexpr auto fused = dc::fuse(k_p1, k_p3);
  std::array<host<T>, 1> e{host<T>(s)};
  std::array<host<T>, 2> de;
  for (auto &h : de)
    h = host<T>(s);
  run_partials<A01>(ex, k_p3, args, views_of(e), views_of(de));
  std::array<host<T>, 3> fy;
  std::array<host<T>, 6> fp;
  for (auto &h : fy)
    h = host<T>(s);
  for (auto &h : fp)
    h = host<T>(s);
  run_partials<A01>(ex, fused, args, views_of(fy), views_of(fp));
  int badf = 0;
  for (index_t j = 0; j < s.size(); ++j) {
    badf += !close(fy[0][j], uv[0][j], 1e-15) + !close(fy[1][j], uv[1][j], 1e-15) +
            !close(fy[2][j], e[0][j], 1e-15);
    for (int i = 0; i < 4; ++i)
      badf += !close(fp[i][j], duv[i][j], 1e-15);
    for (int a = 0; a < 2; ++a)
      badf += !close(fp[4 + a][j], de[a][j], 1e-15);
  }
  CHECK(badf == 0);
}

// ---- errors, in-place, empty, rank 8 ------------------------------------------------------------

bool contains(std::string const &s, std::string const &part) {
  return s.find(part) != std::string::npos;
}

template <class F> std::string message_of(F &&f) {
  try {
    f();
  } catch (dc::error const &e) {
    return e.what();
  }
  return "(nothing thrown)";
}

TEST_CASE(
    "errors: shapes that do not broadcast and wrong output shapes leave the outputs untouched") {
  using T = double;
  using Act = all_active_t<slots_two>;
  dc::cpu const ex{1};
  T const sentinel = -777;
  host<T> x(shape{3, 4}, 1.0), y(shape{5, 4}, 2.0);
  std::array<host<T>, 2> out;
  std::array<host<T>, 4> part;
  for (auto &h : out)
    h = host<T>(shape{3, 4}, sentinel);
  for (auto &h : part)
    h = host<T>(shape{3, 4}, sentinel);
  auto untouched = [&] {
    int n = 0;
    for (auto &h : out)
      for (T v : h.v)
        n += v != sentinel;
    for (auto &h : part)
      for (T v : h.v)
        n += v != sentinel;
    return n == 0;
  };

  // argument 0 (3, 4) against argument 2 (5, 4); argument 1 is a scalar and still counts as a
  // position
  std::string msg;
  CHECK_THROWS_AS(dc::apply(ex, k_two, out_pack(out), x.view(), 0.5, y.view()), dc::shape_error);
  msg = message_of([&] { dc::apply(ex, k_two, out_pack(out), x.view(), 0.5, y.view()); });
  INFO(msg);
  CHECK(contains(msg, "argument 0"));
  CHECK(contains(msg, "argument 2"));
  CHECK(contains(msg, "(3, 4)"));
  CHECK(contains(msg, "(5, 4)"));
  CHECK(untouched());
  msg = message_of([&] {
    run_partials<Act>(ex, k_two, std::make_tuple(x.view(), 0.5, y.view()), views_of(out),
                      views_of(part));
  });
  CHECK(contains(msg, "argument 0"));
  CHECK(contains(msg, "argument 2"));
  CHECK(contains(msg, "(3, 4)"));
  CHECK(contains(msg, "(5, 4)"));
  CHECK(untouched());
  {
    std::array<host<T>, 2> xb{host<T>(x.s, sentinel), host<T>(y.s, sentinel)};
    std::array<host<T>, 2> yb{host<T>(shape{3, 4}, 1.0), host<T>(shape{3, 4}, 1.0)};
    msg = message_of([&] {
      run_vjp<Act>(ex, k_two, std::make_tuple(x.view(), 0.5, y.view()), views_of(xb), views_of(yb));
    });
    CHECK(contains(msg, "argument 0"));
    CHECK(contains(msg, "argument 2"));
    CHECK(contains(msg, "(5, 4)"));
    for (auto &h : xb)
      for (T v : h.v)
        CHECK(v == sentinel);
  }

  // outputs of the wrong shape
  host<T> y4(shape{4}, 2.0);
  {
    std::array<host<T>, 2> wrong{host<T>(shape{3, 5}, sentinel), host<T>(shape{3, 5}, sentinel)};
    msg = message_of([&] { dc::apply(ex, k_two, out_pack(wrong), x.view(), 0.5, y4.view()); });
    CHECK(contains(msg, "(3, 4)"));
    CHECK(contains(msg, "(3, 5)"));
    CHECK_THROWS_AS(dc::apply(ex, k_two, out_pack(wrong), x.view(), 0.5, y4.view()),
                    dc::shape_error);
    for (auto &h : wrong)
      for (T v : h.v)
        CHECK(v == sentinel);
  }
  {
    std::array<host<T>, 2> wrong{host<T>(shape{3, 4}, sentinel), host<T>(shape{4, 3}, sentinel)};
    CHECK_THROWS_AS(dc::apply(ex, k_two, out_pack(wrong), x.view(), 0.5, y4.view()),
                    dc::shape_error);
    msg = message_of([&] { dc::apply(ex, k_two, out_pack(wrong), x.view(), 0.5, y4.view()); });
    CHECK(contains(msg, "output 1"));
    for (auto &h : wrong)
      for (T v : h.v)
        CHECK(v == sentinel);
  }
  {
    // one partial of the wrong shape: nothing at all is written
    part[3] = host<T>(shape{1, 4}, sentinel);
    CHECK_THROWS_AS(run_partials<Act>(ex, k_two, std::make_tuple(x.view(), 0.5, y4.view()),
                                      views_of(out), views_of(part)),
                    dc::shape_error);
    CHECK(untouched());
    part[3] = host<T>(shape{3, 4}, sentinel);
  }
  {
    // an output smaller than the inputs' shape (it would need the inputs to broadcast down)
    std::array<host<T>, 2> small{host<T>(shape{4}, sentinel), host<T>(shape{4}, sentinel)};
    CHECK_THROWS_AS(dc::apply(ex, k_two, out_pack(small), x.view(), 0.5, y4.view()),
                    dc::shape_error);
  }
  {
    // jvp: a tangent of the wrong shape; vjp: a cotangent of the wrong shape
    host<T> tx(shape{3, 4}), ty(shape{3, 4});
    std::array<host<T>, 2> yj, tj;
    for (auto &h : yj)
      h = host<T>(shape{3, 4}, sentinel);
    for (auto &h : tj)
      h = host<T>(shape{3, 4}, sentinel);
    CHECK_THROWS_AS(dc::jvp(ex, k_two, out_pack(yj), out_pack(tj), dc::in(x.view(), 0.5, y4.view()),
                            dc::in(tx.view(), ty.view())),
                    dc::shape_error);
    for (auto &h : yj)
      for (T v : h.v)
        CHECK(v == sentinel);
    std::array<host<T>, 2> xb{host<T>(x.s, sentinel), host<T>(shape{3, 4}, sentinel)};
    std::array<host<T>, 2> yb{host<T>(shape{3, 4}, 1.0), host<T>(shape{3, 4}, 1.0)};
    CHECK_THROWS_AS(run_vjp<Act>(ex, k_two, std::make_tuple(x.view(), 0.5, y4.view()), views_of(xb),
                                 views_of(yb)),
                    dc::shape_error);
    for (auto &h : xb)
      for (T v : h.v)
        CHECK(v == sentinel);
  }
  CHECK_THROWS_AS(shape({1, 1, 1, 1, 1, 1, 1, 1, 1}), dc::shape_error); // rank 9
}

TEST_CASE("errors: aliasing outputs and inputs") {
  using T = double;
  using Act = all_active_t<slots_two>;
  dc::cpu const ex{1};
  T const sentinel = -777;
  std::vector<T> buf(40);
  for (std::size_t i = 0; i < buf.size(); ++i)
    buf[i] = T(i) / 10;
  auto const buf0 = buf;
  dc::view<T> x(buf.data(), {4, 4});
  dc::view<T> shifted(buf.data() + 4, {4, 4}); // overlaps x in 12 elements
  host<T> y(shape{4}, 0.5), other(shape{4, 4}, sentinel), other2(shape{4, 4}, sentinel);

  CHECK_THROWS_AS(dc::apply(ex, k_two, dc::out(shifted, other.view()), x, 0.5, y.view()),
                  dc::aliasing_error);
  CHECK(buf == buf0);
  for (T v : other.v)
    CHECK(v == sentinel);
  // a transposed view of the input is the same memory, but not the same elements
  CHECK_THROWS_AS(dc::apply(ex, k_two, dc::out(x.transposed(), other.view()), x, 0.5, y.view()),
                  dc::aliasing_error);
  // outputs overlapping each other
  CHECK_THROWS_AS(dc::apply(ex, k_two, dc::out(other.view(), other.view()), x, 0.5, y.view()),
                  dc::aliasing_error);
  // a partial overlapping an input
  std::array<dc::view<T>, 2> ys{other.view(), other2.view()};
  host<T> p0(shape{4, 4}, sentinel), p2(shape{4, 4}, sentinel), p3(shape{4, 4}, sentinel);
  std::array<dc::view<T>, 4> ps{p0.view(), shifted, p2.view(), p3.view()};
  CHECK_THROWS_AS(run_partials<Act>(ex, k_two, std::make_tuple(x, 0.5, y.view()), ys, ps),
                  dc::aliasing_error);
  CHECK(buf == buf0);
  for (T v : other.v)
    CHECK(v == sentinel);
  // an output with stride 0 (several elements to one place)
  CHECK_THROWS_AS(dc::apply(ex, k_two, dc::out(y.view().broadcast_to(shape{4, 4}), other.view()), x,
                            0.5, y.view()),
                  dc::aliasing_error);
  // an output identical to a broadcast input is not the same elements
  host<T> yrow(shape{1, 4}, 0.25);
  CHECK_THROWS_AS(dc::apply(ex, k_two, dc::out(other.view(), yrow.view().broadcast_to(shape{4, 4})),
                            x, 0.5, yrow.view()),
                  dc::aliasing_error);
  // vjp: a cotangent overlapping an input; a stride-0 cotangent of a broadcast input
  std::array<host<T>, 2> yb{host<T>(shape{4, 4}, 1.0), host<T>(shape{4, 4}, 1.0)};
  host<T> ybar_ok(shape{4}, sentinel);
  std::array<dc::view<T>, 2> xb_bad{shifted, ybar_ok.view()};
  CHECK_THROWS_AS(run_vjp<Act>(ex, k_two, std::make_tuple(x, 0.5, y.view()), xb_bad, views_of(yb)),
                  dc::aliasing_error);
  CHECK(buf == buf0);
  host<T> xbar(shape{4, 4}, sentinel), ybar_store(shape{1}, sentinel);
  std::array<dc::view<T>, 2> xb_zero{xbar.view(), dc::view<T>(ybar_store.v.data(), {4}, {0})};
  CHECK_THROWS_AS(run_vjp<Act>(ex, k_two, std::make_tuple(x, 0.5, y.view()), xb_zero, views_of(yb)),
                  dc::aliasing_error);
  for (T v : xbar.v)
    CHECK(v == sentinel);

  // jvp: an output tangent overlapping an input tangent; vjp: an input cotangent overlapping an
  // output cotangent (both are inputs of the fused pass, read while outputs are written)
  {
    std::vector<T> tbuf(40, T(0.5));
    auto const tbuf0 = tbuf;
    dc::view<T> tx(tbuf.data(), {4, 4}), ty(tbuf.data() + 32, {4});
    dc::view<T> tout(tbuf.data() + 2, {4, 4}); // overlaps tx
    host<T> y0(shape{4, 4}, sentinel), y1(shape{4, 4}, sentinel), t1(shape{4, 4}, sentinel);
    CHECK_THROWS_AS(dc::jvp(ex, k_two, dc::out(y0.view(), y1.view()), dc::out(tout, t1.view()),
                            dc::in(x, 0.5, y.view()), dc::in(tx, ty)),
                    dc::aliasing_error);
    CHECK(tbuf == tbuf0);
    for (T v : y0.v)
      CHECK(v == sentinel);
    std::vector<T> gbuf(40, T(0.25));
    auto const gbuf0 = gbuf;
    dc::view<T> yb0(gbuf.data(), {4, 4}), yb1(gbuf.data() + 20, {4, 4});
    dc::view<T> xb0(gbuf.data() + 1, {4, 4}); // overlaps yb0 (and yb1)
    host<T> xb1(shape{4}, sentinel);
    CHECK_THROWS_AS(
        dc::vjp(ex, k_two, dc::out(xb0, xb1.view()), dc::in(x, 0.5, y.view()), dc::in(yb0, yb1)),
        dc::aliasing_error);
    CHECK(gbuf == gbuf0);
    for (T v : xb1.v)
      CHECK(v == sentinel);
  }

  // value_and_vjp: a value output of the wrong shape, overlapping an input cotangent or another
  // output, or partly overlapping an input; an output that IS an input (in place) is fine
  {
    host<T> y0(shape{4, 4}, sentinel), y1(shape{4, 4}, sentinel), small(shape{4}, sentinel);
    host<T> xb0(shape{4, 4}, sentinel), xb1(shape{4}, sentinel);
    std::array<host<T>, 2> g{host<T>(shape{4, 4}, 1.0), host<T>(shape{4, 4}, 0.5)};
    auto call = [&](dc::view<T> a, dc::view<T> b, dc::view<T> c) {
      dc::value_and_vjp(ex, k_two, dc::out(a, b), dc::out(c, xb1.view()), dc::in(x, 0.5, y.view()),
                        dc::in(g[0].view(), g[1].view()));
    };
    CHECK_THROWS_AS(call(small.view(), y1.view(), xb0.view()), dc::shape_error);
    CHECK_THROWS_AS(call(y0.view(), xb0.view(), xb0.view()), dc::aliasing_error);
    CHECK_THROWS_AS(call(y0.view(), y0.view(), xb0.view()), dc::aliasing_error);
    CHECK_THROWS_AS(call(shifted, y1.view(), xb0.view()), dc::aliasing_error);
    CHECK(buf == buf0);
    for (auto const *h : {&y0, &y1, &xb0, &xb1})
      for (T v : h->v)
        CHECK(v == sentinel);
    std::vector<T> xin(buf.begin(), buf.begin() + 16);
    dc::view<T> xi(xin.data(), {4, 4});
    dc::value_and_vjp(ex, k_two, dc::out(xi, y1.view()), dc::out(xb0.view(), xb1.view()),
                      dc::in(xi, 0.5, y.view()), dc::in(g[0].view(), g[1].view()));
    host<T> want0(shape{4, 4}, sentinel), want1(shape{4, 4}, sentinel);
    dc::apply(ex, k_two, dc::out(want0.view(), want1.view()), x, 0.5, y.view());
    for (std::size_t i = 0; i < 16; ++i) {
      CHECK(xin[i] == doctest::Approx(want0.v[i]).epsilon(1e-14));
      CHECK(y1.v[i] == doctest::Approx(want1.v[i]).epsilon(1e-14));
    }
  }
}

// The overlap test behind the aliasing errors, against the explicit sets of addresses: never
// "disjoint" for views that share an element, and exact for views with the same strides (slices
// of one array: the gradients of an LSTM's gate slices are written side by side).
TEST_CASE("aliasing: overlap of random slices, against their address sets") {
  std::mt19937 rng(97);
  std::vector<double> buf(4096);
  auto rnd = [&](index_t lo, index_t hi) {
    return std::uniform_int_distribution<index_t>(lo, hi)(rng);
  };
  auto random_view = [&](dc::view<double> v) {
    for (int r = int(rnd(1, 3)); r > 0; --r) {
      int d = int(rnd(0, v.rank() - 1));
      index_t e = v.extent(d), b = rnd(0, e - 1), end = rnd(b + 1, e), step = rnd(1, 3);
      v = v.slice(d, b, end, step);
    }
    if (v.rank() > 1 && rnd(0, 4) == 0)
      v = v.transposed(0, v.rank() - 1);
    return v;
  };
  auto addresses = [](dc::view<double> const &v) {
    std::vector<double const *> a;
    for_each_index(v.dims(), [&](index_t const *idx, index_t) { a.push_back(&at(v, idx)); });
    std::sort(a.begin(), a.end());
    return a;
  };
  int same_stride_pairs = 0, disjoint_same_stride = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    shape s = trial % 3 == 0 ? shape{64} : trial % 3 == 1 ? shape{12, 16} : shape{6, 5, 8};
    dc::view<double> base(buf.data() + rnd(0, 8), s);
    auto a = random_view(base), b = random_view(base);
    auto x = addresses(a), y = addresses(b);
    std::vector<double const *> common;
    std::set_intersection(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(common));
    bool shared = !common.empty();
    bool said = dc::detail::overlaps(a, b);
    INFO("trial " << trial);
    CHECK((said || !shared)); // never "disjoint" when an element is shared
    bool same_strides = a.rank() == b.rank();
    for (int d = 0; same_strides && d < a.rank(); ++d)
      same_strides = a.stride(d) == b.stride(d);
    if (same_strides) {
      ++same_stride_pairs;
      disjoint_same_stride += shared ? 0 : 1;
      CHECK(said == shared);
    }
  }
  // the trials did exercise the exact path, with both answers
  CHECK(same_stride_pairs > 200);
  CHECK(disjoint_same_stride > 30);
}

TEST_CASE("aliasing: disjoint column slices of one array as outputs") {
  using T = double;
  dc::cpu const ex{1};
  host<T> x(shape{5, 3}, 0.0), y(shape{3}, 0.5), both(shape{5, 6}, -1.0);
  for (std::size_t i = 0; i < x.v.size(); ++i)
    x.v[i] = T(i) / 7;
  auto left = both.view().slice(1, 0, 3), right = both.view().slice(1, 3, 6);
  dc::apply(ex, k_two, dc::out(left, right), x.view(), 0.5, y.view());
  host<T> l(shape{5, 3}, 0.0), r(shape{5, 3}, 0.0);
  dc::apply(ex, k_two, dc::out(l.view(), r.view()), x.view(), 0.5, y.view());
  for (index_t i = 0; i < 5; ++i)
    for (index_t j = 0; j < 3; ++j) {
      CHECK(both.v[std::size_t(i * 6 + j)] == l.v[std::size_t(i * 3 + j)]);
      CHECK(both.v[std::size_t(i * 6 + 3 + j)] == r.v[std::size_t(i * 3 + j)]);
    }
  // interleaved columns are disjoint too (and written as such); columns 0-3 and 2-5 are not
  host<T> x2(shape{5, 3}, 0.0);
  for (std::size_t i = 0; i < x2.v.size(); ++i)
    x2.v[i] = T(i) / 5 - T(1);
  dc::apply(ex, k_two, dc::out(l.view(), r.view()), x2.view(), 0.5, y.view());
  dc::apply(ex, k_two, dc::out(both.view().slice(1, 0, 6, 2), both.view().slice(1, 1, 6, 2)),
            x2.view(), 0.5, y.view());
  for (index_t i = 0; i < 5; ++i)
    for (index_t j = 0; j < 3; ++j) {
      CHECK(both.v[std::size_t(i * 6 + 2 * j)] == l.v[std::size_t(i * 3 + j)]);
      CHECK(both.v[std::size_t(i * 6 + 2 * j + 1)] == r.v[std::size_t(i * 3 + j)]);
    }
  CHECK_THROWS_AS(dc::apply(ex, k_two,
                            dc::out(both.view().slice(1, 0, 3), both.view().slice(1, 2, 5)),
                            x.view(), 0.5, y.view()),
                  dc::aliasing_error);
}

TEST_CASE_TEMPLATE("in-place: an output identical to an input", T, double, float) {
  std::mt19937 rng(91);
  dc::cpu const ex{1};
  host<T> x(shape{9, 23});
  fill_uniform(x.v, rng, -2, 2);
  auto const x0 = x;
  // values, contiguous, x = f(x)
  dc::apply(ex, k_one, dc::out(x.view()), x.view());
  int bad = 0;
  for (index_t j = 0; j < x.s.size(); ++j)
    bad += !close(double(x[j]), out_values<1>(k_one(x0[j]))[0], tol<T>::val);
  CHECK(bad == 0);

  // values and partials; output 0 is argument 0 itself, a transposed (strided) view
  host<T> a(shape{23, 9}), b(shape{23}), o1(shape{9, 23});
  fill_uniform(a.v, rng, -2, 2);
  fill_uniform(b.v, rng, -2, 2);
  auto const a0 = a;
  std::array<host<T>, 4> p;
  for (auto &h : p)
    h = host<T>(shape{9, 23});
  dc::view<T> const xt = a.view().transposed(); // (9, 23)
  slots_two const slots{arr{}, -0.8, arr{}};
  run_partials<all_active_t<slots_two>>(ex, k_two,
                                        call_args(slots, std::array<dc::view<T>, 2>{xt, b.view()}),
                                        std::array<dc::view<T>, 2>{xt, o1.view()}, views_of(p));
  int bad2 = 0;
  for_each_index(shape{9, 23}, [&](index_t const *idx, index_t flat) {
    T vals[2] = {a0[idx[1] * 9 + idx[0]], b[idx[1]]};
    double dv[2] = {double(vals[0]), double(vals[1])};
    auto ref = eval_plain<2, T>(k_two, slots, vals);
    bad2 += !close(double(at(xt, idx)), ref[0], tol<T>::val);
    bad2 += !close(double(o1[flat]), ref[1], tol<T>::val);
    for (int q = 0; q < 2; ++q) {
      auto fd = central_fd<2>(k_two, slots, dv, q);
      for (int o = 0; o < 2; ++o)
        bad2 += !close(double(p[o * 2 + q][flat]), fd[o], tol<T>::der);
    }
  });
  CHECK(bad2 == 0);

  // vjp whose input cotangent is written over the output cotangent (same elements)
  host<T> u(shape{9, 23}), g(shape{9, 23});
  fill_uniform(u.v, rng, -2, 2);
  fill_uniform(g.v, rng, -1, 1);
  auto const g0 = g;
  dc::vjp(ex, k_one, dc::out(g.view()), dc::in(u.view()), dc::in(g.view()));
  int bad3 = 0;
  for (index_t j = 0; j < u.s.size(); ++j) {
    double ud = double(u[j]);
    auto fd = central_fd<1>(k_one, slots_one{}, &ud, 0);
    bad3 += !close(double(g[j]), double(g0[j]) * fd[0], tol<T>::der);
  }
  CHECK(bad3 == 0);
}

TEST_CASE_TEMPLATE("empty arrays do nothing, rank-8 arrays work", T, double, float) {
  using Act = all_active_t<slots_two>;
  std::mt19937 rng(95);
  dc::cpu const ex{2};
  T const sentinel = T(-5);
  SUBCASE("a zero extent") {
    for (shape const &s : {shape{0}, shape{3, 0, 2}, shape{0, 5, 1, 4}, shape{2, 2, 0}}) {
      CAPTURE(dc::to_string(s));
      shape ys =
          s; // an input with elements, broadcast over the zero extent (and the last dimension)
      for (int d = 0; d < ys.rank; ++d)
        if (ys.ext[d] == 0 || d == ys.rank - 1)
          ys.ext[d] = 1;
      REQUIRE(ys.size() > 0);
      host<T> x(s), y(ys, T(0.5));
      std::array<host<T>, 2> out{host<T>(s), host<T>(s)};
      std::array<host<T>, 4> part;
      for (auto &h : part)
        h = host<T>(s);
      auto args = std::make_tuple(x.view(), 0.5, y.view());
      std::apply([&](auto const &...a) { dc::apply(ex, k_two, out_pack(out), a...); }, args);
      run_partials<Act>(ex, k_two, args, views_of(out), views_of(part));
      std::array<host<T>, 2> tj{host<T>(s), host<T>(s)};
      host<T> tx(s), ty(ys);
      dc::jvp(ex, k_two, out_pack(out), out_pack(tj), pack_of(args), dc::in(tx.view(), ty.view()));
      // vjp: the broadcast input's cotangent is a sum over no elements
      std::array<host<T>, 2> ybar{host<T>(s), host<T>(s)};
      std::array<host<T>, 2> xbar{host<T>(s), host<T>(ys, sentinel)};
      run_vjp<Act>(ex, k_two, args, views_of(xbar), views_of(ybar));
      for (T v : xbar[1].v)
        CHECK(v == T(0));
      std::fill(xbar[1].v.begin(), xbar[1].v.end(), sentinel);
      run_vjp<Act>(ex, k_two, args, views_of(xbar), views_of(ybar), true);
      for (T v : xbar[1].v)
        CHECK(v == sentinel);
      CHECK(y[0] == T(0.5));
    }
    // a zero extent does not broadcast with a non-zero one
    host<T> x0(shape{0}), x3(shape{3});
    std::array<host<T>, 2> out3{host<T>(shape{3}, sentinel), host<T>(shape{3}, sentinel)};
    CHECK_THROWS_AS(dc::apply(ex, k_two, out_pack(out3), x0.view(), 0.5, x3.view()),
                    dc::shape_error);
    CHECK(out3[0][0] == sentinel);
  }
  SUBCASE("rank 8") {
    stats st;
    shape const s{2, 1, 3, 1, 2, 2, 1, 3};
    for (int t = 0; t < 4; ++t)
      property_trial<T, 2>(k_two, slots_two{arr{}, 0.1, arr{}}, -2, 2, s, rng, st);
    CHECK(st.max_rank_seen == 8);
  }
}

} // namespace

TEST_CASE_TEMPLATE("vjp: finite cotangents whose sum overflows are kept as computed", T, double,
                   float) {
  // The VJP tests the sum of an element's cotangents for inf / NaN; here it overflows although
  // each is finite (a false alarm): the cotangents must stay exactly the plain products, in SIMD
  // and remainder lanes.
  constexpr auto k = dc::kernel([](auto a, auto b, auto c, auto d) { return a * b + c * d; });
  dc::cpu const ex{2};
  const index_t n = 37;
  const auto un = static_cast<std::size_t>(n);
  T const big = std::numeric_limits<T>::max() * T(0.75);
  std::vector<T> a(un), b(un), c(un, T(-0.0)), d(un), ybar(un, T(1));
  std::vector<T> ga(un), gb(un), gc(un), gd(un);
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.8, 1.0); // a + b > 1.2 max
  for (std::size_t i = 0; i < un; ++i)
    a[i] = big * T(u(rng)), b[i] = big * T(u(rng)), d[i] = T(u(rng));
  shape const s{n};
  auto in = [&](std::vector<T> const &v) { return dc::view<T const>{v.data(), s}; };
  auto out = [&](std::vector<T> &v) { return dc::view<T>{v.data(), s}; };
  dc::vjp(ex, k, dc::out(out(ga), out(gb), out(gc), out(gd)), dc::in(in(a), in(b), in(c), in(d)),
          dc::in(in(ybar)));
  for (std::size_t i = 0; i < un; ++i) {
    CAPTURE(i);
    REQUIRE(std::isinf(ga[i] + gb[i] + gc[i] + gd[i])); // the case under test: the sum overflows
    CHECK(ga[i] == b[i]);
    CHECK(gb[i] == a[i]);
    CHECK(gc[i] == d[i]);
    CHECK(gd[i] == T(0));
  }
}

TEST_CASE_TEMPLATE("vjp where a derivative is infinite: unrelated cotangents stay finite", T,
                   double, float) {
  // sqrt'(0) = inf must not turn the cotangent of y into inf * 0 = NaN (SIMD and remainder lanes)
  constexpr auto k = dc::kernel([](auto x, auto y) { return dc::sqrt(x) + y * y; });
  dc::cpu const ex{2};
  const index_t n = 37;
  const auto un = static_cast<std::size_t>(n);
  std::vector<T> x(un), y(un), ybar(un), xbar(un), gy(un);
  std::mt19937 rng(97);
  std::uniform_real_distribution<double> u(0.5, 2.0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = i % 3 == 0 ? T(0) : T(u(rng));
    y[i] = T(u(rng) - 1.25);
    ybar[i] = T(u(rng));
  }
  shape const s{n};
  dc::vjp(ex, k, dc::out(dc::view<T>{xbar.data(), s}, dc::view<T>{gy.data(), s}),
          dc::in(dc::view<T const>{x.data(), s}, dc::view<T const>{y.data(), s}),
          dc::in(dc::view<T const>{ybar.data(), s}));
  for (std::size_t i = 0; i < x.size(); ++i) {
    CAPTURE(i);
    CHECK(double(gy[i]) == doctest::Approx(2.0 * double(y[i]) * double(ybar[i])).epsilon(1e-6));
    if (x[i] == T(0))
      CHECK(xbar[i] == std::numeric_limits<T>::infinity());
    else
      CHECK(double(xbar[i]) ==
            doctest::Approx(0.5 / std::sqrt(double(x[i])) * double(ybar[i])).epsilon(1e-5));
  }
}

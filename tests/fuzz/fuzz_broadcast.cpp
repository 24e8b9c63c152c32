// libFuzzer target: dualcast::apply / dualcast::vjp on the CPU backend against a naive reference
// implementation of numpy broadcasting written here (values, and VJPs with the broadcast
// reduction), including whether a shape_error must be thrown.
//
//   clang++-14 -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -Iinclude -Ikernels \
//     tests/fuzz/fuzz_broadcast.cpp -o fuzz_broadcast && ./fuzz_broadcast tests/fuzz/corpus
//
// Input bytes: a mode byte (kernel, apply or vjp, accumulate, how output shapes are chosen), then
// shapes (rank 0..4, extents 0..5, 1 more often), then element values; missing bytes read as 0.
#include <dualcast/dualcast.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

using shp = std::vector<std::int64_t>;

struct reader {
  std::uint8_t const *p;
  std::size_t n;
  std::uint8_t next() {
    if (n == 0)
      return 0;
    --n;
    return *p++;
  }
};

shp read_shape(reader &r) {
  int rank = r.next() % 5;
  shp s(static_cast<std::size_t>(rank));
  for (auto &e : s) {
    int v = r.next() % 8;
    e = v >= 6 ? 1 : v; // 0..5, with 1 three times as likely
  }
  return s;
}

std::int64_t size_of(shp const &s) {
  std::int64_t n = 1;
  for (auto e : s)
    n *= e;
  return n;
}

// numpy's rule, written independently of dualcast::broadcast_pair.
bool bcast(shp const &a, shp const &b, shp &out) {
  std::size_t r = a.size() > b.size() ? a.size() : b.size();
  out.assign(r, 1);
  for (std::size_t i = 0; i < r; ++i) {
    std::int64_t ea = i < r - a.size() ? 1 : a[i - (r - a.size())];
    std::int64_t eb = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (ea != eb && ea != 1 && eb != 1)
      return false;
    out[i] = ea == 1 ? eb : ea;
  }
  return true;
}

dualcast::shape to_shape(shp const &s) {
  dualcast::shape r;
  r.rank = static_cast<int>(s.size());
  for (std::size_t i = 0; i < s.size(); ++i)
    r.ext[i] = s[i];
  return r;
}

// Offset in a contiguous array of shape x of the element that the iteration index idx (over the
// broadcast shape of rank R) reads.
std::int64_t offset_of(shp const &x, std::vector<std::int64_t> const &idx) {
  std::size_t lead = idx.size() - x.size();
  std::int64_t off = 0;
  for (std::size_t d = 0; d < x.size(); ++d)
    off = off * x[d] + (x[d] == 1 ? 0 : idx[lead + d]);
  return off;
}

// Calls f(idx) for every multi-index of s, row-major.
template <class F> void for_each_index(shp const &s, F f) {
  if (size_of(s) == 0)
    return;
  std::vector<std::int64_t> idx(s.size(), 0);
  for (;;) {
    f(idx);
    std::size_t d = s.size();
    while (d > 0) {
      --d;
      if (++idx[d] < s[d])
        break;
      idx[d] = 0;
      if (d == 0)
        return;
    }
    if (s.empty())
      return;
  }
}

[[noreturn]] void fail(char const *what, int kernel, double got, double want) {
  std::fprintf(stderr, "MISMATCH (kernel %d): %s: got %.17g, expected %.17g\n", kernel, what, got,
               want);
  std::abort();
}

void check_near(char const *what, int kernel, double got, double want, double scale) {
  if (!(std::fabs(got - want) <= 1e-12 * (1.0 + scale)))
    fail(what, kernel, got, want);
}

constexpr double c_scalar = 1.5; // the scalar argument of kernel 2

// The kernels, and their values and partials written out by hand.
constexpr auto k0 = dualcast::kernel([](auto a, auto b) { return a * b + dualcast::sin(a); });
constexpr auto k1 =
    dualcast::kernel([](auto a, auto b) { return dualcast::outputs(a - b, a * dualcast::exp(b)); });
constexpr auto k2 = dualcast::kernel([](auto a, auto c, auto b) { return a * c / (1.0 + b * b); });

struct ref_eval {
  int nout;
  double y[2];
  double dy[2][2]; // dy[k][a] = d y_k / d x_a
};

ref_eval reference(int kernel, double a, double b) {
  ref_eval r{};
  switch (kernel) {
  case 0:
    r.nout = 1;
    r.y[0] = a * b + std::sin(a);
    r.dy[0][0] = b + std::cos(a);
    r.dy[0][1] = a;
    break;
  case 1:
    r.nout = 2;
    r.y[0] = a - b;
    r.dy[0][0] = 1;
    r.dy[0][1] = -1;
    r.y[1] = a * std::exp(b);
    r.dy[1][0] = std::exp(b);
    r.dy[1][1] = a * std::exp(b);
    break;
  default: {
    r.nout = 1;
    double q = 1.0 + b * b;
    r.y[0] = a * c_scalar / q;
    r.dy[0][0] = c_scalar / q;
    r.dy[0][1] = -a * c_scalar * 2.0 * b / (q * q);
    break;
  }
  }
  return r;
}

std::vector<double> read_values(reader &r, std::int64_t n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto &x : v)
    x = (r.next() % 41 - 20) / 10.0; // -2.0 .. 2.0
  return v;
}

// Runs f; returns whether it threw dualcast::shape_error (any other exception escapes).
template <class F> bool throws_shape_error(F f) {
  try {
    f();
  } catch (dualcast::shape_error const &) {
    return true;
  }
  return false;
}

void run_apply(int kernel, reader &r, bool out_random) {
  shp s0 = read_shape(r), s1 = read_shape(r);
  shp s_in;
  bool in_ok = bcast(s0, s1, s_in);
  shp s_out = (out_random || !in_ok) ? read_shape(r) : s_in;
  shp joint;
  bool expect_ok = in_ok && bcast(s_in, s_out, joint) && joint == s_out;

  auto x0 = read_values(r, size_of(s0)), x1 = read_values(r, size_of(s1));
  int nout = kernel == 1 ? 2 : 1;
  std::vector<double> y[2];
  for (int k = 0; k < nout; ++k)
    y[k].assign(static_cast<std::size_t>(size_of(s_out)), -7.0);

  dualcast::view<double> v0(x0.data(), to_shape(s0)), v1(x1.data(), to_shape(s1));
  dualcast::view<double> w0(y[0].data(), to_shape(s_out)), w1(y[1].data(), to_shape(s_out));
  dualcast::cpu ex{};
  bool threw = throws_shape_error([&] {
    if (kernel == 0)
      dualcast::apply(ex, k0, dualcast::out(w0), v0, v1);
    if (kernel == 1)
      dualcast::apply(ex, k1, dualcast::out(w0, w1), v0, v1);
    if (kernel == 2)
      dualcast::apply(ex, k2, dualcast::out(w0), v0, c_scalar, v1);
  });
  if (threw == expect_ok) {
    std::fprintf(stderr, "apply: shape_error %s but numpy says the shapes %s broadcast\n",
                 threw ? "thrown" : "not thrown", expect_ok ? "do" : "do not");
    std::abort();
  }
  if (threw) {
    for (int k = 0; k < nout; ++k)
      for (double v : y[k])
        if (v != -7.0)
          fail("apply wrote an output before throwing", kernel, v, -7.0);
    return;
  }
  for_each_index(s_out, [&](std::vector<std::int64_t> const &idx) {
    ref_eval e = reference(kernel, x0[offset_of(s0, idx)], x1[offset_of(s1, idx)]);
    std::int64_t o = offset_of(s_out, idx);
    for (int k = 0; k < nout; ++k)
      check_near("apply value", kernel, y[k][o], e.y[k], std::fabs(e.y[k]));
  });
}

void run_vjp(int kernel, reader &r, bool cot_random, bool accumulate) {
  shp s0 = read_shape(r), s1 = read_shape(r);
  shp s_in;
  bool in_ok = bcast(s0, s1, s_in);
  int nout = kernel == 1 ? 2 : 1;
  shp sy[2];
  bool expect_ok = in_ok;
  shp s_iter = s_in;
  for (int k = 0; k < nout; ++k) {
    sy[k] = (cot_random || !in_ok) ? read_shape(r) : s_in;
    shp next;
    if (expect_ok && bcast(s_iter, sy[k], next))
      s_iter = next;
    else
      expect_ok = false;
  }

  auto x0 = read_values(r, size_of(s0)), x1 = read_values(r, size_of(s1));
  std::vector<double> yb[2];
  for (int k = 0; k < nout; ++k)
    yb[k] = read_values(r, size_of(sy[k]));
  auto xb0 = read_values(r, size_of(s0)), xb1 = read_values(r, size_of(s1));
  auto const xb0_init = xb0, xb1_init = xb1;

  dualcast::view<double> v0(x0.data(), to_shape(s0)), v1(x1.data(), to_shape(s1));
  dualcast::view<double> g0(xb0.data(), to_shape(s0)), g1(xb1.data(), to_shape(s1));
  dualcast::view<double> c0(yb[0].data(), to_shape(sy[0])), c1(yb[1].data(), to_shape(sy[1]));
  dualcast::cpu ex{};
  bool threw = throws_shape_error([&] {
    using dualcast::in;
    using dualcast::out;
    if (kernel == 0)
      dualcast::vjp(ex, k0, out(g0, g1), in(v0, v1), in(c0), accumulate);
    if (kernel == 1)
      dualcast::vjp(ex, k1, out(g0, g1), in(v0, v1), in(c0, c1), accumulate);
    if (kernel == 2)
      dualcast::vjp(ex, k2, out(g0, g1), in(v0, c_scalar, v1), in(c0), accumulate);
  });
  if (threw == expect_ok) {
    std::fprintf(stderr, "vjp: shape_error %s but numpy says the shapes %s broadcast\n",
                 threw ? "thrown" : "not thrown", expect_ok ? "do" : "do not");
    std::abort();
  }
  if (threw) {
    if (xb0 != xb0_init || xb1 != xb1_init) {
      std::fprintf(stderr, "vjp wrote a cotangent before throwing\n");
      std::abort();
    }
    return;
  }
  // Reference: sum over the iteration shape of ybar_k * d y_k / d x_a, reduced onto x_a's shape.
  std::vector<double> want0(xb0.size(), 0.0), want1(xb1.size(), 0.0);
  std::vector<double> scale0(xb0.size(), 0.0), scale1(xb1.size(), 0.0);
  for_each_index(s_iter, [&](std::vector<std::int64_t> const &idx) {
    auto i0 = offset_of(s0, idx), i1 = offset_of(s1, idx);
    ref_eval e = reference(kernel, x0[i0], x1[i1]);
    for (int k = 0; k < nout; ++k) {
      double g = yb[k][offset_of(sy[k], idx)];
      want0[i0] += g * e.dy[k][0];
      want1[i1] += g * e.dy[k][1];
      scale0[i0] += std::fabs(g * e.dy[k][0]);
      scale1[i1] += std::fabs(g * e.dy[k][1]);
    }
  });
  for (std::size_t i = 0; i < xb0.size(); ++i) {
    double want = want0[i] + (accumulate ? xb0_init[i] : 0.0);
    check_near("vjp cotangent of argument 0", kernel, xb0[i], want, scale0[i] + std::fabs(want));
  }
  for (std::size_t i = 0; i < xb1.size(); ++i) {
    double want = want1[i] + (accumulate ? xb1_init[i] : 0.0);
    check_near("vjp cotangent of the last argument", kernel, xb1[i], want,
               scale1[i] + std::fabs(want));
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const *data, std::size_t size) {
  reader r{data, size};
  int mode = r.next();
  int kernel = mode % 3;
  bool use_vjp = (mode / 3) % 2 != 0;
  bool accumulate = (mode / 6) % 2 != 0;
  bool random_shapes = (mode / 12) % 2 != 0;
  if (use_vjp)
    run_vjp(kernel, r, random_shapes, accumulate);
  else
    run_apply(kernel, r, random_shapes);
  return 0;
}

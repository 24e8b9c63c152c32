// bench/gradbench/modules/det.hpp: GradBench's `det` (evals/det/README.md): the determinant of an
// ell x ell matrix by expansion by minors along the first row (the O(ell!) recursion the eval
// prescribes, not a factorisation), and its gradient with respect to every entry.
//   input {A: double[ell * ell] row-major, ell}; primal -> double; gradient -> double[ell * ell]
//
// The gradient is forward mode: the same recursion on dual numbers, one pass per row of A with
// that row's entries seeded (ell passes; the determinant is linear in each row, so the minors
// below the seeded row carry no partials and run on doubles). The tape is no fit here: the
// recursion is e * ell! scalar multiply-adds (10^8 at ell = 11), one node each, and a
// level-by-level tensor formulation needs arrays of ell! elements (320 MB at ell = 11).
#pragma once

#include "common.hpp"

#include <dualcast/numbers/dual.hpp>

#include <algorithm>
#include <vector>

namespace gradbench::det {

struct input {
  long ell = 0;
  std::vector<double> a;
};
inline input parse(json const &in) {
  input r;
  r.ell = integer(field(in, "ell"), "ell", 1);
  // The recursion's multiply-adds (sum over levels of ell! / k!, about e * ell!) are bounded like
  // an array's elements: ell = 11 (GradBench's largest) passes the default limit, 12 does not.
  double work = 0, level = 1;
  for (long k = r.ell; k >= 1 && work <= input_limits().max_elements; --k)
    level *= double(k), work += level;
  check_size(work, "expansion by minors of an ell x ell matrix");
  r.a = numbers(field(in, "A"), "A", std::size_t(r.ell * r.ell));
  return r;
}

// The determinant of the minor of `a` (n x n, row-major) formed by rows row .. n-1 and the columns
// left in the linked list next[] (next[n] is the first, n ends it), expanded along its first row:
// sum_j (-1)^j a[row, j-th column] det(minor without that row and column). A column is taken out
// by unlinking it (the others keep their order, so the sign is (-1)^j) and linked back after.
template <class T> T minor_det(T const *a, std::size_t n, std::size_t row, std::size_t *next) {
  if (row + 1 == n)
    return a[row * n + next[n]];
  T sum(0.0);
  bool minus = false;
  for (std::size_t prev = n, c = next[n]; c != n; prev = c, c = next[c], minus = !minus) {
    next[prev] = next[c]; // unlink column c
    T const term = a[row * n + c] * minor_det(a, n, row + 1, next);
    next[prev] = c; // and link it back
    sum = minus ? sum - term : sum + term;
  }
  return sum;
}

template <class T> T determinant(std::vector<T> const &a, std::size_t n) {
  std::vector<std::size_t> next(n + 1);
  for (std::size_t i = 0; i < n; ++i)
    next[i] = i + 1; // column i is followed by i + 1; the last by n, the end
  next[n] = 0;
  return minor_det(a.data(), n, 0, next.data());
}

struct primal : job {
  input const &in;
  double y = 0;
  explicit primal(input const &i) : in(i) {}
  void run() override { y = determinant(in.a, std::size_t(in.ell)); }
  json output() const override { return y; }
};

// The same recursion with row `seeded` of A as dual numbers (ds, one partial per column) and the
// other rows plain (a): rows above it enter as constants (double x dual), and the minors below it
// have no partials at all (det is linear in each row), so they run on plain doubles. Forward mode
// with the activity of each value known, as dualcast's active<...> subsets do for kernels.
template <class D>
D seeded_minor_det(D const *ds, double const *a, std::size_t n, std::size_t row, std::size_t seeded,
                   std::size_t *next) {
  if (row > seeded)
    return D(minor_det(a, n, row, next));
  if (row + 1 == n)
    return ds[next[n]];
  D sum(0.0);
  bool minus = false;
  for (std::size_t prev = n, c = next[n]; c != n; prev = c, c = next[c], minus = !minus) {
    next[prev] = next[c];
    D const term = row == seeded
                       ? ds[c] * minor_det(a, n, row + 1, next)
                       : a[row * n + c] * seeded_minor_det(ds, a, n, row + 1, seeded, next);
    next[prev] = c;
    sum = minus ? sum - term : sum + term;
  }
  return sum;
}

struct gradient : job {
  // One pass per row of A, its ell entries seeded (ell <= 16 here; wider rows in chunks).
  static constexpr int lanes = 16;
  using d = dc::dual<double, lanes>;
  input const &in;
  std::vector<d> row; // the seeded row
  std::vector<double> g;
  explicit gradient(input const &i) : in(i), row(std::size_t(i.ell)) {}
  void run() override {
    std::size_t const n = std::size_t(in.ell);
    g.assign(n * n, 0.0);
    std::vector<std::size_t> next(n + 1);
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t first = 0; first < n; first += lanes) {
        std::size_t const count = std::min<std::size_t>(lanes, n - first);
        for (std::size_t c = 0; c < n; ++c) { // columns first .. first + count seeded
          row[c] = d(in.a[r * n + c]);
          if (c >= first && c < first + count)
            row[c].d[c - first] = 1.0;
        }
        for (std::size_t i = 0; i < n; ++i)
          next[i] = i + 1;
        next[n] = 0;
        d const y = seeded_minor_det(row.data(), in.a.data(), n, 0, r, next.data());
        for (std::size_t k = 0; k < count; ++k)
          g[r * n + first + k] = y.d[k];
      }
  }
  json output() const override { return g; }
};

inline void add(registry &r) {
  r.add("det", "primal", make_function<input, primal>(parse));
  r.add("det", "gradient", make_function<input, gradient>(parse));
}

} // namespace gradbench::det

// dualcast/arrays/shape.hpp: shapes (up to 8 dimensions, 64-bit extents) and numpy broadcasting.
#pragma once

#include <dualcast/core/config.hpp>
#include <dualcast/core/errors.hpp>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace dualcast {

using index_t = std::int64_t;
inline constexpr int max_rank = 8;

// The extents of an array: rank 0 (a scalar) to max_rank.
struct shape {
  int rank = 0;
  index_t ext[max_rank] = {};

  constexpr shape() = default;
  shape(std::initializer_list<index_t> e) {
    if (e.size() > static_cast<std::size_t>(max_rank))
      throw shape_error("dualcast::shape: rank " + std::to_string(e.size()) +
                        " exceeds the maximum rank 8");
    for (index_t x : e) {
      if (x < 0)
        throw shape_error("dualcast::shape: negative extent " + std::to_string(x));
      ext[rank++] = x;
    }
  }
  DUALCAST_HD constexpr index_t operator[](int i) const { return ext[i]; }
  DUALCAST_HD constexpr index_t size() const {
    index_t n = 1;
    for (int i = 0; i < rank; ++i)
      n *= ext[i];
    return n;
  }
  friend constexpr bool operator==(shape const &a, shape const &b) {
    if (a.rank != b.rank)
      return false;
    for (int i = 0; i < a.rank; ++i)
      if (a.ext[i] != b.ext[i])
        return false;
    return true;
  }
};

inline std::string to_string(shape const &s) {
  std::string r = "(";
  for (int i = 0; i < s.rank; ++i) {
    if (i)
      r += ", ";
    r += std::to_string(s.ext[i]);
  }
  if (s.rank == 1)
    r += ",";
  return r + ")";
}

// numpy broadcasting of two shapes; nullopt-like failure reported through `ok`.
inline shape broadcast_pair(shape const &a, shape const &b, bool &ok) {
  shape r;
  r.rank = std::max(a.rank, b.rank);
  ok = true;
  for (int i = 0; i < r.rank; ++i) {
    int ia = a.rank - r.rank + i, ib = b.rank - r.rank + i;
    index_t ea = ia >= 0 ? a.ext[ia] : 1, eb = ib >= 0 ? b.ext[ib] : 1;
    if (ea == eb || eb == 1)
      r.ext[i] = ea;
    else if (ea == 1)
      r.ext[i] = eb;
    else
      ok = false;
  }
  return r;
}

// Broadcasts the shapes of n arguments, shape_of(i) for i in [0, n) (their positions in the call
// are given, for messages). Throws shape_error naming two arguments that do not broadcast together
// and both shapes.
template <class ShapeOf>
shape broadcast_shapes(char const *op, ShapeOf const &shape_of, int const *positions, int n) {
  if (n == 0)
    return shape{};
  shape r = shape_of(0);
  for (int i = 1; i < n; ++i) {
    bool ok = true;
    shape const &si = shape_of(i);
    if (si == r) // (the usual case: operands of one shape)
      continue;
    shape next = broadcast_pair(r, si, ok);
    if (!ok) {
      int j = 0; // an earlier argument that conflicts with this one on its own
      while (j < i && (broadcast_pair(shape_of(j), si, ok), ok))
        ++j;
      if (j == i)
        j = 0;
      throw shape_error(std::string(op) + ": argument " + std::to_string(positions[i]) +
                        " of shape " + to_string(si) + " does not broadcast with argument " +
                        std::to_string(positions[j]) + " of shape " + to_string(shape_of(j)));
    }
    r = next;
  }
  return r;
}
inline shape broadcast_shapes(char const *op, shape const *shapes, int const *positions, int n) {
  return broadcast_shapes(
      op, [shapes](int i) -> shape const & { return shapes[i]; }, positions, n);
}

} // namespace dualcast

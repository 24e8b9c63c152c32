// dualcast/ops/detail/tape_ops.hpp: helpers shared by the whole-array operations on tape variables:
// axes and the shapes of reductions.
#pragma once

#include <dualcast/core/errors.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/detail/device_dispatch.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <string>
#include <utility>
#include <vector>

namespace dualcast::detail {

// A dimension index, negative counting from the end; checked against the rank.
inline int normalize_axis(char const *op, int axis, int rank) {
  int a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    throw index_error(std::string(op) + ": axis " + std::to_string(axis) +
                      " is out of range for rank " + std::to_string(rank));
  return a;
}

// Axes as a mask (empty list: all axes).
inline std::vector<bool> axis_mask(char const *op, std::vector<int> const &axes, int rank) {
  std::vector<bool> m(std::size_t(rank), axes.empty());
  for (int a : axes) {
    int n = normalize_axis(op, a, rank);
    if (m[std::size_t(n)] && !axes.empty())
      throw index_error(std::string(op) + ": axis " + std::to_string(a) + " is given twice");
    m[std::size_t(n)] = true;
  }
  return m;
}

// The permutation putting the kept axes first and the reduced ones last (both in order).
inline std::vector<int> kept_then_reduced(std::vector<bool> const &mask) {
  std::vector<int> p;
  for (int i = 0; i < int(mask.size()); ++i)
    if (!mask[std::size_t(i)])
      p.push_back(i);
  for (int i = 0; i < int(mask.size()); ++i)
    if (mask[std::size_t(i)])
      p.push_back(i);
  return p;
}
// Whether p leaves every axis in place (the reduced axes are the last ones already).
inline bool is_identity_perm(std::vector<int> const &p) {
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i] != int(i))
      return false;
  return true;
}
inline std::vector<int> inverse_perm(std::vector<int> const &p) {
  std::vector<int> q(p.size());
  for (std::size_t i = 0; i < p.size(); ++i)
    q[std::size_t(p[i])] = int(i);
  return q;
}
// The extents of s in the order perm gives.
inline shape permuted_shape(shape const &s, std::vector<int> const &perm) {
  shape r;
  r.rank = s.rank;
  for (int i = 0; i < s.rank; ++i)
    r.ext[i] = s.ext[perm[std::size_t(i)]];
  return r;
}
// Shape with the reduced axes set to 1 (keepdims) or removed.
inline shape reduced_shape(shape const &s, std::vector<bool> const &mask, bool keepdims) {
  shape r;
  for (int i = 0; i < s.rank; ++i) {
    if (!mask[std::size_t(i)])
      r.ext[r.rank++] = s.ext[i];
    else if (keepdims)
      r.ext[r.rank++] = 1;
  }
  return r;
}

} // namespace dualcast::detail

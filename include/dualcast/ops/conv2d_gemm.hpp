// dualcast/ops/conv2d_gemm.hpp: conv2d on the CPU as im2col + gemm through the BLAS (the matmul
// hook, backend/cpu/blas.hpp). With many channels the reduction C KH KW is long and gemm's
// register blocking beats the direct loops of ops/conv2d.hpp (which keep each output row in
// memory and reload it per tap); with few it loses (the patch matrix is KH KW times the image).
// conv2d_uses_gemm decides, or conv2d_options::algorithm.
//
//   y_n     = W cols_n + b           W: [O, C KH KW], cols_n: image n's patches [C KH KW, OH OW]
//   wbar   += ybar_n cols_n^T        over the images in order
//   xbar_n  = col2im(W^T ybar_n)     each patch entry added back where im2col read it
//
// Patches are made for a block of output rows at a time, so the buffer stays under
// patch_budget bytes whatever the image size. Every sum has a fixed order -- images, then blocks,
// then the taps; col2im runs one thread per channel plane -- so dualcast's thread count does not
// change the bits (the BLAS threads on its own; OpenBLAS splits C, not the sums).
#pragma once

#include <dualcast/broadcast/for_each.hpp>
#include <dualcast/ops/conv2d_geometry.hpp>
#include <dualcast/tensor/detail/gemm_backends.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <algorithm>
#include <climits>
#include <type_traits>

namespace dualcast::detail {

// Whether the CPU computes conv2d g with im2col + gemm. automatic: from 8 output channels and a
// reduction C KH KW of 8 terms (bench/primitives' conv2d rows, forward + backward, 2 threads,
// 2026-11-26: O = C = 32, 3 x 3 on 8 x 64 x 64: gemm 4.7x faster; O = 8, C = 1, 3 x 3: 1.2x;
// O = 4, C = 16: the direct loops 1.1x faster; one channel, 7 x 7 on 512 x 512: direct 6x
// faster); never past int's range (the BLAS's dimensions) nor for empty calls.
template <class T> bool conv2d_uses_gemm(conv2d_geometry const &g) {
  if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, double>) {
    return false;
  } else {
    index_t const k = g.C * g.KH * g.KW, p = g.OH * g.OW;
    if (g.O < 1 || k < 1 || p < 1 || g.O > INT_MAX || k > INT_MAX || p > INT_MAX)
      return false; // (empty calls: the direct loops, which do nothing)
    switch (g.algorithm) {
    case conv2d_algorithm::direct:
      return false;
    case conv2d_algorithm::im2col_gemm:
      return true;
    default:
      return g.O >= 8 && k >= 8;
    }
  }
}

// Output rows per block of patches: as many as fit patch_budget bytes, at least one.
template <class T> index_t conv2d_block_rows(conv2d_geometry const &g) {
  constexpr index_t patch_budget = index_t(8) << 20;
  index_t const row_bytes = g.C * g.KH * g.KW * g.OW * index_t(sizeof(T));
  return std::clamp<index_t>(row_bytes > 0 ? patch_budget / row_bytes : g.OH, 1, g.OH);
}

// cols[(c KH + p) KW + q][(i - i0) OW + j] = x[c, i s + p - pad, j s + q - pad] (0 outside the
// image) for the output rows i in [i0, i1) of one image x; one thread per row of cols.
template <class T>
void im2col(cpu const &ex, conv2d_geometry const &g, T const *x, index_t i0, index_t i1, T *cols) {
  index_t const width = (i1 - i0) * g.OW;
  for_each(
      ex, g.C * g.KH * g.KW,
      [=](index_t r) {
        index_t const q = r % g.KW, p = (r / g.KW) % g.KH, c = r / (g.KW * g.KH);
        index_t lo, hi;
        conv2d_geometry::valid(q - g.pad, g.s, g.W, g.OW, lo, hi);
        T *out = cols + r * width;
        for (index_t i = i0; i < i1; ++i, out += g.OW) {
          index_t const h = i * g.s + p - g.pad;
          if (h < 0 || h >= g.H) {
            std::fill(out, out + g.OW, T(0));
            continue;
          }
          T const *xr = x + (c * g.H + h) * g.W + q - g.pad;
          std::fill(out, out + lo, T(0));
          for (index_t j = lo; j < hi; ++j)
            out[j] = xr[j * g.s];
          std::fill(out + hi, out + g.OW, T(0));
        }
      },
      width);
}

// The adjoint of im2col: each entry of dcols (laid out as cols above) added to the element of gx
// (one image) it was read from; one thread per channel plane, so no two threads write one element.
template <class T>
void col2im(cpu const &ex, conv2d_geometry const &g, T const *dcols, index_t i0, index_t i1,
            T *gx) {
  index_t const width = (i1 - i0) * g.OW;
  for_each(
      ex, g.C,
      [=](index_t c) {
        for (index_t p = 0; p < g.KH; ++p)
          for (index_t q = 0; q < g.KW; ++q) {
            index_t lo, hi;
            conv2d_geometry::valid(q - g.pad, g.s, g.W, g.OW, lo, hi);
            T const *in = dcols + ((c * g.KH + p) * g.KW + q) * width;
            for (index_t i = i0; i < i1; ++i, in += g.OW) {
              index_t const h = i * g.s + p - g.pad;
              if (h < 0 || h >= g.H)
                continue;
              T *xr = gx + (c * g.H + h) * g.W + q - g.pad;
              for (index_t j = lo; j < hi; ++j)
                xr[j * g.s] += in[j];
            }
          }
      },
      g.KH * g.KW * width);
}

// The value from contiguous host operands (b undefined: no bias).
template <class T>
tensor<T> conv2d_gemm_run(cpu const &ex, tensor<T> const &x, tensor<T> const &w, tensor<T> const &b,
                          conv2d_geometry const &g) {
  auto y = tensor<T>::empty({g.N, g.O, g.OH, g.OW}, x.dev());
  int const m = int(g.O), k = int(g.C * g.KH * g.KW), p = int(g.OH * g.OW);
  index_t const rows = conv2d_block_rows<T>(g);
  auto cols = tensor<T>::empty({index_t(k) * rows * g.OW});
  for (index_t n = 0; n < g.N; ++n) {
    T *yn = y.raw_data() + n * m * p;
    if (b.defined())
      for (int o = 0; o < m; ++o)
        std::fill(yn + o * p, yn + (o + 1) * p, b.data()[o]);
    for (index_t i0 = 0; i0 < g.OH; i0 += rows) {
      index_t const i1 = std::min(g.OH, i0 + rows);
      int const width = int((i1 - i0) * g.OW);
      im2col(ex, g, x.data() + n * g.C * g.H * g.W, i0, i1, cols.raw_data());
      backend_gemm(hook{}, ex, false, false, m, width, k, w.data(), k, cols.data(), width,
                   b.defined() ? T(1) : T(0), yn + i0 * g.OW, p);
    }
  }
  return y;
}

// The input and weight gradients from contiguous host x, w and ybar (undefined where not wanted).
template <class T>
void conv2d_gemm_adjoints(cpu const &ex, tensor<T> const &x, tensor<T> const &w,
                          tensor<T> const &gy, conv2d_geometry const &g, tensor<T> *gx,
                          tensor<T> *gw) {
  int const m = int(g.O), k = int(g.C * g.KH * g.KW), p = int(g.OH * g.OW);
  if (gx)
    *gx = tensor<T>::zeros(x.dims(), x.dev());
  if (gw)
    *gw = tensor<T>::zeros(w.dims(), w.dev());
  if ((!gx && !gw) || gy.size() == 0 || x.size() == 0)
    return;
  index_t const rows = conv2d_block_rows<T>(g);
  auto cols = tensor<T>::empty({index_t(k) * rows * g.OW});
  for (index_t n = 0; n < g.N; ++n) {
    T const *gyn = gy.data() + n * m * p;
    T const *xn = x.data() + n * g.C * g.H * g.W;
    for (index_t i0 = 0; i0 < g.OH; i0 += rows) {
      index_t const i1 = std::min(g.OH, i0 + rows);
      int const width = int((i1 - i0) * g.OW);
      T const *gyb = gyn + i0 * g.OW; // ybar_n's columns of this block (leading dimension p)
      if (gw) {
        im2col(ex, g, xn, i0, i1, cols.raw_data());
        backend_gemm(hook{}, ex, false, true, m, k, width, gyb, p, cols.data(), width, T(1),
                     gw->raw_data(), k);
      }
      if (gx) {
        backend_gemm(hook{}, ex, true, false, k, width, m, w.data(), k, gyb, p, T(0),
                     cols.raw_data(), width);
        col2im(ex, g, cols.data(), i0, i1, gx->raw_data() + n * g.C * g.H * g.W);
      }
    }
  }
}

} // namespace dualcast::detail

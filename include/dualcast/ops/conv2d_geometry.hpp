// dualcast/ops/conv2d_geometry.hpp: the shapes of a 2-D convolution (ops/conv2d.hpp): its
// options, the gradients it gives, and the extents every conv2d kernel reads (checked once, when
// the call is made).
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/core/config.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <string>

namespace dualcast {

// How conv2d computes on the CPU: direct loops over the kernel taps, or the image's patches
// (im2col) times the weights through the BLAS's gemm (ops/conv2d_gemm.hpp); automatic picks by
// shape (detail::conv2d_uses_gemm). CUDA tensors always take the direct kernels.
enum class conv2d_algorithm { automatic, direct, im2col_gemm };

// Stride (1, 2, ...) and zero padding, the same along both image axes.
struct conv2d_options {
  index_t stride = 1;
  index_t padding = 0;
  conv2d_algorithm algorithm = conv2d_algorithm::automatic;
};

// The gradients conv2d_vjp gives: of the input, the weights and the bias (shape [O]).
template <class T> struct conv2d_grads { tensor<T> input, weights, bias; };

namespace detail {

struct conv2d_geometry {
  index_t N, C, H, W, O, KH, KW, OH, OW, s, pad;
  conv2d_algorithm algorithm;

  // The outputs j in [0, count) whose input coordinate j*s + offset lies in [0, n), as the range
  // [lo, hi) (the loops below never test a coordinate per element).
  DUALCAST_HD static void valid(index_t offset, index_t s, index_t n, index_t count, index_t &lo,
                                index_t &hi) {
    // smallest j with j*s + offset >= 0, and one past the largest with j*s + offset <= n - 1
    lo = offset >= 0 ? 0 : (-offset + s - 1) / s;
    index_t const top = n - 1 - offset;
    hi = top < 0 ? 0 : top / s + 1;
    hi = hi > count ? count : hi;
    lo = lo > hi ? hi : lo;
  }
};

inline conv2d_geometry make_conv2d_geometry(shape const &x, shape const &w, conv2d_options o) {
  auto fail = [&](std::string const &why) {
    throw shape_error("dualcast::conv2d: input " + to_string(x) + ", weights " + to_string(w) +
                      ", stride " + std::to_string(o.stride) + ", padding " +
                      std::to_string(o.padding) + ": " + why);
  };
  if (x.rank != 4 || w.rank != 4)
    fail("the input must be [N, C, H, W] and the weights [O, C, KH, KW]");
  if (x.ext[1] != w.ext[1])
    fail("the input and the weights have different channel counts");
  if (o.stride < 1 || o.padding < 0)
    fail("the stride must be >= 1 and the padding >= 0");
  conv2d_geometry g{};
  g.N = x.ext[0], g.C = x.ext[1], g.H = x.ext[2], g.W = x.ext[3];
  g.O = w.ext[0], g.KH = w.ext[2], g.KW = w.ext[3];
  g.s = o.stride, g.pad = o.padding;
  g.algorithm = o.algorithm;
  if (g.KH < 1 || g.KW < 1 || g.H + 2 * g.pad < g.KH || g.W + 2 * g.pad < g.KW)
    fail("the kernel is larger than the padded image");
  g.OH = (g.H + 2 * g.pad - g.KH) / g.s + 1;
  g.OW = (g.W + 2 * g.pad - g.KW) / g.s + 1;
  return g;
}

inline void check_conv2d_bias(shape const &b, conv2d_geometry const &g) {
  if (b.rank != 1 || b.ext[0] != g.O)
    throw shape_error("dualcast::conv2d: the bias has shape " + to_string(b) + ", expected [" +
                      std::to_string(g.O) + "]");
}

} // namespace detail

} // namespace dualcast

// Tests of conv2d (issue 13, item 4): values against a naive loop, gradients of the input, the
// weights and the bias against central differences in double precision (padding 0 / 1, stride
// 1 / 2, several channels, N = 2, non-square images and kernels), the tensor form's vjp against a
// naive sequential scatter, 1 thread equal to 2 bit for bit, and the shape errors -- each for
// both CPU algorithms (direct loops, im2col + gemm); gemm over blocks of output rows against the
// direct loops.
#include <dualcast/autodiff.hpp>

#include <doctest/doctest.h>

#include "tape_support.hpp"

#include <vector>

using namespace tape_support;

namespace {

struct conv_case {
  dc::index_t N, C, H, W, O, KH, KW, stride, padding;
};

// The value and, for the cotangent gy, the three gradients as plain reverse mode writes them (a
// sequential scatter): {y, xbar, wbar, bbar}.
std::vector<std::vector<double>> naive_conv(conv_case const &k, std::vector<double> const &x,
                                            std::vector<double> const &w,
                                            std::vector<double> const &b,
                                            std::vector<double> const &gy) {
  dc::index_t const OH = (k.H + 2 * k.padding - k.KH) / k.stride + 1;
  dc::index_t const OW = (k.W + 2 * k.padding - k.KW) / k.stride + 1;
  std::vector<double> y(std::size_t(k.N * k.O * OH * OW)), gx(x.size()), gw(w.size()), gb(b.size());
  auto at = [](dc::index_t a, dc::index_t b, dc::index_t c, dc::index_t d, dc::index_t B,
               dc::index_t C, dc::index_t D) { return std::size_t(((a * B + b) * C + c) * D + d); };
  for (dc::index_t n = 0; n < k.N; ++n)
    for (dc::index_t o = 0; o < k.O; ++o)
      for (dc::index_t i = 0; i < OH; ++i)
        for (dc::index_t j = 0; j < OW; ++j) {
          std::size_t const yi = at(n, o, i, j, k.O, OH, OW);
          double acc = b[std::size_t(o)];
          gb[std::size_t(o)] += gy[yi];
          for (dc::index_t c = 0; c < k.C; ++c)
            for (dc::index_t p = 0; p < k.KH; ++p)
              for (dc::index_t q = 0; q < k.KW; ++q) {
                dc::index_t const h = i * k.stride + p - k.padding;
                dc::index_t const v = j * k.stride + q - k.padding;
                if (h < 0 || h >= k.H || v < 0 || v >= k.W)
                  continue;
                std::size_t const xi = at(n, c, h, v, k.C, k.H, k.W);
                std::size_t const wi = at(o, c, p, q, k.C, k.KH, k.KW);
                acc += x[xi] * w[wi];
                gx[xi] += gy[yi] * w[wi];
                gw[wi] += gy[yi] * x[xi];
              }
          y[yi] = acc;
        }
  return {y, gx, gw, gb};
}

conv_case const cases[] = {
    {2, 3, 5, 6, 2, 3, 2, 1, 0}, {2, 3, 5, 6, 2, 3, 2, 1, 1}, {2, 2, 7, 6, 3, 3, 3, 2, 0},
    {2, 2, 7, 6, 3, 3, 3, 2, 1}, {2, 1, 4, 4, 1, 1, 1, 2, 1}, {1, 2, 3, 3, 2, 5, 4, 1, 1},
};

dc::conv2d_algorithm const algorithms[] = {dc::conv2d_algorithm::direct,
                                           dc::conv2d_algorithm::im2col_gemm};
char const *name(dc::conv2d_algorithm a) {
  return a == dc::conv2d_algorithm::direct ? "direct" : "im2col + gemm";
}

} // namespace

TEST_CASE("conv2d: values against a naive loop, vjp against a naive scatter (tensors, tape)") {
  unsigned seed = 1;
  for (auto const algorithm : algorithms)
    for (auto const &k : cases) {
      INFO(name(algorithm) << ", N C H W " << k.N << " " << k.C << " " << k.H << " " << k.W
                           << ", O KH KW " << k.O << " " << k.KH << " " << k.KW << ", stride "
                           << k.stride << ", padding " << k.padding);
      auto x = random_tensor({k.N, k.C, k.H, k.W}, ++seed);
      auto w = random_tensor({k.O, k.C, k.KH, k.KW}, ++seed);
      auto b = random_tensor({k.O}, ++seed);
      dc::conv2d_options const opt{k.stride, k.padding, algorithm};
      auto y = dc::conv2d(x, w, b, opt);
      auto gy = random_tensor(y.dims(), ++seed);
      auto ref = naive_conv(k, x.to_vector(), w.to_vector(), b.to_vector(), gy.to_vector());
      check_close(y.to_vector(), ref[0], 1e-14);
      auto d = dc::conv2d_vjp(x, w, gy, opt);
      check_close(d.input.to_vector(), ref[1], 1e-14);
      check_close(d.weights.to_vector(), ref[2], 1e-14);
      check_close(d.bias.to_vector(), ref[3], 1e-14);
      // Without bias: the same minus b.
      auto ref0 = naive_conv(k, x.to_vector(), w.to_vector(), std::vector<double>(b.size(), 0.0),
                             gy.to_vector());
      check_close(dc::conv2d(x, w, opt).to_vector(), ref0[0], 1e-14);
      // On the tape, from strided (transposed twice) and lazy inputs.
      dc::tape tp;
      auto xv = tp.variable(x.clone()), wv = tp.variable(w.clone()), bv = tp.variable(b.clone());
      auto yt = dc::conv2d(xv * 1.0, dc::transpose(dc::transpose(wv, 2, 3), 2, 3), bv, opt);
      check_close(yt.value().to_vector(), ref[0], 1e-14);
      tp.backward(dc::sum(yt * gy));
      check_close(grads_of(xv), ref[1], 1e-14);
      check_close(grads_of(wv), ref[2], 1e-14);
      check_close(grads_of(bv), ref[3], 1e-14);
    }
}

TEST_CASE("conv2d: gradients of input, weights and bias against central differences") {
  unsigned seed = 100;
  for (auto const algorithm : algorithms)
    for (auto const &k : cases) {
      INFO(name(algorithm) << ", stride " << k.stride << ", padding " << k.padding << ", kernel "
                           << k.KH << "x" << k.KW);
      auto x = random_tensor({k.N, k.C, k.H, k.W}, ++seed);
      auto w = random_tensor({k.O, k.C, k.KH, k.KW}, ++seed);
      auto b = random_tensor({k.O}, ++seed);
      dc::conv2d_options const opt{k.stride, k.padding, algorithm};
      // Through a nonlinearity, so that the cotangent reaching conv2d is not constant.
      check_gradients([opt](auto const &v) { return dc::tanh(dc::conv2d(v[0], v[1], v[2], opt)); },
                      {x, w, b});
      check_gradients([opt](auto const &v) { return dc::conv2d(v[0], v[1], opt); }, {x, w});
    }
}

TEST_CASE("conv2d: 1 thread and 2 threads give the same bits") {
  for (auto const algorithm : algorithms)
    for (dc::index_t stride : {1, 2}) {
      INFO(name(algorithm) << ", stride " << stride);
      auto x = random_tensor({2, 4, 61, 47}, 201), w = random_tensor({5, 4, 3, 3}, 202);
      auto b = random_tensor({5}, 203);
      std::vector<double> res[2][4];
      for (int threads : {1, 2}) {
        dc::tape tp;
        tp.ex.threads = threads;
        auto xv = tp.variable(x.clone()), wv = tp.variable(w.clone()), bv = tp.variable(b.clone());
        auto y = dc::conv2d(xv, wv, bv, {stride, 1, algorithm});
        tp.backward(dc::sum(y * random_tensor(y.dims(), 5)));
        auto &r = res[threads - 1];
        r[0] = y.value().to_vector(), r[1] = grads_of(xv), r[2] = grads_of(wv), r[3] = grads_of(bv);
      }
      for (int i = 0; i < 4; ++i) {
        INFO("result " << i);
        CHECK(same_bits(res[0][i], res[1][i]));
      }
    }
}

TEST_CASE("conv2d: im2col + gemm over blocks of output rows equals the direct loops") {
  // Patches of 144 rows by 9216 (8835) doubles exceed the 8 MiB per block: two blocks of output
  // rows per image, the second shorter.
  for (dc::index_t stride : {1, 2}) {
    INFO("stride " << stride);
    dc::index_t const side = stride == 1 ? 96 : 188;
    auto x = random_tensor({2, 16, side, side}, 301), w = random_tensor({8, 16, 3, 3}, 302);
    auto b = random_tensor({8}, 303);
    dc::conv2d_options direct{stride, 1, dc::conv2d_algorithm::direct}, gemm = direct;
    gemm.algorithm = dc::conv2d_algorithm::im2col_gemm;
    auto const g = dc::detail::make_conv2d_geometry(x.dims(), w.dims(), gemm);
    CHECK(dc::detail::conv2d_block_rows<double>(g) < g.OH);
    CHECK(dc::detail::conv2d_uses_gemm<double>(g));
    auto y = dc::conv2d(x, w, b, gemm);
    check_close(y.to_vector(), dc::conv2d(x, w, b, direct).to_vector(), 1e-12);
    auto gy = random_tensor(y.dims(), 304);
    auto d = dc::conv2d_vjp(x, w, gy, gemm), e = dc::conv2d_vjp(x, w, gy, direct);
    check_close(d.input.to_vector(), e.input.to_vector(), 1e-12);
    check_close(d.weights.to_vector(), e.weights.to_vector(), 1e-12);
    check_close(d.bias.to_vector(), e.bias.to_vector(), 1e-12);
  }
  // automatic: gemm with many channels, the direct loops with few (ops/conv2d_gemm.hpp)
  auto many = dc::detail::make_conv2d_geometry(shape{8, 32, 64, 64}, shape{32, 32, 3, 3}, {1, 1});
  auto one = dc::detail::make_conv2d_geometry(shape{1, 1, 512, 512}, shape{1, 1, 7, 7}, {1, 3});
  CHECK(dc::detail::conv2d_uses_gemm<float>(many));
  CHECK(!dc::detail::conv2d_uses_gemm<float>(one));
  many.algorithm = dc::conv2d_algorithm::direct;
  CHECK(!dc::detail::conv2d_uses_gemm<float>(many));
}

TEST_CASE("conv2d: shape errors") {
  auto x = random_tensor({1, 2, 4, 4}, 1);
  CHECK_THROWS_AS(dc::conv2d(x, random_tensor({3, 1, 3, 3}, 2)), dc::shape_error); // channels
  CHECK_THROWS_AS(dc::conv2d(x, random_tensor({3, 2, 6, 3}, 2)), dc::shape_error); // too large
  CHECK_THROWS_AS(dc::conv2d(x, random_tensor({3, 2, 3, 3}, 2), random_tensor({2}, 3)),
                  dc::shape_error); // bias
  CHECK_THROWS_AS(dc::conv2d(x, random_tensor({3, 2, 3, 3}, 2), {0, 0}), dc::shape_error);
  CHECK_THROWS_AS(dc::conv2d(random_tensor({2, 4, 4}, 1), random_tensor({3, 2, 3, 3}, 2)),
                  dc::shape_error);
  // The padded image fits a kernel of its size: a 1x1 output.
  CHECK(dc::conv2d(x, random_tensor({3, 2, 6, 6}, 2), {1, 1}).dims() == shape{1, 3, 1, 1});
}

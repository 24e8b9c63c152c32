// Image deblurring on the tape: recover a picture from a blurred, noisy copy of it by minimising
//   0.5 |conv2d(u, blur) - observed|^2 + lambda * TV(u)
// with Adam, where TV is a smoothed total variation, sum sqrt((u_right - u)^2 + (u_below - u)^2 +
// eps), written as a 2-D dualcast::stencil. The blur is a known Gaussian applied with
// dualcast::conv2d (zero padding, same size out); both adjoints are gathers, no atomics.
//
//   deblur [size = 96] [iterations = 300]
//
// Prints the loss and the RMS error of the estimate against the true picture as they fall;
// returns 1 if the error did not fall below the blurred observation's.
#include <dualcast/autodiff.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace dc = dualcast;
using T = double;

namespace {

constexpr dc::index_t blur_size = 7;

// A Gaussian blur of width 1.5 pixels, normalised to sum 1, as conv2d weights [1, 1, 7, 7].
dc::tensor<T> gaussian_blur() {
  std::vector<T> k(std::size_t(blur_size * blur_size));
  double sum = 0;
  dc::index_t const centre = blur_size / 2; // (integer: the middle tap)
  for (dc::index_t i = 0; i < blur_size; ++i)
    for (dc::index_t j = 0; j < blur_size; ++j) {
      double const di = double(i - centre), dj = double(j - centre);
      sum += k[std::size_t(i * blur_size + j)] = std::exp(-(di * di + dj * dj) / (2 * 1.5 * 1.5));
    }
  for (auto &v : k)
    v /= sum;
  return dc::tensor<T>::from({1, 1, blur_size, blur_size}, k);
}

// A test picture: a bright square, a disc and a dim bar on a dark background.
std::vector<T> picture(dc::index_t n) {
  std::vector<T> p(std::size_t(n * n), 0.1);
  for (dc::index_t i = 0; i < n; ++i)
    for (dc::index_t j = 0; j < n; ++j) {
      double const y = double(i) / double(n), x = double(j) / double(n);
      double &v = p[std::size_t(i * n + j)];
      if (y > 0.15 && y < 0.45 && x > 0.1 && x < 0.4)
        v = 0.9;
      if ((y - 0.65) * (y - 0.65) + (x - 0.65) * (x - 0.65) < 0.04)
        v = 0.7;
      if (y > 0.7 && y < 0.8 && x > 0.1 && x < 0.45)
        v = 0.5;
    }
  return p;
}

// The smoothed total variation at one pixel, from it and its right and lower neighbours (the
// clamp boundary repeats the edge: no jump across it).
struct total_variation {
  template <class A> A operator()(A c, A right, A below) const {
    return dc::sqrt((right - c) * (right - c) + (below - c) * (below - c) + 1e-4);
  }
};
constexpr auto tv_offsets = dc::offsets({0, 0}, {0, 1}, {1, 0});

double rms_difference(std::vector<T> const &a, std::vector<T> const &b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    s += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(s / double(a.size()));
}

} // namespace

int main(int argc, char **argv) {
  dc::index_t const n = argc > 1 ? std::atoi(argv[1]) : 96;
  int const iterations = argc > 2 ? std::atoi(argv[2]) : 300;
  if (n < 8 || iterations < 1) {
    std::fprintf(stderr, "usage: deblur [size >= 8] [iterations >= 1]\n");
    return 2;
  }
  dc::shape const image{1, 1, n, n};
  dc::conv2d_options const same{.stride = 1, .padding = blur_size / 2};
  auto const blur = gaussian_blur();
  auto const truth = picture(n);

  // The observation: blurred, plus noise.
  std::vector<T> observed = dc::conv2d(dc::tensor<T>::from(image, truth), blur, same).to_vector();
  std::mt19937 gen(3);
  std::normal_distribution<double> noise(0.0, 0.01);
  for (auto &v : observed)
    v += noise(gen);
  auto const obs = dc::tensor<T>::from(image, observed);
  double const blurred_error = rms_difference(observed, truth);

  // Adam from the observation itself.
  dc::tape tp;
  auto u = tp.variable(obs.clone());
  dc::adam<T> opt(std::vector<dc::var<T>>{u}, {.lr = 0.01});
  double const lambda = 2e-3;
  std::printf("deblurring a %lldx%lld picture (7x7 Gaussian blur, noise 0.01), %d Adam steps\n",
              static_cast<long long>(n), static_cast<long long>(n), iterations);
  std::printf("%10s %14s %14s\n", "iteration", "loss", "rms error");
  double error = blurred_error;
  for (int it = 0; it <= iterations; ++it) {
    auto d = dc::conv2d(u, tp.constant(blur), same) - obs;
    auto tv =
        dc::stencil(dc::reshape(u, {n, n}), tv_offsets, total_variation{}, dc::boundary::clamp);
    auto loss = dc::sum(d * d) * 0.5 + dc::sum(tv) * lambda;
    error = rms_difference(u.value().to_vector(), truth);
    if (it % (iterations / 10 > 0 ? iterations / 10 : 1) == 0 || it == iterations)
      std::printf("%10d %14.6e %14.6e\n", it, loss.item(), error);
    if (it == iterations)
      break;
    tp.backward(loss);
    opt.step();
    tp.zero_grad();
    tp.clear();
  }
  bool const fell = std::isfinite(error) && error < 0.9 * blurred_error;
  std::printf("rms error against the true picture: blurred %.4e -> deblurred %.4e (%s)\n",
              blurred_error, error, fell ? "fell" : "DID NOT FALL");
  return fell ? 0 : 1;
}

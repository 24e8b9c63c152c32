// An inverse problem through many stencil steps on the tape: recover the initial temperature of a
// periodic 2-D plate from a noisy observation of it `steps` explicit heat-equation steps later,
// by plain gradient descent on 0.5 |u_T(u_0) - observed|^2. Each step is one dualcast::stencil
// (the 5-point Laplacian, u += 0.2 * laplacian(u)); its adjoint is the gather with the mirrored
// stencil, so the backward pass through all steps is as parallel as the forward one.
//
//   heat_equation [size = 32] [steps = 50] [iterations = 200]
//
// Prints the loss and the RMS error of the recovered initial field (against the true one) as
// they fall; returns 1 if the error did not fall. (Diffusion destroys fine detail, so only the
// smooth part of the field comes back: the error falls, then levels off.)
#include <dualcast/autodiff.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace dc = dualcast;
using T = double;

namespace {

// One explicit Euler step of u_t = laplacian(u) with dt / h^2 = 0.2 (stable below 0.25).
struct heat_step {
  template <class A> A operator()(A c, A n, A s, A w, A e) const {
    return c + 0.2 * (n + s + w + e - 4.0 * c);
  }
};
constexpr auto five_point = dc::offsets({0, 0}, {-1, 0}, {1, 0}, {0, -1}, {0, 1});

// `steps` steps of the heat equation, on tensors (values) or tape variables alike.
template <class U> U evolve(U u, int steps) {
  for (int s = 0; s < steps; ++s)
    u = dc::stencil(u, five_point, heat_step{}, dc::boundary::periodic);
  return u;
}

double rms_difference(std::vector<T> const &a, std::vector<T> const &b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    s += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(s / double(a.size()));
}

} // namespace

int main(int argc, char **argv) {
  dc::index_t const n = argc > 1 ? std::atoi(argv[1]) : 32;
  int const steps = argc > 2 ? std::atoi(argv[2]) : 50;
  int const iterations = argc > 3 ? std::atoi(argv[3]) : 200;
  if (n < 4 || steps < 1 || iterations < 1) {
    std::fprintf(stderr, "usage: heat_equation [size >= 4] [steps >= 1] [iterations >= 1]\n");
    return 2;
  }

  // The true initial field: two warm blobs and a cool one.
  std::vector<T> truth(std::size_t(n * n));
  for (dc::index_t i = 0; i < n; ++i)
    for (dc::index_t j = 0; j < n; ++j) {
      auto blob = [&](double ci, double cj, double r, double a) {
        double const di = (double(i) - ci * double(n)) / (r * double(n));
        double const dj = (double(j) - cj * double(n)) / (r * double(n));
        return a * std::exp(-(di * di + dj * dj));
      };
      truth[std::size_t(i * n + j)] =
          blob(0.3, 0.3, 0.12, 1.0) + blob(0.65, 0.6, 0.18, 0.8) - blob(0.7, 0.2, 0.1, 0.6);
    }
  dc::shape const s{n, n};

  // The observation: the field `steps` steps later, with noise.
  std::vector<T> observed = evolve(dc::tensor<T>::from(s, truth), steps).to_vector();
  std::mt19937 gen(7);
  std::normal_distribution<double> noise(0.0, 0.005);
  for (auto &v : observed)
    v += noise(gen);
  auto const obs = dc::tensor<T>::from(s, observed);

  // Gradient descent from a zero field (the step 1 is stable: the forward map has norm <= 1).
  std::vector<T> u0(truth.size(), 0.0);
  double const lr = 1.0;
  double const first_error = rms_difference(u0, truth);
  std::printf("heat equation inverse problem: %lldx%lld, %d steps, %d iterations\n",
              static_cast<long long>(n), static_cast<long long>(n), steps, iterations);
  std::printf("%10s %14s %14s\n", "iteration", "loss", "rms error");
  double error = first_error;
  for (int it = 0; it <= iterations; ++it) {
    dc::tape tp;
    auto u = tp.variable(dc::tensor<T>::from(s, u0));
    auto d = evolve(u, steps) - obs;
    auto loss = dc::sum(d * d) * 0.5;
    error = rms_difference(u0, truth);
    if (it % (iterations / 10 > 0 ? iterations / 10 : 1) == 0 || it == iterations)
      std::printf("%10d %14.6e %14.6e\n", it, loss.item(), error);
    if (it == iterations)
      break;
    tp.backward(loss);
    auto const g = u.grad().to_vector();
    for (std::size_t k = 0; k < u0.size(); ++k)
      u0[k] -= lr * g[k];
  }
  bool const fell = std::isfinite(error) && error < 0.8 * first_error;
  std::printf("rms error of the initial field: %.4e -> %.4e (%s)\n", first_error, error,
              fell ? "fell" : "DID NOT FALL");
  return fell ? 0 : 1;
}

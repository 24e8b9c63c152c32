// A physics-informed network (issue 38, item 3): u'' = f on (0, 1) with u(0) = u(1) = 0 and
// f = -pi^2 sin(pi x), whose solution is sin(pi x). The network u(x) = x (1 - x) n(x), n a
// two-layer tanh MLP, meets the boundary conditions by construction; the loss is the mean squared
// residual u'' - f at collocation points, so d^2 u / dx^2 of the network is inside the loss.
//
// The derivatives in x are carried forward through the network (Taylor mode: each layer maps
// (z, z', z'') to (h, h', h'')): the linear parts are matmuls of the three, and each tanh layer is
// ONE fused node whose kernel gets tanh, tanh' and tanh'' from nested duals in the input direction
// -- tanh evaluated on dual<dual<L, 1>, 1> -- and the tape differentiates that kernel once more
// (its own duals around it) for the gradient in the parameters. Adam trains the parameters.
//
// Checks (non-zero exit otherwise): u'' of the network against central differences of u, one
// parameter gradient against a central difference of the loss, and the error against sin(pi x)
// falling by a factor of 4 at least.
//
// Usage: pinn_poisson [steps] [points] [hidden]
#include <dualcast/autodiff.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numbers>
#include <vector>

namespace dc = dualcast;

namespace {

// A tanh layer with the first two derivatives along x: (z, z', z'') -> (h, h', h'') with
// h' = tanh'(z) z', h'' = tanh''(z) z'^2 + tanh'(z) z''. tanh' and tanh'' come from tanh on a
// second-order nested dual seeded at z.
constexpr auto tanh_taylor = dc::kernel([](auto z, auto zx, auto zxx) {
  using L = decltype(z);
  using D1 = dc::dual<L, 1>;
  dc::dual<D1, 1> Z(D1::variable(z, 0)); // z + e1 + e2
  Z.d[0] = D1(L(1));
  auto const t = dc::tanh(Z);
  auto const d1 = t.val.d[0], d2 = t.d[0].d[0];
  return dc::outputs(t.val.val, d1 * zx, d2 * zx * zx + d1 * zxx);
});

using T64 = dc::tensor<double>;
using V64 = dc::var<double>;

struct pinn {
  T64 x, g0, g1, f; // points (n, 1); x (1 - x); 2 (1 - 2x); the right-hand side
  T64 ones, zeros;  // (n, 1), (n, hidden)
  std::vector<T64>
      p0; // initial parameters: W1 (1, h), b1 (h), W2 (h, h), b2 (h), W3 (h, 1), b3 (1)

  pinn(std::vector<double> const &xs, int hidden) {
    auto const n = dc::index_t(xs.size());
    std::vector<double> a(xs.size()), b(xs.size()), c(xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i) {
      a[i] = xs[i] * (1 - xs[i]);
      b[i] = 2 * (1 - 2 * xs[i]);
      c[i] = -std::numbers::pi * std::numbers::pi * std::sin(std::numbers::pi * xs[i]);
    }
    x = T64::from({n, 1}, xs), g0 = T64::from({n, 1}, a), g1 = T64::from({n, 1}, b);
    f = T64::from({n, 1}, c);
    ones = T64::full({n, 1}, 1.0), zeros = T64::zeros({n, dc::index_t(hidden)});
    dc::index_t const h = hidden;
    p0 = {dc::xavier_uniform<double>({1, h}, 1), T64::zeros({h}),
          dc::xavier_uniform<double>({h, h}, 2), T64::zeros({h}),
          dc::xavier_uniform<double>({h, 1}, 3), T64::zeros({1})};
  }

  // n, n', n'' at the points, on p's tape.
  std::array<V64, 3> network(dc::tape &tp, std::vector<V64> const &p) const {
    auto xc = tp.constant(x);
    auto z = dc::matmul(xc, p[0]) + p[1];
    auto zx = dc::matmul(tp.constant(ones), p[0]);
    auto [h, hx, hxx] = dc::fused(tanh_taylor, z, zx, zeros);
    auto [k, kx, kxx] = dc::fused(tanh_taylor, dc::matmul(h, p[2]) + p[3], dc::matmul(hx, p[2]),
                                  dc::matmul(hxx, p[2]));
    return {(dc::matmul(k, p[4]) + p[5]).eval(), dc::matmul(kx, p[4]), dc::matmul(kxx, p[4])};
  }
  // u'' = (g n)'' = g'' n + 2 g' n' + g n'' with g = x (1 - x).
  V64 u_xx(dc::tape &tp, std::array<V64, 3> const &n) const {
    return (-2.0 * n[0] + tp.constant(g1) * n[1] + tp.constant(g0) * n[2]).eval();
  }
  V64 loss(dc::tape &tp, std::vector<V64> const &p) const {
    auto r = u_xx(tp, network(tp, p)) - tp.constant(f);
    return dc::mean(r * r);
  }
};

// The network's u = x (1 - x) n(x) at points xs, with parameters ps.
std::vector<double> u_at(std::vector<double> const &xs, std::vector<T64> const &ps, int hidden) {
  pinn const m(xs, hidden);
  dc::tape tp;
  std::vector<V64> p;
  for (auto const &t : ps)
    p.push_back(tp.constant(t));
  auto const n = m.network(tp, p)[0].value().to_vector();
  std::vector<double> u(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i)
    u[i] = xs[i] * (1 - xs[i]) * n[i];
  return u;
}
double max_error(std::vector<T64> const &ps, int hidden) {
  std::vector<double> xs;
  for (int i = 0; i <= 100; ++i)
    xs.push_back(i / 100.0);
  auto const u = u_at(xs, ps, hidden);
  double e = 0;
  for (std::size_t i = 0; i < xs.size(); ++i)
    e = std::max(e, std::abs(u[i] - std::sin(std::numbers::pi * xs[i])));
  return e;
}

} // namespace

int main(int argc, char **argv) {
  int const steps = argc > 1 ? std::atoi(argv[1]) : 1500;
  int const points = argc > 2 ? std::atoi(argv[2]) : 32;
  int const hidden = argc > 3 ? std::atoi(argv[3]) : 16;
  std::vector<double> xs;
  for (int i = 0; i < points; ++i)
    xs.push_back((i + 0.5) / points);
  pinn const m(xs, hidden);
  bool ok = true;

  // u'' of the network at the initial parameters against central differences of u.
  {
    dc::tape tp;
    std::vector<V64> p;
    for (auto const &t : m.p0)
      p.push_back(tp.constant(t));
    auto const uxx = m.u_xx(tp, m.network(tp, p)).value().to_vector();
    double const h = 1e-4, x0 = xs[std::size_t(points / 3)];
    auto const u = u_at({x0 - h, x0, x0 + h}, m.p0, hidden);
    double const fd = (u[0] - 2 * u[1] + u[2]) / (h * h);
    bool const good = std::abs(uxx[std::size_t(points / 3)] - fd) < 1e-5 * (1 + std::abs(fd));
    std::printf("u''(%.4f) = %.8f, central difference %.8f: %s\n", x0, uxx[std::size_t(points / 3)],
                fd, good ? "ok" : "MISMATCH");
    ok = ok && good;
  }
  // One parameter gradient (W2(0, 1)) against a central difference of the loss.
  {
    dc::tape tp;
    std::vector<V64> p;
    for (auto const &t : m.p0)
      p.push_back(tp.variable(t.clone()));
    tp.backward(m.loss(tp, p));
    double const g = p[2].grad().to_vector()[1];
    auto loss_at = [&](double d) {
      dc::tape t2;
      std::vector<V64> q;
      for (auto const &t : m.p0)
        q.push_back(t2.constant(t.clone()));
      q[2].value().mutable_data()[1] += d;
      return m.loss(t2, q).item();
    };
    double const fd = (loss_at(1e-6) - loss_at(-1e-6)) / 2e-6;
    bool const good = std::abs(g - fd) < 1e-5 * (1 + std::abs(fd));
    std::printf("d loss / d W2(0, 1) = %.8f, central difference %.8f: %s\n", g, fd,
                good ? "ok" : "MISMATCH");
    ok = ok && good;
  }

  // Training.
  dc::tape tp;
  dc::parameters<double> ps;
  std::vector<V64> p;
  char const *names[] = {"W1", "b1", "W2", "b2", "W3", "b3"};
  for (std::size_t i = 0; i < m.p0.size(); ++i)
    p.push_back(ps.add(names[i], tp.variable(m.p0[i].clone())));
  dc::adam opt(ps, {.lr = 0.01});
  double const e0 = max_error(m.p0, hidden);
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    auto loss = m.loss(tp, p);
    tp.backward(loss);
    opt.step();
    tp.zero_grad();
    tp.clear();
    (step == 0 ? first : last) = loss.item();
  }
  std::vector<T64> trained;
  for (auto const &v : p)
    trained.push_back(v.value());
  double const e1 = max_error(trained, hidden);
  bool const fell = e1 < 0.25 * e0;
  std::printf("%d steps, %d points, %d hidden: residual loss %.3e -> %.3e, max |u - sin(pi x)| "
              "%.3e -> %.3e: %s\n",
              steps, points, hidden, first, last, e0, e1, fell ? "ok" : "FAILED");
  return ok && fell ? 0 : 1;
}

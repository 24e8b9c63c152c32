// Tests of the training essentials: initialisation from a seed (pinned values, statistics),
// parameter lists, no_grad (no node recorded by any kind of operation) and detach, float <->
// double casts of tensors and tape variables, SGD and Adam (one step against the formulas, a tiny
// model trained, stale graphs after a step), printing, and .npy / .npz files (round trips,
// hand-made files in Fortran order, version 2.0 and big-endian, every malformed or truncated
// input an error and never a crash).
#include <dualcast/autodiff.hpp>

#include <doctest/doctest.h>

#include "tape_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace tape_support;
using T32 = dc::tensor<float>;
using V32 = dc::var<float>;

namespace {

// A file name in the temporary directory, removed when the object goes (tests run in parallel
// processes: the name is random).
struct temp_file {
  std::filesystem::path path;
  explicit temp_file(std::string const &ext) {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() /
           ("dualcast_test_nn_" + std::to_string(rd()) + std::to_string(rd()) + ext);
  }
  temp_file(temp_file const &) = delete;
  temp_file &operator=(temp_file const &) = delete;
  ~temp_file() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

std::string read_bytes(std::filesystem::path const &p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(std::filesystem::path const &p, std::string const &b) {
  std::ofstream out(p, std::ios::binary);
  out.write(b.data(), std::streamsize(b.size()));
}

// A hand-made .npy file: the magic, version, header length and header as given, then the data.
std::string npy_file(std::string header, std::string const &data, int major = 1) {
  std::string out("\x93NUMPY", 6);
  out += char(major);
  out += char(0);
  std::size_t const pre = major == 1 ? 10 : 12;
  while ((pre + header.size() + 1) % 64 != 0)
    header += ' ';
  header += '\n';
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i)
    out += char((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}
template <class U> std::string raw(std::vector<U> const &v, bool big_endian = false) {
  std::string s(v.size() * sizeof(U), '\0');
  std::memcpy(s.data(), v.data(), s.size());
  if (big_endian)
    for (std::size_t i = 0; i < s.size(); i += sizeof(U))
      std::reverse(s.begin() + std::ptrdiff_t(i), s.begin() + std::ptrdiff_t(i + sizeof(U)));
  return s;
}

void check_vec(std::vector<double> const &a, std::vector<double> const &b, double tol = 1e-12) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("element " << i);
    CHECK(a[i] == doctest::Approx(b[i]).epsilon(tol).scale(1.0));
  }
}
std::vector<double> to_double(std::vector<float> const &v) { return {v.begin(), v.end()}; }

} // namespace

// ---- initialisation
// -------------------------------------------------------------------------------
TEST_CASE("init: the same seed gives the same numbers, pinned -- statistics and Xavier bounds") {
  auto u = dc::uniform<double>({2, 3}, -1.0, 1.0, 42);
  CHECK(u.dims() == shape{2, 3});
  CHECK(u.to_vector() == dc::uniform<double>({2, 3}, -1.0, 1.0, 42).to_vector());
  CHECK(u.to_vector() != dc::uniform<double>({2, 3}, -1.0, 1.0, 43).to_vector());
  // Pinned: mt19937_64 (fixed by the standard) and dualcast's own mapping give these numbers
  // with every compiler and standard library.
  std::mt19937_64 bits(42);
  std::uint64_t const b0 = bits();
  CHECK(u.to_vector()[0] == -1.0 + 2.0 * (double(b0 >> 11) * 0x1p-53));
  check_vec(u.to_vector(),
            {0.51031106590907793, 0.27806278770939485, 0.5042904014960532, -0.72745463273512589,
             0.80653793285675657, -0.81186337647432594},
            1e-15);
  auto n = dc::normal<double>({5}, 0.0, 1.0, 7);
  check_vec(n.to_vector(),
            {1.5913998756469563, -0.52481323512949596, 0.38890323470535709, -0.31393152099566934,
             0.51917236460282778},
            1e-14);
  std::mt19937_64 nb(7); // Box-Muller: the first pair from the first two draws
  double const u1 = double(nb() >> 11) * 0x1p-53, u2 = double(nb() >> 11) * 0x1p-53;
  double const radius = std::sqrt(-2 * std::log(1 - u1)), two_pi = 2 * std::acos(-1.0);
  CHECK(n.to_vector()[0] == doctest::Approx(radius * std::cos(two_pi * u2)).epsilon(1e-15));
  CHECK(n.to_vector()[1] == doctest::Approx(radius * std::sin(two_pi * u2)).epsilon(1e-15));
  CHECK(dc::normal<float>({3}, 0.0f, 1.0f, 7).to_vector() ==
        std::vector<float>{1.59139991f, -0.524813235f, 0.38890323f});
  auto f = dc::uniform<float>({4}, 0.0f, 1.0f, 42);
  std::mt19937_64 fb(42);
  CHECK(f.to_vector()[0] == float(fb() >> 40) * 0x1p-24f);

  // Statistics over 10^5 draws.
  auto big = dc::uniform<float>({100000}, -2.0f, 3.0f, 1).to_vector();
  double mean = 0;
  float lo = 3.0f, hi = -2.0f;
  for (float x : big) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    mean += x;
  }
  CHECK(lo >= -2.0f);
  CHECK(lo < -1.99f);
  CHECK(hi < 3.0f);
  CHECK(hi > 2.99f);
  CHECK(mean / 1e5 == doctest::Approx(0.5).epsilon(0.02));
  auto g = dc::normal<double>({100001}, 2.0, 3.0, 5).to_vector(); // odd size: the last of a pair
  double m = 0, s2 = 0;
  for (double x : g)
    m += x;
  m /= double(g.size());
  for (double x : g)
    s2 += (x - m) * (x - m);
  CHECK(m == doctest::Approx(2.0).epsilon(0.02));
  CHECK(std::sqrt(s2 / double(g.size())) == doctest::Approx(3.0).epsilon(0.02));

  // Xavier: fan_in, fan_out from the last two dimensions.
  auto xu = dc::xavier_uniform<double>({3, 40, 60}, 9).to_vector();
  double const a = std::sqrt(6.0 / 100.0);
  double mx = 0;
  for (double x : xu)
    mx = std::max(mx, std::abs(x));
  CHECK(mx <= a);
  CHECK(mx > 0.95 * a);
  auto xn = dc::xavier_normal<double>({200, 300}, 9, 2.0).to_vector();
  double v = 0;
  for (double x : xn)
    v += x * x;
  CHECK(std::sqrt(v / double(xn.size())) ==
        doctest::Approx(2.0 * std::sqrt(2.0 / 500.0)).epsilon(0.02));
  CHECK_THROWS_AS(dc::xavier_uniform<float>({5}, 1), dc::shape_error);
  CHECK_THROWS_AS(dc::xavier_normal<float>(shape{}, 1), dc::shape_error);
}

// ---- parameter lists
// --------------------------------------------------------------------------------
TEST_CASE("parameters: names, order, element count, zero_grad, errors") {
  dc::tape tp;
  dc::parameters<double> ps;
  auto w = ps.add("w", tp.variable(random_tensor({2, 3}, 1)));
  auto b = ps.add("b", tp.variable(T64::zeros({3})));
  ps.add("frozen", tp.constant(T64::zeros({4})));
  CHECK(ps.size() == 3);
  CHECK(ps.numel() == 13);
  CHECK(ps.contains("b"));
  CHECK(!ps.contains("x"));
  CHECK(ps["w"].value().data() == w.value().data());
  std::vector<std::string> names;
  for (auto const &[name, v] : ps)
    names.push_back(name);
  CHECK(names == std::vector<std::string>{"w", "b", "frozen"});
  CHECK_THROWS_AS(ps.add("w", w), dc::tape_error);
  CHECK_THROWS_AS((void)ps["nope"], dc::index_error);

  tp.backward(dc::sum(w * 3.0 + b));
  CHECK(w.grad().to_vector() == std::vector<double>(6, 3.0));
  ps.zero_grad();
  CHECK(w.grad().to_vector() == std::vector<double>(6, 0.0));
  CHECK(b.grad().to_vector() == std::vector<double>(3, 0.0));
  dc::parameters<double> two{{"w", w}, {"b", b}};
  CHECK(two.size() == 2);
}

TEST_CASE("an unreached leaf's gradient is zeros") {
  dc::tape tp;
  auto x = tp.variable(random_tensor({3}, 2)), unused = tp.variable(random_tensor({2, 2}, 3));
  tp.backward(dc::sum(x * x));
  CHECK(!unused.has_grad());
  CHECK(unused.grad().dims() == shape{2, 2});
  CHECK(unused.grad().to_vector() == std::vector<double>(4, 0.0));
}

// ---- gradient hooks (what data parallelism builds on) -------------------------------------------
TEST_CASE("gradient hooks: each leaf's once per backward, as soon as its gradient is final") {
  dc::tape tp;
  auto a = tp.variable(random_tensor({2, 3}, 21)), b = tp.variable(random_tensor({3, 2}, 22));
  auto unused = tp.variable(random_tensor({2}, 23));
  // loss = sum(tanh(a b) * b^T... ): a is used first (by the matmul), b by the matmul and later
  // on its own, so b's last writer runs before a's in backward.
  auto loss_of = [&] {
    auto h = dc::tanh(dc::matmul(a, b));         // first use of a and of b
    auto late = dc::matmul(h, dc::transpose(b)); // b again, later
    return dc::sum(late * late);
  };
  std::vector<std::string> events;
  std::vector<double> a_seen, b_seen;
  tp.on_gradient_ready(a, [&] {
    events.push_back("a");
    a_seen = a.grad().to_vector();
  });
  auto hb = tp.on_gradient_ready(b, [&] {
    events.push_back("b");
    b_seen = b.grad().to_vector();
  });
  tp.on_gradient_ready(unused,
                       [&] { events.push_back(unused.has_grad() ? "unused reached" : "unused"); });
  tp.on_backward_end([&] { events.push_back("end"); });
  tp.backward(loss_of());
  // The unused leaf's hook runs before any node, the end hook last; a's and b's see their final
  // gradients of this backward.
  REQUIRE(events.size() == 4);
  CHECK(events[0] == "unused");
  CHECK(events[3] == "end");
  auto const ga = a.grad().to_vector(), gb = b.grad().to_vector();
  CHECK(a_seen == ga);
  CHECK(b_seen == gb);
  // A second backward without zero_grad: the hooks see its contribution alone; the gradients
  // accumulate after them.
  tp.clear();
  events.clear();
  tp.backward(loss_of());
  CHECK(events.size() == 4);
  CHECK(a_seen == ga);
  auto const ga2 = a.grad().to_vector();
  for (std::size_t i = 0; i < ga.size(); ++i)
    CHECK(ga2[i] == doctest::Approx(2 * ga[i]));
  // Removed hooks stay silent; hooks are for leaves of this tape that require gradients.
  tp.remove_hook(hb);
  tp.clear();
  events.clear();
  tp.backward(loss_of());
  CHECK(std::count(events.begin(), events.end(), "b") == 0);
  CHECK_THROWS_AS(tp.on_gradient_ready(tp.constant(random_tensor({2}, 1)), [] {}), dc::tape_error);
}

TEST_CASE("gradient hooks: a leaf whose last writer runs early is ready before the others") {
  dc::tape tp;
  auto first = tp.variable(random_tensor({4}, 31)), last = tp.variable(random_tensor({4}, 32));
  std::size_t first_at = 0, last_at = 0, calls = 0;
  tp.on_gradient_ready(first, [&] { first_at = ++calls; });
  tp.on_gradient_ready(last, [&] { last_at = ++calls; });
  dc::var<double> y = dc::sum(dc::exp(first)); // nodes that use `first` only
  dc::var<double> z = dc::sum(dc::sin(last) * y);
  tp.backward(z);
  CHECK(last_at == 1); // final once z's nodes ran, before y's
  CHECK(first_at == 2);
}

// ---- no_grad and detach -------------------------------------------------------------------------
namespace {
constexpr auto affine = dc::kernel([](auto x, auto w) { return dc::tanh(x * w) + w; });
}

TEST_CASE(
    "no_grad: no operation records a node -- outputs need no gradient -- the mode comes back") {
  dc::tape tp;
  auto x = tp.variable(random_tensor({3, 4}, 4)), w = tp.variable(random_tensor({4, 2}, 5));
  auto y = tp.variable(random_tensor({3, 4}, 6));
  {
    dc::no_grad guard(tp);
    CHECK(!tp.grad_enabled());
    std::vector<V64> outs;
    outs.push_back(dc::fused(dc::policy::store, affine, x, y));     // fused, store
    outs.push_back(dc::fused(dc::policy::recompute, affine, x, y)); // fused, recompute
    outs.push_back((dc::sin(x) * y + 1.0).eval());                  // lazy
    outs.push_back(dc::matmul(x, w));                               // matmul
    outs.push_back(dc::sum(x));                                     // reductions
    outs.push_back(dc::mean(x, {1}));
    outs.push_back(dc::max(x, {0}));
    outs.push_back(dc::slice(x, 1, 0, 2));                 // slice
    outs.push_back(dc::softmax(x));                        // softmax family
    outs.push_back(dc::reshape(x, {12}));                  // shape ops
    outs.push_back(dc::concat(std::vector<V64>{x, y}, 0)); // run-time inputs
    outs.push_back(dc::index_select(x, 0, {2, 0}));        // indexing
    outs.push_back(dc::cast<double>(dc::cast<float>(x)));  // casts
    tp.fused = false;                                      // unfused
    outs.push_back(dc::call(affine, x, y));
    outs.push_back((dc::exp(x) * y).eval());
    tp.fused = true;
    { dc::no_grad nested(tp); }
    CHECK(!tp.grad_enabled()); // the nested guard put back what it found
    CHECK(tp.node_count() == 0);
    CHECK(tp.saved_bytes() == 0);
    for (auto const &o : outs)
      CHECK(!o.requires_grad());
    // The values are the same as with recording.
    auto v = dc::matmul(x, w).value().to_vector();
    CHECK(tp.node_count() == 0);
    // A leaf made inside the scope still requires gradients.
    CHECK(tp.variable(T64::zeros({2})).requires_grad());
    CHECK_THROWS_AS(tp.backward(dc::sum(x)), dc::tape_error); // nothing to differentiate
  }
  CHECK(tp.grad_enabled());
  auto loss = dc::sum(dc::matmul(x, w));
  CHECK(tp.node_count() == 2);
  CHECK(loss.requires_grad());
  tp.backward(loss);
  CHECK(w.grad().defined());
}

TEST_CASE("detach: the same storage, no gradient through it") {
  dc::tape tp;
  auto W = random_tensor({2, 3}, 7);
  auto w = tp.variable(W);
  auto d = dc::detach(w);
  CHECK(!d.requires_grad());
  CHECK(d.owner() == &tp);
  CHECK(d.value().data() == w.value().data());
  // d/dw sum(w * stop(w)) = stop(w) = w, not 2 w.
  tp.backward(dc::sum(w * d));
  check_vec(w.grad().to_vector(), W.to_vector());
  // A detached lazy expression.
  tp.zero_grad();
  auto e = dc::detach(w * 2.0);
  CHECK(!e.requires_grad());
  tp.backward(dc::sum(w * e));
  auto g = w.grad().to_vector();
  for (std::size_t i = 0; i < g.size(); ++i)
    CHECK(g[i] == doctest::Approx(2 * W.to_vector()[i]));
}

// ---- casts ------------------------------------------------------------------------------------
TEST_CASE("cast: float <-> double, tensors and tape variables") {
  auto D = T64::from({2, 3}, {1.5, -2.25, 1e-3, 3.0, 1.0 / 3.0, -7.0});
  T32 f = dc::cast<float>(D);
  CHECK(f.dims() == D.dims());
  for (std::size_t i = 0; i < 6; ++i)
    CHECK(f.to_vector()[i] == float(D.to_vector()[i]));
  CHECK(dc::cast<double>(f).to_vector() == to_double(f.to_vector()));
  CHECK(dc::cast<double>(D).data() == D.data()); // the same type: itself
  T32 ft = dc::cast<float>(D.transposed());      // strided input
  CHECK(ft.dims() == shape{3, 2});
  CHECK(ft(2, 0) == float(D(0, 2)));
  CHECK(!dc::cast<float>(T64{}).defined());

  // Gradients flow back converted: d/dx sum(c * double(float(x) * float(x))) = 2 c x.
  dc::tape tp;
  auto X = random_tensor({2, 3}, 8), C = random_tensor({2, 3}, 9);
  auto x = tp.variable(X);
  auto xf = dc::cast<float>(x);
  CHECK(xf.requires_grad());
  dc::var<double> y = dc::cast<double>(xf * xf);
  tp.backward(dc::sum(y * C));
  auto g = x.grad().to_vector();
  for (std::size_t i = 0; i < g.size(); ++i)
    CHECK(g[i] == doctest::Approx(2 * C.to_vector()[i] * X.to_vector()[i]).epsilon(1e-6));
  // float leaf, double loss.
  dc::tape t2;
  auto v = t2.variable(T32::from({3}, {1.0f, 2.0f, -3.0f}));
  t2.backward(dc::sum(dc::cast<double>(v) * dc::cast<double>(v) * 0.5));
  CHECK(v.grad().to_vector() == std::vector<float>{1.0f, 2.0f, -3.0f});
  // The cast of a constant records nothing.
  dc::tape t3;
  auto c = dc::cast<float>(t3.constant(X));
  CHECK(!c.requires_grad());
  CHECK(t3.node_count() == 0);
}

// ---- optimizers ---------------------------------------------------------------------------------
TEST_CASE("sgd: momentum, weight decay and Nesterov steps follow the formulas") {
  std::vector<double> const p0{1.0, -2.0, 0.5}, c{0.5, 1.0, -2.0};
  double const lr = 0.1, mu = 0.9, wd = 0.01;
  for (bool nesterov : {false, true}) {
    INFO("nesterov " << nesterov);
    dc::tape tp;
    dc::parameters<double> ps;
    auto p = ps.add("p", tp.variable(T64::from({3}, p0)));
    dc::sgd opt(ps, {.lr = lr, .momentum = mu, .weight_decay = wd, .nesterov = nesterov});
    std::vector<double> want = p0, buf(3);
    for (int step = 0; step < 3; ++step) {
      tp.backward(dc::sum(p * T64::from({3}, c))); // gradient c
      auto const v0 = p.value().version();
      opt.step();
      CHECK(p.value().version() > v0);
      tp.zero_grad();
      tp.clear();
      for (std::size_t i = 0; i < 3; ++i) {
        double const g = c[i] + wd * want[i];
        buf[i] = step == 0 ? g : mu * buf[i] + g;
        want[i] -= lr * (nesterov ? g + mu * buf[i] : buf[i]);
      }
      check_vec(p.value().to_vector(), want);
      check_vec(opt.momentum_buffer(0).to_vector(), buf);
    }
    CHECK(opt.step_count() == 3);
  }
  // Plain SGD, a float parameter.
  dc::tape tp;
  auto q = tp.variable(T32::from({2}, {1.0f, 2.0f}));
  dc::sgd<float> plain(std::vector<V32>{q}, {.lr = 0.5});
  tp.backward(dc::sum(q * q)); // gradient 2 q
  plain.step();
  CHECK(q.value().to_vector() == std::vector<float>{0.0f, 0.0f});
  CHECK(!plain.momentum_buffer(0).defined());
  CHECK_THROWS_AS(dc::sgd<float>(std::vector<V32>{q}, {.lr = -1}), dc::error);
  CHECK_THROWS_AS(dc::sgd<float>(std::vector<V32>{q}, {.lr = 1, .nesterov = true}), dc::error);
}

TEST_CASE("adam: bias-corrected steps follow the formula -- AdamW decays the weights") {
  std::vector<double> const p0{1.0, -2.0, 0.5}, c{0.5, 1e-3, -2.0};
  for (bool decoupled : {false, true}) {
    INFO("decoupled " << decoupled);
    dc::adam_options const o{.lr = 0.01,
                             .beta1 = 0.8,
                             .beta2 = 0.9,
                             .eps = 1e-6,
                             .weight_decay = 0.1,
                             .decoupled_weight_decay = decoupled};
    dc::tape tp;
    dc::parameters<double> ps;
    auto p = ps.add("p", tp.variable(T64::from({3}, p0)));
    dc::adam opt(ps, o);
    std::vector<double> want = p0, m(3), v(3);
    for (int t = 1; t <= 3; ++t) {
      tp.backward(dc::sum(p * p * T64::from({3}, c))); // gradient 2 c p
      opt.step();
      tp.zero_grad();
      tp.clear();
      for (std::size_t i = 0; i < 3; ++i) {
        double g = 2 * c[i] * want[i];
        if (decoupled)
          want[i] *= 1 - o.lr * o.weight_decay;
        else
          g += o.weight_decay * want[i];
        m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
        v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
        double const mh = m[i] / (1 - std::pow(o.beta1, t)), vh = v[i] / (1 - std::pow(o.beta2, t));
        want[i] -= o.lr * mh / (std::sqrt(vh) + o.eps);
      }
      check_vec(p.value().to_vector(), want, 1e-12);
      check_vec(opt.first_moment(0).to_vector(), m, 1e-12);
      check_vec(opt.second_moment(0).to_vector(), v, 1e-12);
    }
  }
  // The first step moves every element by about lr (the update is scale-free).
  dc::tape tp;
  auto q = tp.variable(T32::from({3}, {1.0f, 1.0f, 1.0f}));
  dc::adam<float> opt(std::vector<V32>{q}, {.lr = 0.1});
  tp.backward(dc::sum(q * T32::from({3}, {1e-3f, 1.0f, -1e3f})));
  opt.step();
  auto qv = q.value().to_vector();
  CHECK(qv[0] == doctest::Approx(0.9f).epsilon(1e-4));
  CHECK(qv[1] == doctest::Approx(0.9f));
  CHECK(qv[2] == doctest::Approx(1.1f));
  CHECK_THROWS_AS(dc::adam<float>(std::vector<V32>{q}, {.beta1 = 1.0}), dc::error);
}

TEST_CASE("optimizers: a tiny MLP trained with Adam and with SGD -- the loss falls") {
  // y = sin(2 x) on 16 points, one hidden tanh layer of 8.
  std::vector<double> xs, ys;
  for (int i = 0; i < 16; ++i) {
    double const x = -1.0 + 2.0 * i / 15.0;
    xs.push_back(x);
    ys.push_back(std::sin(2 * x));
  }
  auto X = T64::from({16, 1}, xs), Y = T64::from({16, 1}, ys);
  for (int which = 0; which < 2; ++which) {
    std::string const name = which == 0 ? "adam" : "sgd";
    INFO("optimizer " << name);
    dc::tape tp;
    dc::parameters<double> ps;
    auto w1 = ps.add("w1", tp.variable(dc::xavier_uniform<double>({1, 8}, 1)));
    auto b1 = ps.add("b1", tp.variable(T64::zeros({8})));
    auto w2 = ps.add("w2", tp.variable(dc::xavier_uniform<double>({8, 1}, 2)));
    auto b2 = ps.add("b2", tp.variable(T64::zeros({1})));
    dc::adam<double> adam(ps, {.lr = 0.05});
    dc::sgd<double> sgd(ps, {.lr = 0.1, .momentum = 0.9});
    auto x = tp.constant(X);
    double first = 0, last = 0;
    for (int it = 0; it < 200; ++it) {
      auto h = dc::tanh(dc::matmul(x, w1) + b1);
      auto err = dc::matmul(h, w2) + b2 - Y;
      auto loss = dc::mean(err * err);
      tp.backward(loss);
      if (it == 0)
        first = loss.item();
      last = loss.item();
      if (which == 0)
        adam.step();
      else
        sgd.step();
      tp.zero_grad();
      tp.clear();
      CHECK(tp.node_count() == 0);
    }
    INFO("loss " << first << " -> " << last);
    CHECK(last < 0.1 * first);
  }
}

TEST_CASE("optimizers: a graph recorded before a step is stale (version_error) -- strided values") {
  dc::tape tp;
  auto x = tp.variable(random_tensor({3, 4}, 10));
  auto w = tp.variable(random_tensor({4, 2}, 11));
  dc::sgd<double> opt(std::vector<V64>{w}, {.lr = 0.1});
  auto loss = dc::sum(dc::matmul(x, w)); // matmul saves w (for x's gradient)
  tp.backward(loss, true);
  opt.step();
  CHECK_THROWS_AS(tp.backward(loss), dc::version_error);
  tp.clear();

  // A variable whose value is a transposed view: updated element by element in place.
  auto W = random_tensor({2, 3}, 12);
  dc::tape t2;
  auto wt = t2.variable(W.transposed());
  auto unreached = t2.variable(T64::from({2}, {5.0, 6.0}));
  dc::sgd<double> o2(std::vector<V64>{wt, unreached}, {.lr = 1.0});
  auto C = random_tensor({3, 2}, 13);
  t2.backward(dc::sum(wt * C));
  auto before = W.to_vector();
  o2.step();
  CHECK(W.is_contiguous()); // the variable's value is a view of W
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      CHECK(W(j, i) == doctest::Approx(before[std::size_t(j * 3 + i)] - C(i, j)));
  // A variable no backward reached has no gradient: skipped.
  CHECK(unreached.value().to_vector() == std::vector<double>{5.0, 6.0});
}

// ---- printing ---------------------------------------------------------------------------------
TEST_CASE("print: shape, type, device and values -- summarised like NumPy") {
  std::ostringstream s;
  s << T32::from({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(s.str() == "tensor<float> shape (2, 3) on host\n[[1, 2, 3],\n [4, 5, 6]]");
  CHECK(dc::to_string(T64::scalar(2.5)) == "tensor<double> shape () on host\n2.5");
  CHECK(dc::to_string(T64::from({3}, {1, -10.5, 100})) ==
        "tensor<double> shape (3,) on host\n[    1, -10.5,   100]");
  CHECK(dc::to_string(T64::from({2, 1, 2}, {1, 2, 3, 4})) ==
        "tensor<double> shape (2, 1, 2) on host\n[[[1, 2]],\n\n [[3, 4]]]");
  CHECK(dc::to_string(T64{}) == "tensor<double> (undefined)");
  CHECK(dc::to_string(T64::zeros({2, 0})) == "tensor<double> shape (2, 0) on host\n[[],\n []]");
  std::vector<double> many(2000);
  for (std::size_t i = 0; i < many.size(); ++i)
    many[i] = double(i);
  CHECK(dc::to_string(T64::from({2000}, many)) ==
        "tensor<double> shape (2000,) on host\n[   0,    1,    2, ..., 1997, 1998, 1999]");
  CHECK(dc::to_string(T64::from({40, 50}, many), {.edge_items = 2}) ==
        "tensor<double> shape (40, 50) on host\n"
        "[[   0,    1, ...,   48,   49],\n"
        " [  50,   51, ...,   98,   99],\n"
        " ...,\n"
        " [1900, 1901, ..., 1948, 1949],\n"
        " [1950, 1951, ..., 1998, 1999]]");
  CHECK(dc::to_string(T64::from({2}, {1.0 / 3.0, 2e-9}), {.precision = 3}) ==
        "tensor<double> shape (2,) on host\n[0.333, 2e-09]");
  // A strided view prints its own elements.
  CHECK(dc::to_string(T64::from({2, 2}, {1, 2, 3, 4}).transposed()) ==
        "tensor<double> shape (2, 2) on host\n[[1, 3],\n [2, 4]]");
  dc::tape tp;
  std::ostringstream sv;
  auto v = tp.variable(T32::from({2}, {0.5f, 1.25f}));
  sv << v << "|" << tp.constant(T32::scalar(1.0f));
  CHECK(sv.str() == "var<float> requires_grad shape (2,) on host\n[ 0.5, 1.25]|var<float> constant "
                    "shape () on host\n1");
}

// ---- .npy -------------------------------------------------------------------------------------
TEST_CASE("npy: round trips of every rank, strided tensors, float and double -- the exact header") {
  temp_file f(".npy");
  for (auto const &s : {shape{}, shape{5}, shape{2, 3}, shape{2, 0, 3}, shape{2, 3, 4}}) {
    INFO(dc::to_string(s));
    auto t = random_tensor(s, 14);
    dc::save_npy(f.path, t);
    auto r = dc::load_npy<double>(f.path);
    CHECK(r.dims() == s);
    CHECK(r.to_vector() == t.to_vector());
    auto tf = dc::cast<float>(t);
    dc::save_npy(f.path, tf);
    CHECK(dc::load_npy<float>(f.path).to_vector() == tf.to_vector());
    CHECK(dc::load_npy<double>(f.path).to_vector() == to_double(tf.to_vector())); // f4 -> f8
  }
  auto base = random_tensor({4, 6}, 15);
  for (auto const &view : {base.transposed(), base.slice(1, 1, 6, 2), base.select(1, 3)}) {
    dc::save_npy(f.path, view);
    auto r = dc::load_npy<double>(f.path);
    CHECK(r.dims() == view.dims());
    CHECK(r.to_vector() == view.to_vector());
  }
  std::string const b = dc::npy_bytes(T32::from({2, 3}, {1, 2, 3, 4, 5, 6}));
  CHECK(b.size() == 128 + 24); // the header padded to 128 bytes, as NumPy pads it
  CHECK(b.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  CHECK(b.substr(10, 59) == "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
  CHECK(b[127] == '\n');
  CHECK(dc::npy_bytes(T64::scalar(1.0)).find("'shape': (), }") != std::string::npos);
  CHECK(dc::npy_bytes(T64::zeros({7})).find("'<f8'") != std::string::npos);
  CHECK(dc::npy_bytes(T64::zeros({7})).find("'shape': (7,), }") != std::string::npos);
  CHECK(dc::from_npy_bytes<double>(dc::npy_bytes(T64::zeros({7}))).dims() == shape{7});
  CHECK_THROWS_AS(dc::load_npy<float>(f.path.string() + ".missing"), dc::io_error);
  CHECK_THROWS_AS(dc::save_npy(f.path / "no" / "dir.npy", base), dc::io_error);
}

TEST_CASE("npy: Fortran order, version 2.0, big-endian, other spellings NumPy writes") {
  // np.asfortranarray([[1, 2, 3], [4, 5, 6]]) saved: the data in column-major order.
  auto fort = dc::from_npy_bytes<double>(
      npy_file("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }",
               raw<double>({1, 4, 2, 5, 3, 6})));
  CHECK(fort.dims() == shape{2, 3});
  CHECK(fort.to_vector() == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(fort(0, 2) == 3.0);
  CHECK(fort(1, 0) == 4.0);
  // rank 3, Fortran order: element (i, j, k) at i + 2 j + 6 k.
  std::vector<float> f3(24);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        f3[std::size_t(i + 2 * j + 6 * k)] = float(100 * i + 10 * j + k);
  auto t3 = dc::from_npy_bytes<float>(
      npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3, 4), }", raw(f3)));
  CHECK(t3.dims() == shape{2, 3, 4});
  CHECK(t3(1, 2, 3) == 123.0f);
  CHECK(t3(0, 1, 2) == 12.0f);
  CHECK(t3.contiguous().to_vector()[5] == 11.0f); // row-major (0, 1, 1)
  // version 2.0 (4-byte header length), double quotes, no trailing comma, Python 2 longs
  auto v2 = dc::from_npy_bytes<float>(
      npy_file("{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (3L,)}",
               raw<float>({1.5f, 2.5f, 3.5f}), 2));
  CHECK(v2.to_vector() == std::vector<float>{1.5f, 2.5f, 3.5f});
  auto v3 = dc::from_npy_bytes<float>(
      npy_file("{'shape':(1,1),'fortran_order':False,'descr':'<f4'}", raw<float>({7.0f}), 3));
  CHECK(v3.dims() == shape{1, 1});
  // big-endian data
  auto be = dc::from_npy_bytes<double>(npy_file(
      "{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }", raw<double>({0.1, -3.0}, true)));
  CHECK(be.to_vector() == std::vector<double>{0.1, -3.0});
  auto bef = dc::from_npy_bytes<float>(npy_file(
      "{'descr': '>f4', 'fortran_order': False, 'shape': (), }", raw<float>({0.25f}, true)));
  CHECK(bef.item() == 0.25f);
  // f8 -> f4 rounds
  auto narrowed = dc::from_npy_bytes<float>(
      npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", raw<double>({0.1})));
  CHECK(narrowed.item() == 0.1f);
}

// Every proper prefix of a valid file is an io_error; every file with one byte replaced by a
// random one loads or throws a dualcast::error (never anything else, never a crash), and the
// corruptions are noticed at least once.
template <class Load>
void prefixes_fail_corruptions_survive(std::string const &good, Load const &load, unsigned seed) {
  for (std::size_t n = 0; n < good.size(); ++n)
    CHECK_THROWS_AS(load(good.substr(0, n)), dc::io_error);
  std::mt19937 rng(seed);
  std::size_t errors = 0;
  for (std::size_t i = 0; i < good.size(); ++i) {
    std::string b = good;
    b[i] = char(rng());
    try {
      (void)load(b);
    } catch (dc::error const &) {
      ++errors;
    }
  }
  CHECK(errors > 0);
}

TEST_CASE("npy: malformed files are io_errors (dtype_error for other dtypes), never a crash") {
  std::string const data = raw<float>({1, 2, 3, 4, 5, 6});
  auto load = [](std::string const &b) { return dc::from_npy_bytes<float>(b); };
  auto hdr = [&](std::string const &h) { return npy_file(h, data); };
  std::string const huge = "{'descr': '<f4', 'fortran_order': False, 'shape': "
                           "(4611686018427387904, 4611686018427387904, 4)}"; // overflows
  CHECK_THROWS_AS(load(""), dc::io_error);
  CHECK_THROWS_AS(load("PK\x03\x04 not npy at all"), dc::io_error);
  std::string bad_version = hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }");
  bad_version[6] = 4;
  CHECK_THROWS_AS(load(bad_version), dc::io_error);
  for (char const *h :
       {"{'descr': '<f4', 'fortran_order': False}", // no shape
        "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}",
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}",
        "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (6,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (6, -1)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (6 6)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': [6]}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (6,)} trailing",
        "{'descr: '<f4', 'fortran_order': False, 'shape': (6,)}",
        "{'descr': '<f4' 'fortran_order': False, 'shape': (6,)}", "('descr', '<f4')",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (7,)}", // short data
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,6)}", huge.c_str(),
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
        "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,)}"}) {
    INFO(h);
    CHECK_THROWS_AS(load(hdr(h)), dc::io_error);
  }
  for (char const *d : {"<i4", "<f2", "<c8", "|u1", "f4", "<f16"}) {
    INFO(d);
    CHECK_THROWS_AS(
        load(hdr(std::string("{'descr': '") + d + "', 'fortran_order': False, 'shape': (6,)}")),
        dc::dtype_error);
  }
  // Every prefix of a valid file, and every single corrupted byte, gives a value or an error.
  std::string const good = hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
  CHECK(load(good).to_vector() == std::vector<float>{1, 2, 3, 4, 5, 6});
  prefixes_fail_corruptions_survive(good, load, 3);
  // The header length pointing past the end.
  std::string long_len = good;
  long_len[8] = char(0xff);
  long_len[9] = char(0x7f);
  CHECK_THROWS_AS(load(long_len), dc::io_error);
  // An empty array whose other extents multiply past 2^63: no element to read, but its strides
  // would overflow (UBSan's report in the tensor's strides, on an input of
  // tests/fuzz/fuzz_npy.cpp).
  for (bool fortran : {false, true}) {
    INFO(fortran);
    std::string const empty_huge = std::string("{'descr': '<f4', 'fortran_order': ") +
                                   (fortran ? "True" : "False") +
                                   ", 'shape': (0, 4611686018427387904, 4611686018427387904)}";
    try {
      load(hdr(empty_huge));
      FAIL("no error");
    } catch (dc::io_error const &e) {
      CHECK(std::string(e.what()).find("too large") != std::string::npos);
    }
  }
  CHECK(load(hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4611686018427387904)}"))
            .dims() == shape{0, 4611686018427387904});
}

// ---- .npz -------------------------------------------------------------------------------------
TEST_CASE("npz: CRC-32, round trips, parameters by name, conversions") {
  CHECK(dc::detail::npz::crc32("123456789") == 0xCBF43926u);
  CHECK(dc::detail::npz::crc32("") == 0u);
  temp_file f(".npz");
  std::map<std::string, T32> arrays{
      {"w", dc::uniform<float>({3, 4}, -1.0f, 1.0f, 1)},
      {"b", T32::from({4}, {1, 2, 3, 4})},
      {"s", T32::scalar(3.5f)},
      {"empty", T32::zeros({0, 2})},
      {"layer.1/weight", dc::cast<float>(random_tensor({2, 2}, 2)).transposed()}};
  dc::save_npz(f.path, arrays);
  std::string const bytes = read_bytes(f.path);
  CHECK(bytes.substr(0, 4) == std::string("PK\x03\x04", 4));
  CHECK(bytes.find("w.npy") != std::string::npos);
  auto back = dc::load_npz<float>(f.path);
  REQUIRE(back.size() == arrays.size());
  for (auto const &kv : arrays) {
    std::string const &name = kv.first;
    T32 const &t = kv.second;
    INFO(name);
    REQUIRE(back.count(name) == 1);
    CHECK(back.at(name).dims() == t.dims());
    CHECK(back.at(name).to_vector() == t.to_vector());
  }
  auto asd = dc::load_npz<double>(f.path);
  CHECK(asd.at("b").to_vector() == std::vector<double>{1, 2, 3, 4});
  // The same tensors give the same bytes.
  temp_file g(".npz");
  dc::save_npz(g.path, arrays);
  CHECK(read_bytes(g.path) == bytes);
  dc::save_npz(g.path, std::map<std::string, T32>{});
  CHECK(dc::load_npz<float>(g.path).empty());

  // Parameters: saved by name, loaded in place.
  dc::tape tp;
  dc::parameters<double> ps;
  auto w = ps.add("w", tp.variable(random_tensor({2, 3}, 3)));
  auto b = ps.add("b", tp.variable(random_tensor({3}, 4)));
  auto W0 = w.value().to_vector(), B0 = b.value().to_vector();
  dc::save_npz(f.path, ps);
  w.value().fill_(0.0);
  b.value().fill_(0.0);
  auto const v0 = w.value().version();
  dc::load_npz(f.path, ps);
  CHECK(w.value().to_vector() == W0);
  CHECK(b.value().to_vector() == B0);
  CHECK(w.value().version() > v0);
  dc::parameters<double> more{{"w", w}, {"b", b}, {"c", tp.variable(T64::zeros({1}))}};
  CHECK_THROWS_AS(dc::load_npz(f.path, more), dc::io_error); // c missing
  dc::parameters<double> fewer{{"w", w}};
  CHECK_THROWS_AS(dc::load_npz(f.path, fewer), dc::io_error); // b unexpected
  w.value().fill_(0.0);
  dc::load_npz(f.path, fewer, false);
  CHECK(w.value().to_vector() == W0);
  dc::parameters<double> wrong{{"w", tp.variable(T64::zeros({3, 2}))}, {"b", b}};
  CHECK_THROWS_AS(dc::load_npz(f.path, wrong), dc::shape_error);
  CHECK_THROWS_AS(dc::load_npz<float>(f.path.string() + ".missing"), dc::io_error);
}

TEST_CASE("npz: compressed, corrupt and truncated archives are io_errors, never a crash") {
  temp_file f(".npz");
  dc::save_npz(f.path, std::map<std::string, T64>{{"a", T64::from({2}, {1, 2})},
                                                  {"b", T64::from({1}, {3})}});
  std::string const good = read_bytes(f.path);
  auto load = [&](std::string const &b) {
    write_bytes(f.path, b);
    return dc::load_npz<double>(f.path);
  };
  CHECK(load(good).at("a").to_vector() == std::vector<double>{1, 2});
  // A deflate entry (np.savez_compressed): method 8 in the central directory.
  std::size_t const cd = good.find(std::string("PK\x01\x02", 4));
  REQUIRE(cd != std::string::npos);
  std::string deflated = good;
  deflated[cd + 10] = 8;
  try {
    load(deflated);
    FAIL("no error");
  } catch (dc::io_error const &e) {
    CHECK(std::string(e.what()).find("np.savez") != std::string::npos);
  }
  std::string bad_crc = good;
  bad_crc[good.find("\x93NUMPY") + 70] ^= 1; // a data byte of the first entry
  CHECK_THROWS_AS(load(bad_crc), dc::io_error);
  CHECK_THROWS_AS(load("not a zip file at all, but long enough to look for one"), dc::io_error);
  prefixes_fail_corruptions_survive(good, load, 4);
}

// Central directory records that point at bytes another entry already uses: 200 floats of data
// read once per record (a zip bomb: here 6 x 800 bytes of arrays from a 1.3 KB file; the
// records could be 46 bytes each), and a CRC pass over the shared bytes per record.
TEST_CASE("npz: overlapping entries and repeated names are io_errors before any array is read") {
  std::string const one =
      dc::detail::npz::zip({{"a.npy", dc::npy_bytes(T32::full({200}, 1.0f))}}, "test");
  REQUIRE(dc::from_npz_bytes<float>(one).at("a").size() == 200);
  std::size_t const cd = one.find(std::string("PK\x01\x02", 4)),
                    eocd = one.find(std::string("PK\x05\x06", 4));
  REQUIRE(cd != std::string::npos);
  REQUIRE(eocd != std::string::npos);
  std::string const record = one.substr(cd, eocd - cd);
  // The archive with `names` as central directory records, each pointing at a.npy's bytes.
  auto with_records = [&](std::string const &names) {
    std::string central;
    for (char c : names) {
      std::string r = record;
      r[r.find("a.npy")] = c;
      central += r;
    }
    std::string out = one.substr(0, cd) + central;
    auto put = [&](std::uint32_t v, int bytes) {
      for (int i = 0; i < bytes; ++i)
        out += char((v >> (8 * i)) & 0xff);
    };
    put(0x06054b50, 4);
    put(0, 4);
    put(std::uint32_t(names.size()), 2);
    put(std::uint32_t(names.size()), 2);
    put(std::uint32_t(central.size()), 4);
    put(std::uint32_t(cd), 4);
    put(0, 2);
    return out;
  };
  CHECK(dc::from_npz_bytes<float>(with_records("a")).at("a").size() == 200);
  auto message = [](std::string const &archive) {
    try {
      dc::from_npz_bytes<float>(archive, "'bomb.npz'");
    } catch (dc::io_error const &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message(with_records("abcdef")) ==
        "dualcast::load_npz: 'bomb.npz': entries 'a.npy' and 'b.npy' overlap (a corrupt archive, "
        "or a zip bomb)");
  CHECK(message(with_records("aa")).find("overlap") != std::string::npos);
  // Two entries of the same array name, at different bytes.
  std::string const twice = dc::detail::npz::zip(
      {{"a.npy", dc::npy_bytes(T32::full({2}, 1.0f))}, {"a", dc::npy_bytes(T32::full({3}, 2.0f))}},
      "test");
  CHECK(message(twice) == "dualcast::load_npz: 'bomb.npz': the array 'a' appears twice");
  // In memory and from a file: the same arrays.
  temp_file f(".npz");
  write_bytes(f.path, one);
  CHECK(dc::load_npz<float>(f.path).at("a").to_vector() ==
        dc::from_npz_bytes<float>(one).at("a").to_vector());
}

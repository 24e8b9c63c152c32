// Data-parallel training over MPI (dualcast/distributed.hpp). Run by ctest under mpirun on 2 and 3
// ranks (label mpi); every rank runs every case, and every case's collectives in the same order.
//
//   test_distributed                         the doctest cases
//   test_distributed --fail-in-backward=R    rank R throws during backward (others must not hang)
//   test_distributed --die-in-backward=R     rank R aborts during backward
#define DOCTEST_CONFIG_IMPLEMENT
#include <dualcast/autodiff.hpp>
#include <dualcast/distributed.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace dc = dualcast;
namespace dd = dualcast::distributed;

namespace {

dd::communicator *world = nullptr;

std::vector<double> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(n);
  for (auto &x : v)
    x = u(rng);
  return v;
}

// A small model: tanh(x w1 + b1) w2 against targets, plus a parameter only rank 0's shard uses
// (a data-dependent graph: the others contribute zeros to its gradient).
struct model {
  dc::parameters<double> ps;
  dc::var<double> w1, b1, w2, extra;
  model(dc::tape &tp, std::uint64_t seed) {
    w1 = ps.add("w1", tp.variable(dc::tensor<double>::from({4, 6}, random_values(24, seed))));
    b1 = ps.add("b1", tp.variable(dc::tensor<double>::from({6}, random_values(6, seed + 1))));
    w2 = ps.add("w2", tp.variable(dc::tensor<double>::from({6, 2}, random_values(12, seed + 2))));
    extra = ps.add("extra", tp.variable(dc::tensor<double>::from({3}, random_values(3, seed + 3))));
  }
};

constexpr dc::index_t global_rows = 12;
std::vector<double> const &inputs() {
  static std::vector<double> x = random_values(std::size_t(global_rows) * 4, 100);
  return x;
}
std::vector<double> const &targets() {
  static std::vector<double> y = random_values(std::size_t(global_rows) * 2, 200);
  return y;
}

// The mean loss of shard r of `size` (rows of the global batch), recorded on tp.
dc::var<double> shard_loss(dc::tape &tp, model const &m, int r, int size) {
  dd::item_range const rows = dd::shard_of(global_rows, r, size);
  dc::index_t const n = rows.end - rows.begin;
  std::vector<double> x(inputs().begin() + rows.begin * 4, inputs().begin() + rows.end * 4);
  std::vector<double> y(targets().begin() + rows.begin * 2, targets().begin() + rows.end * 2);
  auto h = dc::tanh(dc::matmul(tp.constant(dc::tensor<double>::from({n, 4}, x)), m.w1) + m.b1);
  auto d = dc::matmul(h, m.w2) - tp.constant(dc::tensor<double>::from({n, 2}, y));
  dc::var<double> loss = dc::mean(d * d);
  if (r == 0)
    loss = loss + dc::sum(m.extra * m.extra);
  return loss;
}

std::vector<std::vector<double>> gradients(model const &m) {
  std::vector<std::vector<double>> g;
  for (auto const &p : m.ps)
    g.push_back(p.v.grad().to_vector());
  return g;
}

// One process's gradient of the same global batch: the shards' gradients accumulated in rank
// order on one tape, divided by the number of ranks.
std::vector<std::vector<double>> single_process_gradient(model const &from, int size,
                                                         bool fused = true) {
  dc::tape tp;
  tp.fused = fused;
  model m(tp, 1);
  for (std::size_t i = 0; i < m.ps.size(); ++i)
    m.ps.at(i).v.value().copy_(from.ps.at(i).v.value());
  for (int r = 0; r < size; ++r)
    tp.backward(shard_loss(tp, m, r, size));
  auto g = gradients(m);
  for (auto &v : g)
    for (auto &x : v)
      x /= double(size);
  return g;
}

} // namespace

TEST_CASE("all_reduce and broadcast against sequential sums") {
  dd::communicator &c = *world;
  auto mine = [&](int r) { return random_values(10, 7 + std::uint64_t(r)); };
  auto x = dc::tensor<double>::from({2, 5}, mine(c.rank()));
  c.all_reduce(x, dd::reduce_op::sum);
  std::vector<double> expected(10, 0.0);
  for (int r = 0; r < c.size(); ++r)
    for (std::size_t i = 0; i < 10; ++i)
      expected[i] += mine(r)[i];
  auto got = x.to_vector();
  for (std::size_t i = 0; i < 10; ++i)
    CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-14));

  auto m = dc::tensor<float>::full({3}, float(c.rank() + 1));
  c.all_reduce(m, dd::reduce_op::mean);
  CHECK(m.to_vector()[2] == doctest::Approx(double(c.size() + 1) / 2.0));

  // A non-contiguous tensor (a transposed view) is reduced in place through a contiguous copy.
  auto t = dc::tensor<double>::from({2, 3}, random_values(6, 50 + std::uint64_t(c.rank())));
  auto tt = t.transposed(0, 1);
  c.broadcast(tt, c.size() - 1);
  CHECK(t.to_vector() == random_values(6, 50 + std::uint64_t(c.size() - 1)));
}

TEST_CASE("mismatched shapes and bad roots are errors on every rank") {
  dd::communicator &c = *world;
  auto x = dc::tensor<double>::zeros({c.rank() == 1 ? 3 : 2});
  CHECK_THROWS_WITH_AS(c.all_reduce(x, dd::reduce_op::sum), doctest::Contains("on rank 1"),
                       dc::distributed_error);
  auto y = dc::tensor<double>::zeros({2});
  CHECK_THROWS_AS(c.broadcast(y, c.size()), dc::distributed_error);
  c.barrier(); // (still in step)
}

TEST_CASE("data-parallel gradients equal one process's gradient of the global batch") {
  dd::communicator &c = *world;
  // (fused nodes and the unfused tape: the hooks must see each leaf's final gradient in both)
  for (auto [fixed, fused] : {std::pair{true, true}, {false, true}, {true, false}}) {
    CAPTURE(fixed);
    CAPTURE(fused);
    dc::tape tp;
    tp.fused = fused;
    // Different initial values on each rank: the broadcast makes them rank 0's.
    model m(tp, 1 + std::uint64_t(c.rank()));
    dd::data_parallel_options o;
    o.fixed_order = fixed;
    o.bucket_bytes = 100; // several buckets
    dd::data_parallel<double> dp(c, tp, m.ps, o);
    CHECK(dp.bucket_count() >= 3);
    model ref0(tp, 1);
    CHECK(m.w1.value().to_vector() == ref0.w1.value().to_vector());

    for (int step = 0; step < 2; ++step) { // twice: the second starts from cleared state
      tp.zero_grad();
      tp.backward(shard_loss(tp, m, c.rank(), c.size()));
      auto got = gradients(m);
      auto want = single_process_gradient(m, c.size(), fused);
      for (std::size_t k = 0; k < got.size(); ++k) {
        CAPTURE(m.ps.at(k).name);
        REQUIRE(got[k].size() == want[k].size());
        if (fixed) { // bit-identical
          CHECK(std::memcmp(got[k].data(), want[k].data(), got[k].size() * sizeof(double)) == 0);
        } else {
          for (std::size_t i = 0; i < got[k].size(); ++i)
            CHECK(got[k][i] == doctest::Approx(want[k][i]).epsilon(1e-13));
        }
      }
      tp.clear();
    }
  }
}

TEST_CASE("no_sync: micro-batches accumulate on each rank, then one all-reduce of the whole") {
  dd::communicator &c = *world;
  int const shards = 2 * c.size(); // rank r: micro-batches r and r + size
  for (bool fixed : {true, false}) {
    CAPTURE(fixed);
    dc::tape tp;
    model m(tp, 3);
    dd::data_parallel_options o;
    o.fixed_order = fixed;
    o.bucket_bytes = 100;
    dd::data_parallel<double> dp(c, tp, m.ps, o);
    {
      auto local = dp.no_sync();
      tp.backward(shard_loss(tp, m, c.rank(), shards));
      tp.clear();
    }
    tp.backward(shard_loss(tp, m, c.rank() + c.size(), shards));
    tp.clear();
    auto got = gradients(m);
    // One process: every micro-batch's gradient accumulated, divided by the number of ranks.
    dc::tape ref_tp;
    model ref(ref_tp, 3);
    for (int r = 0; r < shards; ++r)
      ref_tp.backward(shard_loss(ref_tp, ref, r, shards));
    auto want = gradients(ref);
    for (std::size_t k = 0; k < got.size(); ++k)
      for (std::size_t i = 0; i < got[k].size(); ++i) {
        CAPTURE(m.ps.at(k).name);
        CHECK(got[k][i] == doctest::Approx(want[k][i] / double(c.size())).epsilon(1e-12));
      }
    // A synced backward without zero_grad adds its mean to what is there, as on one process.
    tp.backward(shard_loss(tp, m, c.rank(), c.size()));
    auto more = single_process_gradient(m, c.size());
    auto after = gradients(m);
    for (std::size_t k = 0; k < after.size(); ++k)
      for (std::size_t i = 0; i < after[k].size(); ++i)
        CHECK(after[k][i] ==
              doctest::Approx(want[k][i] / double(c.size()) + more[k][i]).epsilon(1e-12));
    tp.clear();
  }
}

TEST_CASE("data-parallel gradients against central differences of the global loss") {
  dd::communicator &c = *world;
  dc::tape tp;
  model m(tp, 5);
  dd::data_parallel<double> dp(c, tp, m.ps);
  tp.backward(shard_loss(tp, m, c.rank(), c.size()));
  tp.clear();
  // The global loss: the mean of the ranks' mean losses (equal shards), on every rank.
  auto global_loss = [&] {
    dc::no_grad off(tp);
    auto l = dc::tensor<double>::scalar(shard_loss(tp, m, c.rank(), c.size()).item());
    c.all_reduce(l, dd::reduce_op::mean);
    return l.item();
  };
  for (auto const &p : m.ps) {
    auto g = p.v.grad().to_vector();
    for (dc::index_t i = 0; i < p.v.size(); i += 2) {
      double *w = p.v.value().mutable_data() + i;
      double const w0 = *w, h = 1e-6;
      *w = w0 + h;
      double const up = global_loss();
      *w = w0 - h;
      double const down = global_loss();
      *w = w0;
      CAPTURE(p.name);
      CAPTURE(i);
      CHECK(g[std::size_t(i)] == doctest::Approx((up - down) / (2 * h)).epsilon(1e-6));
    }
  }
}

TEST_CASE("different parameter lists across ranks are an error on every rank") {
  dd::communicator &c = *world;
  dc::tape tp;
  dc::parameters<double> ps;
  ps.add("w", tp.variable(dc::tensor<double>::zeros({c.rank() == c.size() - 1 ? 5 : 4})));
  CHECK_THROWS_WITH_AS(dd::data_parallel<double>(c, tp, ps),
                       doctest::Contains("differ across ranks"), dc::distributed_error);
}

TEST_CASE("the sampler splits each global batch among the ranks like one process would") {
  dd::communicator &c = *world;
  dd::sampler one(30, 6, 0, 1, 9);
  dd::sampler mine(30, 6, c.rank(), c.size(), 9);
  for (int b = 0; b < 8; ++b) { // (crosses an epoch)
    auto all = one.next();
    auto part = mine.next();
    dd::item_range r = dd::shard_of(6, c.rank(), c.size());
    CHECK(part == std::vector<dc::index_t>(all.begin() + r.begin, all.begin() + r.end));
  }
  CHECK_THROWS_AS(dd::sampler(30, 7, 0, 2, 1), dc::shape_error);
}

namespace {
// A training step in which rank `bad` throws (or aborts) in the middle of backward, while the
// others wait for its gradients.
void failing_step(dd::communicator &c, int bad, bool die) {
  c.timeout = std::chrono::seconds(60);
  dc::tape tp;
  model m(tp, 1);
  dd::data_parallel_options o;
  o.bucket_bytes = 100;
  dd::data_parallel<double> dp(c, tp, m.ps, o);
  tp.on_gradient_ready(m.b1, [&] {
    if (c.rank() != bad)
      return;
    if (die)
      std::abort();
    throw dc::tape_error("injected failure in backward");
  });
  tp.backward(shard_loss(tp, m, c.rank(), c.size()));
}
} // namespace

int main(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    for (std::string flag : {"--fail-in-backward=", "--die-in-backward="})
      if (a.rfind(flag, 0) == 0) {
        int const bad = std::atoi(a.c_str() + flag.size());
        return dd::run(argc, argv, [&](dd::communicator &c) {
          failing_step(c, bad, flag == "--die-in-backward=");
        });
      }
  }
  dd::session mpi(&argc, &argv);
  dd::communicator c;
  c.timeout = std::chrono::seconds(60); // a case that went out of step fails instead of hanging
  world = &c;
  doctest::Context ctx(argc, argv);
  int const rc = ctx.run();
  world = nullptr;
  return rc;
}

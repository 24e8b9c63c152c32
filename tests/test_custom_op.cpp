// Tests of dualcast::custom_op (tape/custom_op.hpp), the public way to add a tape operation, with
// operations defined outside the library's namespace as a user would: gradients against central
// differences in double precision, several outputs (one of them unreached), a run-time number of
// inputs, state handed from forward to backward, constants and lazy expressions as inputs,
// gradients of broadcast shapes, version checks of saved tensors, and nothing recorded when no
// input requires a gradient.
#include <dualcast/autodiff.hpp>

#include <doctest/doctest.h>

#include "tape_support.hpp"

#include <cmath>
#include <memory>
#include <thread>
#include <vector>

using namespace tape_support;

namespace user_ops {

// y = x^3 (elementwise, through a fused kernel inside the forward), saving x.
struct cube_fn {
  template <class X> DUALCAST_HD auto operator()(X const &x) const { return x * x * x; }
};
struct cube_grad_fn { // 3 x^2 gy
  template <class X, class G> DUALCAST_HD auto operator()(X const &x, G const &g) const {
    return 3.0 * x * x * g;
  }
};
inline V64 cube(V64 const &x) {
  return dc::custom_op(
      "cube",
      [](auto const &ex, auto &ctx, T64 const &xv) {
        ctx.save(xv, "input");
        auto y = T64::empty(xv.dims(), xv.dev());
        dc::apply(ex, dc::kernel<cube_fn>{{}}, dc::out(y.raw_view()), xv.cview());
        return y;
      },
      [](auto const &ex, auto const &ctx, auto &g) {
        if (!g.needs(0))
          return;
        auto [t, acc] = g.target(0); // writes every element: add where acc, else overwrite
        auto o = dc::out(t.raw_view());
        o.add[0] = acc;
        dc::apply(ex, dc::kernel<cube_grad_fn>{{}}, o, ctx.saved(0).cview(), g.out(0).cview());
      },
      x);
}

// Two outputs: the elementwise minimum and maximum of a and b (ties: a is the minimum).
inline std::array<V64, 2> min_max(V64 const &a, V64 const &b) {
  return dc::custom_op(
      "min_max",
      [](auto const &, auto &ctx, T64 const &av, T64 const &bv) {
        auto lo = T64::empty(av.dims()), hi = T64::empty(av.dims());
        auto ac = av.contiguous(), bc = bv.contiguous();
        for (dc::index_t i = 0; i < av.size(); ++i) {
          bool a_low = ac.data()[i] <= bc.data()[i];
          lo.mutable_data()[i] = a_low ? ac.data()[i] : bc.data()[i];
          hi.mutable_data()[i] = a_low ? bc.data()[i] : ac.data()[i];
        }
        ctx.save(ac, "a");
        ctx.save(bc, "b");
        return std::array<T64, 2>{lo, hi};
      },
      [](auto const &, auto const &ctx, auto &g) {
        CHECK(g.outputs() == 2);
        T64 glo = g.out(0).contiguous(), ghi = g.out(1).contiguous();
        auto ga = T64::empty(glo.dims()), gb = T64::empty(glo.dims());
        for (dc::index_t i = 0; i < glo.size(); ++i) {
          bool a_low = ctx.saved(0).data()[i] <= ctx.saved(1).data()[i];
          ga.mutable_data()[i] = a_low ? glo.data()[i] : ghi.data()[i];
          gb.mutable_data()[i] = a_low ? ghi.data()[i] : glo.data()[i];
        }
        g.add(0, ga);
        g.add(1, gb);
      },
      a, b);
}

// A run-time number of inputs: sum_i w_i x_i (every x_i of one shape).
inline V64 weighted_sum(std::vector<V64> const &xs, std::vector<double> w) {
  return dc::custom_op(
      "weighted_sum",
      [w](auto const &, auto &, std::vector<T64> const &values) {
        auto y = T64::zeros(values[0].dims());
        for (std::size_t i = 0; i < values.size(); ++i) {
          auto c = values[i].contiguous();
          for (dc::index_t j = 0; j < y.size(); ++j)
            y.mutable_data()[j] += w[i] * c.data()[j];
        }
        return y;
      },
      [w](auto const &, auto const &, auto &g) {
        for (std::size_t i = 0; i < g.inputs(); ++i)
          if (g.needs(i)) {
            auto gi = g.out(0).clone();
            gi.scale_(w[i]);
            g.add(i, gi);
          }
      },
      xs);
}

// State from forward to backward (ctx.data): the position of the largest element of each row.
struct argmax_state {
  std::vector<dc::index_t> pos;
};
inline V64 row_max(V64 const &x) {
  dc::index_t const rows = x.dims()[0], n = x.dims()[1];
  return dc::custom_op<argmax_state>(
      "row_max",
      [rows, n](auto const &, auto &ctx, T64 const &xv) {
        auto xc = xv.contiguous();
        auto y = T64::empty({rows});
        for (dc::index_t r = 0; r < rows; ++r) {
          dc::index_t best = 0;
          for (dc::index_t j = 1; j < n; ++j)
            if (xc.data()[r * n + j] > xc.data()[r * n + best])
              best = j;
          ctx.data.pos.push_back(best);
          y.mutable_data()[r] = xc.data()[r * n + best];
        }
        return y;
      },
      [rows](auto const &, auto const &ctx, auto &g) {
        T64 gx = g.zeroed(0); // a scatter writes some elements only
        T64 gy = g.out(0).contiguous();
        for (dc::index_t r = 0; r < rows; ++r)
          gx(r, ctx.data.pos[std::size_t(r)]) += gy.data()[r];
      },
      x);
}

struct mul_fn {
  template <class X, class Y> DUALCAST_HD auto operator()(X const &x, Y const &y) const {
    return x * y;
  }
};
inline constexpr dc::kernel<mul_fn> mul{mul_fn{}};

// y = x * c with c a constant tensor (no gradient) broadcast against x; the gradient of x comes
// back in the broadcast shape and custom_op sums it.
inline V64 scale_by(V64 const &x, T64 const &c) {
  return dc::custom_op(
      "scale_by",
      [](auto const &ex, auto &ctx, T64 const &xv, T64 const &cv) {
        ctx.save(cv, "scale");
        bool ok = true;
        auto y = T64::empty(dc::broadcast_pair(xv.dims(), cv.dims(), ok));
        dc::apply(ex, mul, dc::out(y.raw_view()), xv.cview(), cv.cview());
        return y;
      },
      [](auto const &ex, auto const &ctx, auto &g) {
        CHECK(!g.needs(1)); // the constant
        auto gy = g.out(0);
        auto gx = T64::empty(gy.dims());
        dc::apply(ex, mul, dc::out(gx.raw_view()), gy.cview(), ctx.saved(0).cview());
        g.add(0, gx); // of the broadcast shape: summed to x's
      },
      x, c);
}

} // namespace user_ops

TEST_CASE("custom_op: an operation defined outside the library matches finite differences") {
  auto a = random_tensor({3, 4}, 1), b = random_tensor({4}, 2);
  check_gradients([](auto const &v) { return user_ops::cube(v[0]); }, {a});
  check_gradients([](auto const &v) { return user_ops::cube(v[0] * v[1] + 0.5); }, {a, b});
  check_gradients([](auto const &v) { return dc::sin(user_ops::cube(dc::transpose(v[0]))); },
                  {random_tensor({4, 3}, 3)});
}

TEST_CASE("custom_op: two outputs, one of them unreached by backward") {
  auto a = random_tensor({2, 5}, 4), b = random_tensor({2, 5}, 5);
  check_gradients(
      [](auto const &v) {
        auto [lo, hi] = user_ops::min_max(v[0], v[1]);
        return V64(lo * 2.0 + dc::exp(hi));
      },
      {a, b});
  dc::tape tp;
  auto va = tp.variable(a), vb = tp.variable(b);
  auto [lo, hi] = user_ops::min_max(va, vb);
  tp.backward(dc::sum(lo)); // hi has no gradient: its cotangent is zeros
  auto ga = va.grad().to_vector(), gb = vb.grad().to_vector(), av = a.to_vector(),
       bv = b.to_vector();
  for (std::size_t i = 0; i < ga.size(); ++i) {
    CHECK(ga[i] == (av[i] <= bv[i] ? 1.0 : 0.0));
    CHECK(gb[i] == (av[i] <= bv[i] ? 0.0 : 1.0));
  }
}

TEST_CASE("custom_op: a run-time number of inputs, state from forward, constants") {
  auto x0 = random_tensor({3, 2}, 6), x1 = random_tensor({3, 2}, 7), x2 = random_tensor({3, 2}, 8);
  check_gradients(
      [](auto const &v) {
        return user_ops::weighted_sum({v[0], v[1], v[2], v[0]}, {1, -2, 3, 4});
      },
      {x0, x1, x2});
  check_gradients([](auto const &v) { return user_ops::row_max(v[0] * 1.5); },
                  {random_tensor({4, 6}, 9)});
  auto c = random_tensor({3, 1}, 10); // broadcast against x: x's gradient is summed
  check_gradients([c](auto const &v) { return user_ops::scale_by(v[0], c); },
                  {random_tensor({4}, 11)});
}

TEST_CASE("custom_op: saved tensors are version-checked -- nothing is recorded without gradients") {
  auto a = random_tensor({3, 3}, 12);
  {
    dc::tape tp;
    auto x = tp.variable(a.clone());
    auto y = user_ops::cube(x);
    CHECK(tp.node_count() == 1);
    x.value().fill_(2.0); // writes the saved input in place
    CHECK_THROWS_WITH_AS(tp.backward(dc::sum(y)),
                         doctest::Contains("input saved by 'cube' was modified in place"),
                         dc::version_error);
  }
  {
    dc::tape tp;
    auto x = tp.constant(a);
    auto y = user_ops::cube(x);
    CHECK(tp.node_count() == 0);
    CHECK(!y.requires_grad());
    bool asked = true; // forward is told that backward will not run
    auto z = dc::custom_op(
        "probe",
        [&asked](auto const &, auto &ctx, T64 const &xv) {
          asked = ctx.requires_grad();
          return xv;
        },
        [](auto const &, auto const &, auto &) {}, x);
    CHECK(!asked);
    CHECK(z.value().data() == a.data());
    auto want = a.to_vector();
    auto got = y.value().to_vector();
    for (std::size_t i = 0; i < got.size(); ++i)
      CHECK(got[i] == doctest::Approx(want[i] * want[i] * want[i]));
  }
  {
    dc::tape t1, t2;
    auto x = t1.variable(a), w = t2.variable(a);
    CHECK_THROWS_AS(user_ops::min_max(x, w), dc::tape_error); // variables of two tapes
  }
}

// Tensor-level operations inside a tape operation (a contiguous copy, a zero fill, gradient
// accumulation) run with the tape's executor, not OpenMP's default: the operation's forward and
// backward see the tape's `ex` as the ambient CPU executor, and it is restored after.
TEST_CASE("custom_op: tensor operations inside it use the tape's executor") {
  namespace dc = dualcast;
  REQUIRE(dc::detail::ambient_cpu().threads == 0);
  dc::tape tp;
  tp.ex = dc::cpu{1};
  auto x = tp.variable(dc::tensor<double>::from({2, 3}, {1, 2, 3, 4, 5, 6}));
  int seen_forward = -1, seen_backward = -1;
  auto y = dc::custom_op(
      "transpose_copy",
      [&](auto const &, auto &, dc::tensor<double> const &xv) {
        seen_forward = dc::detail::ambient_cpu().threads;
        return xv.permuted({1, 0}).contiguous(); // a tensor-level copy
      },
      [&](auto const &, auto const &, auto &g) {
        seen_backward = dc::detail::ambient_cpu().threads;
        g.add(0, g.out(0).permuted({1, 0}).contiguous());
      },
      x);
  CHECK(seen_forward == 1);
  CHECK(dc::detail::ambient_cpu().threads == 0); // restored
  tp.backward(dc::sum(y * y));
  CHECK(seen_backward == 1);
  CHECK(dc::detail::ambient_cpu().threads == 0);
  CHECK(x.grad().to_vector() == std::vector<double>{2, 4, 6, 8, 10, 12});
  // The same tensor operation outside any tape: OpenMP's default.
  int seen_outside = -1;
  dc::tensor<double>::zeros({3}).on_device(
      "probe", [&](auto const &) { seen_outside = dc::detail::ambient_cpu().threads; });
  CHECK(seen_outside == 0);
}

// Streams (backend/stream.hpp): a tape with a CUDA stream and a stream_scope compile and work on
// host tensors, which ignore the stream: the same values and gradients, bit for bit, as a tape
// without one; the scope is thread-local, nests and puts back what it found.
namespace {
struct fake_stream {}; // a stand-in for CUstream_st (never dereferenced on host paths)

struct stream_run {
  std::vector<double> loss, grad_w, grad_b, w_after;
  dc::stream_handle seen_in_forward;
};

stream_run run_small_model(dc::tape &tp) {
  auto w = tp.variable(random_tensor({4, 3}, 41));
  auto b = tp.variable(random_tensor({3}, 42));
  auto x = tp.constant(random_tensor({5, 4}, 43));
  stream_run r;
  V64 const h = dc::tanh(dc::matmul(x, w) + b); // a matmul, then one fused node
  auto c = user_ops::cube(h);                   // a custom_op
  auto lp = dc::log_softmax(c, -1);
  auto picked = dc::gather(lp, 1, dc::index_array{{5, 1}, {0, 2, 1, 1, 0}});
  auto probe = dc::custom_op(
      "probe",
      [&](auto const &, auto &, T64 const &v) {
        r.seen_in_forward = dc::current_stream();
        return v.clone();
      },
      [](auto const &, auto const &, auto &g) { g.add(0, g.out(0)); }, picked);
  V64 const loss(-dc::mean(probe));
  tp.backward(loss);
  r.loss = {loss.item()};
  r.grad_w = w.grad().to_vector();
  r.grad_b = b.grad().to_vector();
  dc::sgd<double> opt(std::vector<V64>{w, b}, {.lr = 0.1, .momentum = 0.9});
  opt.step();
  opt.zero_grad();
  tp.zero_grad();
  r.w_after = w.value().to_vector();
  CHECK(w.grad().to_vector() == std::vector<double>(12, 0.0));
  return r;
}
} // namespace

TEST_CASE("streams: stream_handle, current_stream and stream_scope") {
  fake_stream s1, s2;
  dc::stream_handle const none;
  CHECK(none.is_default());
  CHECK(none.get() == nullptr);
  dc::stream_handle const h1{&s1}, h2 = &s2; // from any stream pointer, implicitly too
  CHECK(!h1.is_default());
  CHECK(h1.get() == static_cast<void *>(&s1));
  CHECK(h1 != h2);
  CHECK(h1 == dc::stream_handle{&s1});

  CHECK(dc::current_stream().is_default());
  {
    dc::stream_scope const outer(h1);
    CHECK(dc::current_stream() == h1);
    {
      dc::stream_scope const inner(h2);
      CHECK(dc::current_stream() == h2);
      dc::stream_handle other_thread{&s1};
      std::thread([&] { other_thread = dc::current_stream(); }).join();
      CHECK(other_thread.is_default()); // thread-local: another thread has the default stream
    }
    CHECK(dc::current_stream() == h1);
    // host tensors made in a scope do not take the stream
    CHECK(T64::zeros({3}).store()->stream().is_default());
  }
  CHECK(dc::current_stream().is_default());
}

TEST_CASE("streams: a tape with a stream on host tensors computes what a tape without one does") {
  fake_stream s1, s2;
  dc::tape plain;
  CHECK(plain.stream.is_default());
  stream_run const want = run_small_model(plain);
  CHECK(want.seen_in_forward.is_default());

  dc::tape with_stream{dc::stream_handle{&s1}};
  CHECK(with_stream.stream == dc::stream_handle{&s1});
  stream_run const got = run_small_model(with_stream);
  CHECK(got.loss == want.loss); // bit for bit
  CHECK(got.grad_w == want.grad_w);
  CHECK(got.grad_b == want.grad_b);
  CHECK(got.w_after == want.w_after);
  // host tensors' operations leave the thread's stream alone
  CHECK(got.seen_in_forward.is_default());
  CHECK(dc::current_stream().is_default());

  // The same inside a stream_scope, with the stream set as a member.
  dc::stream_scope const scope(&s2);
  dc::tape member;
  member.stream = &s1;
  stream_run const scoped = run_small_model(member);
  CHECK(scoped.loss == want.loss);
  CHECK(scoped.grad_w == want.grad_w);
  CHECK(scoped.grad_b == want.grad_b);
  CHECK(scoped.w_after == want.w_after);
  CHECK(scoped.seen_in_forward == dc::stream_handle{&s2});
  CHECK(dc::current_stream() == dc::stream_handle{&s2}); // backward put it back
}

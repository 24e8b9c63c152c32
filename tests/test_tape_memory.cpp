// tests/test_tape_memory.cpp: the tape's bookkeeping per node (issue 36): a tape of 10^5 small
// nodes keeps at most the stated bytes per node in its arena (tape::node_memory_bytes(), an
// instrumented counter, not a timing), as much per node at 10^5 nodes as at 10^3; and the D-LSTM
// written with plain tape operators (examples/models/dlstm.hpp, loss_operators) has the fused
// cell's gradients, both checked against central differences; the small blocks of a long tape
// (gradient slots, storage handles) are all recycled for the next tape.
#include "models/dlstm.hpp"
#include "tape_support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <memory>
#include <random>
#include <vector>

using tape_support::random_tensor;

namespace {

// Bytes per node (total, and beyond the saved tensors' 32-byte records) of the nodes that
// `record` adds to tp when called n times: in the tape's arena, and with the gradient slots of
// the node's `outputs` (outside the arena, one block each).
struct per_node {
  double total, beyond_saves, with_slots;
};
template <class F> per_node measure(dc::tape &tp, int n, int outputs, F record) {
  std::size_t const b0 = tp.node_memory_bytes(), n0 = tp.node_count(), s0 = tp.saved_count();
  for (int i = 0; i < n; ++i)
    record();
  double const nodes = double(tp.node_count() - n0);
  REQUIRE(nodes >= n);
  double const bytes = double(tp.node_memory_bytes() - b0);
  double const saves = double(tp.saved_count() - s0);
  double const beyond = (bytes - saves * double(sizeof(dc::detail::saved_tensor))) / nodes;
  return {bytes / nodes, beyond, beyond + outputs * double(dc::detail::slot_block_bytes<double>())};
}

// A chain of fused D-LSTM cells on 14 elements (the GradBench size), n nodes, under policy pol.
template <class P> per_node cell_chain(P pol, int n) {
  dc::tape tp;
  auto m = tp.variable(random_tensor({4, 56}, 1, -0.5, 0.5));
  auto prm = dlstm::make_params(m, tp.variable(random_tensor({3, 14}, 2)), 2, 14);
  auto const &w = prm.layer[0];
  // (x, h and s on storages of their own, as later nodes have them: a node saves each storage
  // once, so a first node on one variable thrice would save less than the rest)
  V64 x = tp.variable(random_tensor({14}, 3)), h = tp.variable(random_tensor({14}, 4)),
      s = tp.variable(random_tensor({14}, 5));
  per_node r = measure(tp, n, 2, [&] {
    auto hs = dc::fused(pol, dlstm::layer, x, h, s, w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]);
    h = hs[0], s = hs[1];
  });
  // The gradient still flows through the whole chain.
  tp.backward(dc::sum(h));
  auto g = m.grad().to_vector();
  bool finite = true, nonzero = false;
  for (double v : g)
    finite = finite && std::isfinite(v), nonzero = nonzero || v != 0;
  CHECK(finite);
  CHECK(nonzero);
  return r;
}

// A random D-LSTM problem: l layers, c characters of b bits.
dlstm::problem random_problem(int l, int c, int b, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(-0.5, 0.5);
  std::bernoulli_distribution bit(0.5);
  dlstm::problem p;
  p.l = l, p.c = c, p.b = b;
  auto fill = [&](std::vector<double> &v, std::size_t n) {
    v.resize(n);
    for (auto &x : v)
      x = u(g);
  };
  fill(p.main, std::size_t(2 * l * 4 * b));
  fill(p.extra, std::size_t(3 * b));
  fill(p.state, std::size_t(2 * l * b));
  p.seq.resize(std::size_t(c * b));
  for (auto &x : p.seq)
    x = bit(g) ? 1.0 : 0.0;
  return p;
}

// The slot and the fused node's kernel-independent state, without the standard library's parts
// (the slot's control block, counted above): pointers, 16-byte shapes, a device and flags.
static_assert(sizeof(dc::detail::grad_slot<double>) <= 64,
              "a gradient slot is two per fused node: see issue 36's bound above");
static_assert(sizeof(dc::detail::fused_core<double>) <= 72,
              "a fused node's state is one per layer-step: see issue 36's bound above");

} // namespace

TEST_CASE("tape memory: 10^5 small fused nodes keep at most 512 bytes of bookkeeping per node") {
  // The stated bound (issue 36): a fused node's bookkeeping beyond the tensors it saves (each
  // saved tensor's record -- a reference to its storage and its version -- is 32 bytes).
  constexpr double bound = 512;
  per_node const recompute = cell_chain(dc::policy::recompute, 100000);
  per_node const store = cell_chain(dc::policy::store, 100000);
  INFO("recompute cell: " << recompute.total << " B/node (" << recompute.beyond_saves
                          << " beyond its saves); store cell: " << store.total << " B/node");
  CHECK(recompute.beyond_saves <= bound);
  CHECK(store.beyond_saves <= bound);
  CHECK(store.total <= bound); // (one saved block of partials)
  // The bound holds with the node's two gradient slots too (outside the arena, one block each): a
  // slot with its control block was 544 bytes, 280 once what only leaves and views use moved to a
  // side allocation, and is 72 (g++ 12) since its gradient's 160-byte tensor header is made with
  // the gradient and its shape is kept in 16 bytes (grad_slot.hpp).
  std::size_t const slot = dc::detail::slot_block_bytes<double>();
  MESSAGE("slot block " << slot << " B; recompute cell " << recompute.beyond_saves << " B/node ("
                        << recompute.with_slots << " with its slots), store cell "
                        << store.beyond_saves << " (" << store.with_slots << ")");
  CHECK(slot <= 96); // (the slot itself: the static_assert below; the rest is the control block)
  CHECK(recompute.with_slots <= bound);
  CHECK(store.with_slots <= bound);
  // Linear: as much per node on a long tape as on a short one.
  CHECK(cell_chain(dc::policy::recompute, 1000).total == doctest::Approx(recompute.total));
  CHECK(cell_chain(dc::policy::store, 1000).total == doctest::Approx(store.total));
}

TEST_CASE("tape memory: a long tape's slots and storage handles are all kept for the next tape") {
  // GradBench's lstm at l = 6, c = 8192 holds about 10^5 gradient slots (280 bytes each with
  // their control blocks, 544 before the side allocation of grad_slot.hpp) and as many storage
  // handles; each freed block must go back to the thread's list, not to malloc (the list once kept
  // 16384), so that the next tape of that length takes them all from there.
  struct block {
    alignas(16) unsigned char bytes[512];
  };
  using alloc = dc::detail::recycling_allocator<block>;
  auto &list = dc::detail::blocks<alloc::size>();
  constexpr std::size_t n = 100000;
  std::vector<block *> p(n);
  alloc a;
  for (auto &b : p)
    b = a.allocate(1);
  std::size_t const before = list.count;
  for (auto *b : p)
    a.deallocate(b, 1);
  CHECK(list.count == before + n); // all kept
  for (auto &b : p)
    b = a.allocate(1);
  CHECK(list.count == before); // all taken back from the list
  for (auto *b : p)
    a.deallocate(b, 1);
}

TEST_CASE("tape memory: a fused node's leaves outlive their variables until clear()") {
  // A fused node refers to its input slots by plain pointers (ops/fused/core.hpp): the tape holds
  // a leaf's slot from its first use until clear(), so that backward may still write the
  // gradient of a leaf whose variable is gone (under the sanitizers: no use after free).
  T64 const x0 = random_tensor({14}, 21), w0 = random_tensor({14}, 22);
  T64 const b0 = random_tensor({14}, 23);
  dc::tape tp;
  V64 x = tp.variable(x0.clone()), y;
  std::weak_ptr<dc::detail::grad_slot<double>> w_slot;
  {
    V64 w = tp.variable(w0.clone()), b = tp.variable(b0.clone());
    w_slot = w.slot();
    y = dc::tanh(x * w + b); // (materialised: one fused node each)
    y = dc::tanh(y * w + b);
  }
  CHECK_FALSE(w_slot.expired());
  tp.backward(dc::sum(y));
  // d sum(tanh(tanh(x w + b) w + b)) / dx against central differences of the same in doubles.
  auto f = [&](std::vector<double> const &xv) {
    double r = 0;
    for (std::size_t i = 0; i < xv.size(); ++i) {
      double const w = w0.to_vector()[i], b = b0.to_vector()[i];
      r += std::tanh(std::tanh(xv[i] * w + b) * w + b);
    }
    return r;
  };
  auto const g = x.grad().to_vector();
  for (std::size_t i = 0; i < g.size(); ++i) {
    auto up = x0.to_vector(), down = up;
    up[i] += 1e-6, down[i] -= 1e-6;
    INFO("element " << i);
    CHECK(g[i] == doctest::Approx((f(up) - f(down)) / 2e-6).epsilon(1e-6).scale(1.0));
  }
  tp.clear(); // (the tape lets go of the leaf)
  CHECK(w_slot.expired());
  // Under no_grad nothing is recorded, so nothing holds the leaves an inference loop makes.
  {
    dc::no_grad const off(tp);
    V64 v = tp.variable(w0.clone());
    w_slot = v.slot();
    V64 const z = dc::tanh(x * v + v);
    CHECK_FALSE(z.requires_grad());
  }
  CHECK(w_slot.expired());
}

TEST_CASE("tape memory: lazy elementwise, matmul and sum nodes on small arrays") {
  dc::tape tp;
  auto w = tp.variable(random_tensor({14}, 4)), b = tp.variable(random_tensor({14}, 5));
  auto A = tp.variable(random_tensor({14, 14}, 6));
  V64 x = tp.variable(random_tensor({14}, 7, -0.5, 0.5));
  per_node const lazy = measure(tp, 100000, 1, [&] { x = dc::tanh(x * w + b); });
  // A node that is not flat (broadcast operands) keeps its views packed.
  V64 x2 = tp.variable(random_tensor({4, 14}, 8, -0.5, 0.5));
  per_node const broadcast = measure(tp, 1000, 1, [&] { x2 = dc::tanh(x2 * w + b); });
  per_node const mm = measure(tp, 1000, 1, [&] { (void)dc::matmul(A, x); });
  per_node const sum = measure(tp, 1000, 1, [&] { (void)dc::sum(x); });
  // A custom_op node (matmul, sum) keeps its saved tensors (whole tensors, as backward reads
  // them: 160 bytes each) in the arena too, besides their records.
  double const saved_header = double(sizeof(T64) + sizeof(dc::detail::saved_tensor));
  double const mm_beyond = mm.total - 2 * saved_header; // (matmul saves both operands)
  INFO("lazy " << lazy.total << ", broadcast " << broadcast.total << ", matmul " << mm.total << " ("
               << mm_beyond << " beyond its saves), sum " << sum.total << " B/node");
  MESSAGE("with the output's slot: lazy " << lazy.with_slots << ", matmul " << mm.with_slots
                                          << ", sum " << sum.with_slots << " B/node");
  CHECK(lazy.total <= 512);
  CHECK(broadcast.total <= 640);
  CHECK(mm_beyond <= 640);
  CHECK(sum.total <= 512);
}

TEST_CASE("tape memory: the D-LSTM written with plain operators has the fused cell's gradient") {
  dlstm::problem const p = random_problem(2, 5, 3, 11);
  T64 const M = T64::from({2 * p.l, 4 * p.b}, p.main), E = T64::from({3, p.b}, p.extra);
  auto grads = [&](int variant) { // fused cell, lazy gates, every statement materialised
    dc::tape tp;
    auto m = tp.variable(M.clone()), e = tp.variable(E.clone());
    V64 loss = variant == 0 ? dlstm::loss(p, m, e) : dlstm::loss_operators(p, m, e, variant == 2);
    tp.backward(loss);
    return std::pair{m.grad().to_vector(), e.grad().to_vector()};
  };
  auto const [gm_fused, ge_fused] = grads(0);
  auto const [gm_ops, ge_ops] = grads(1);
  auto const [gm_each, ge_each] = grads(2);
  // Both against central differences of the plain double-precision objective.
  auto fd = [&](bool main_row, std::size_t i) {
    dlstm::problem q = p;
    auto &v = main_row ? q.main : q.extra;
    double const h = 1e-6, x0 = v[i];
    v[i] = x0 + h;
    double const up = dlstm::objective_plain(q);
    v[i] = x0 - h;
    double const down = dlstm::objective_plain(q);
    return (up - down) / (2 * h);
  };
  for (std::size_t i = 0; i < gm_ops.size(); ++i) {
    INFO("main parameter " << i);
    double const want = fd(true, i);
    CHECK(gm_ops[i] == doctest::Approx(want).epsilon(1e-6).scale(1.0));
    CHECK(gm_fused[i] == doctest::Approx(want).epsilon(1e-6).scale(1.0));
    CHECK(gm_ops[i] == doctest::Approx(gm_fused[i]).epsilon(1e-12).scale(1.0));
    CHECK(gm_each[i] == doctest::Approx(gm_fused[i]).epsilon(1e-12).scale(1.0));
  }
  for (std::size_t i = 0; i < ge_ops.size(); ++i) {
    INFO("extra parameter " << i);
    double const want = fd(false, i);
    CHECK(ge_ops[i] == doctest::Approx(want).epsilon(1e-6).scale(1.0));
    CHECK(ge_ops[i] == doctest::Approx(ge_fused[i]).epsilon(1e-12).scale(1.0));
    CHECK(ge_each[i] == doctest::Approx(ge_fused[i]).epsilon(1e-12).scale(1.0));
    CHECK(ge_fused[i] == doctest::Approx(want).epsilon(1e-6).scale(1.0));
  }
}

TEST_CASE("tape memory: a compact shape compares as the shape it holds") {
  // Compared in place (no shape made on the stack): inline (rank <= 3, extents < 2^32) and kept
  // whole, against shapes and against each other, equal and not, after reassignment to a smaller
  // rank (whose unused inline fields keep their old extents).
  using dc::detail::compact_shape;
  std::vector<dc::shape> const shapes = {{},
                                         {14},
                                         {0},
                                         {14, 1},
                                         {1, 14},
                                         {3, 4, 5},
                                         {3, 4, 6},
                                         {2, 3, 4, 5},
                                         {dc::index_t(1) << 33},
                                         {3, 4, dc::index_t(1) << 33}};
  for (auto const &a : shapes) {
    compact_shape const ca(a);
    CHECK(ca.get() == a);
    for (auto const &b : shapes) {
      compact_shape cb(dc::shape{7, 8, 9}); // (old extents left in the inline fields)
      cb = b;
      bool const same = a == b;
      CHECK((ca == b) == same);
      CHECK((b == ca) == same);
      CHECK((ca == cb) == same);
      CHECK((cb == ca) == same);
    }
  }
}

TEST_CASE("tape memory: a compact shape copied and moved holds the same shape") {
  // Copied and moved field by field, inline or whole (the moved-from one a valid rank-0 shape,
  // freeing nothing twice: ASan's stage runs this), over a target of each kind.
  using dc::detail::compact_shape;
  std::vector<dc::shape> const shapes = {
      {}, {14}, {3, 4, 5}, {2, 3, 4, 5}, {dc::index_t(1) << 33}, {3, 4, dc::index_t(1) << 33}};
  for (auto const &a : shapes) {
    for (auto const &b : shapes) {
      compact_shape const ca(a);
      compact_shape copied(ca);
      CHECK(copied.get() == a);
      CHECK(ca.get() == a);
      compact_shape src(a);
      compact_shape moved(std::move(src));
      CHECK(moved.get() == a);
      CHECK(src.get() == dc::shape{}); // NOLINT(bugprone-use-after-move): its stated state
      compact_shape assigned(b);
      assigned = ca;
      CHECK(assigned.get() == a);
      compact_shape move_assigned(b), src2(a);
      move_assigned = std::move(src2);
      CHECK(move_assigned.get() == a);
      CHECK(src2.get() == dc::shape{}); // NOLINT(bugprone-use-after-move)
      compact_shape const &same = assigned;
      assigned = same; // (self-assignment keeps it)
      CHECK(assigned.get() == a);
    }
  }
}

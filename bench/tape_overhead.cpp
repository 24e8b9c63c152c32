// bench/tape_overhead.cpp: what the tape costs per node on small arrays.
//
// node_chain: a chain of fused nodes h <- tanh(h * w + b) (3 inputs, 1 output, recompute policy)
//   over n elements, recorded and then run backward; per node: the time to record it (its
//   forward pass included) and the time of its backward, at n = 14, 256, 4096, 65536. Variants:
//   fused (dc::fused), lazy (the same written with operators: one fused node per step), unfused
//   (the lazy code on a tape with fused == false: one node per operation).
// dlstm: ADBench's D-LSTM (examples/models/dlstm.hpp: each layer-step one fused node) at l = 2
//   and 4, c = 1024: the objective (constants: nothing recorded), the objective and its gradient,
//   the same gradient on the unfused tape (every operation of the cell its own node), and a plain
//   double-precision C++ objective, interleaved in each repetition (but the unfused gradient,
//   timed in a loop of its own at the end: see main), each timed run right after an untimed run
//   of the same variant. (Peers: bench/peers/dlstm.py.) Beside them, interleaved, the same gradient
//   written with plain tape operators (dlstm::loss_operators: sigmoid(x * w + b) and so on, the
//   PyTorch way): operators_gradient with the gates lazy (two fused nodes per layer-step),
//   operators_each_statement_gradient with every statement materialised (six or seven), each with
//   its paired ratio to the fused-cell gradient (median and quartiles of the per-repetition
//   ratios).
// node_bytes: the tape's bookkeeping per node (tape::node_memory_bytes(): the nodes in its arena
//   with their operand references, shapes and saved-tensor records; not the tensors saved) for a
//   fused D-LSTM cell (recompute and store), a lazy elementwise tanh(x * w + b), a matmul and a
//   sum, on 14 doubles, and the same with the gradient slots of their outputs; deterministic, no
//   timing (--only node_bytes: these rows alone).
// Output: CSV rows benchmark,variant,size,threads,median_ms,us_per_node,nodes,ratio_to_plain,
//   bytes_per_node,saved_per_node,paired_ratio,paired_ratio_q1,paired_ratio_q3 (the last five
//   only where they apply).
//   tape_overhead [--reps N] [--threads N] [--quick] [--data DIR] [--only node_bytes|dlstm]
//     [--cpu-clock]
// --only dlstm: the node bytes and the D-LSTM rows alone (no node chains, no unfused gradient).
// --cpu-clock: the D-LSTM's runs timed by the process's CPU time instead of the wall clock (with
//   --threads 1: on a machine shared with other work, its time slices do not count).
#include "common.hpp"
#include "models/dlstm.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

namespace dc = dualcast;

namespace {

using clock_type = std::chrono::steady_clock;
using bench::median;
using bench::ms_since;

// The q-quantile of v (0 <= q <= 1, nearest rank).
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::size_t(q * double(v.size() - 1) + 0.5)];
}

// Bookkeeping bytes and saved-tensor records per node of the nodes `record(tp, i)` adds.
template <class F> std::pair<double, double> bytes_per_node(dc::tape &tp, int n, F record) {
  std::size_t const b0 = tp.node_memory_bytes(), n0 = tp.node_count(), s0 = tp.saved_count();
  for (int i = 0; i < n; ++i)
    record(i);
  double const nodes = double(tp.node_count() - n0);
  return {double(tp.node_memory_bytes() - b0) / nodes, double(tp.saved_count() - s0) / nodes};
}

void node_bytes() {
  constexpr int n = 1000, b = 14;
  auto full = [](dc::shape const &s, double v) { return dc::tensor<double>::full(s, v); };
  // Each row twice: the arena alone, and with the gradient slots of the node's outputs (one block
  // each outside the arena, tape/detail/grad_slot.hpp) as `KIND_with_slots`.
  double const slot = double(dc::detail::slot_block_bytes<double>());
  auto row = [slot](char const *kind, std::pair<double, double> r, int outputs = 1) {
    std::printf("node_bytes,%s,14,1,,,1000,,%.1f,%.2f,,,\n", kind, r.first, r.second);
    std::printf("node_bytes,%s_with_slots,14,1,,,1000,,%.1f,%.2f,,,\n", kind,
                r.first + outputs * slot, r.second);
  };
  auto cell = [&](auto pol, char const *kind) {
    dc::tape tp;
    auto m = tp.variable(full({4, 4 * b}, 0.1));
    auto prm = dlstm::make_params(m, tp.variable(full({3, b}, 0.2)), 2, b);
    auto const &w = prm.layer[0];
    dc::var<double> x = tp.variable(full({b}, 0.5)), h = x, s = x;
    auto const r = bytes_per_node(tp, n, [&](int) {
      auto hs =
          dc::fused(pol, dlstm::layer, x, h, s, w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]);
      h = hs[0], s = hs[1];
    });
    row(kind, r, 2);
  };
  cell(dc::policy::recompute, "fused_cell_recompute");
  cell(dc::policy::store, "fused_cell_store");
  dc::tape tp;
  auto w = tp.variable(full({b}, 0.9)), bias = tp.variable(full({b}, 0.1));
  auto A = tp.variable(full({b, b}, 0.1));
  dc::var<double> x = tp.variable(full({b}, 0.5));
  row("lazy_elementwise", bytes_per_node(tp, n, [&](int) { x = dc::tanh(x * w + bias); }));
  row("matmul", bytes_per_node(tp, n, [&](int) { (void)dc::matmul(A, x); }));
  row("sum", bytes_per_node(tp, n, [&](int) { (void)dc::sum(x); }));
  std::fflush(stdout);
}

struct tanh_affine {
  template <class H, class W, class B> DUALCAST_HD auto operator()(H h, W w, B b) const {
    return dc::tanh(h * w + b);
  }
};
constexpr dc::kernel<tanh_affine> step{tanh_affine{}};

// One repetition of a chain of `nodes` steps over n elements: {record ms, backward ms}.
std::pair<double, double> chain(int variant, dc::index_t n, int nodes, int threads) {
  dc::tape tp;
  tp.ex = dc::cpu{threads};
  tp.default_policy = dc::policy_kind::recompute;
  tp.fused = variant != 2;
  auto w = tp.variable(dc::tensor<double>::full({n}, 0.9));
  auto b = tp.variable(dc::tensor<double>::full({n}, 0.1));
  auto h = tp.variable(dc::tensor<double>::full({n}, 0.5));
  auto t0 = clock_type::now();
  dc::var<double> x = h;
  for (int i = 0; i < nodes; ++i) {
    if (variant == 0)
      x = dc::fused(dc::policy::recompute, step, x, w, b);
    else
      x = dc::tanh(x * w + b); // materialised by the assignment: one node, or one per operation
  }
  double record = ms_since(t0);
  auto seed = dc::tensor<double>::full({n}, 1.0);
  t0 = clock_type::now();
  tp.backward(std::vector<dc::var<double>>{x}, std::vector<dc::tensor<double>>{seed});
  return {record, ms_since(t0)};
}

} // namespace

int main(int argc, char **argv) {
  bench::options const o = bench::parse(argc, argv, 21, 3);
  int const reps = o.reps, threads = o.threads;
  bool const quick = o.quick;
  std::string data = DUALCAST_DATA_DIR;
  bool cpu_clock = false;
  for (std::size_t i = 0; i < o.rest.size(); ++i) {
    if (o.rest[i] == "--data" && i + 1 < o.rest.size())
      data = o.rest[i + 1];
    cpu_clock = cpu_clock || o.rest[i] == "--cpu-clock";
  }
  std::printf("benchmark,variant,size,threads,median_ms,us_per_node,nodes,ratio_to_plain,"
              "bytes_per_node,saved_per_node,paired_ratio,paired_ratio_q1,paired_ratio_q3\n");
  node_bytes();
  if (o.only == "node_bytes")
    return 0;

  // ---- the D-LSTM ---------------------------------------------------------------------------
  // The fused D-LSTM first, then the node chains, the unfused D-LSTM last: an unfused tape's 12x
  // more nodes leave the allocators' free lists holding blocks scattered over 12x the memory. The
  // fused gradient after one, even after an untimed run, took 5.5-7.4 ms instead of 5.0 (l = 2),
  // and a 14-element chain node 0.95 us instead of 0.75 -- a cost of alternating with a much
  // larger tape (docs/performance.md, "Unfused after fused"), not of a loop running one model.
  struct dlstm_case {
    dlstm::problem p;
    dc::tensor<double> M, E;
  };
  std::vector<dlstm_case> cases;
  for (int layers : {2, 4}) {
    dlstm::problem p =
        dlstm::read_adbench(data + "/adbench-lstm/lstm_l" + std::to_string(layers) + "_c1024.txt");
    auto M = dc::tensor<double>::from({2 * p.l, 4 * p.b}, p.main);
    auto E = dc::tensor<double>::from({3, p.b}, p.extra);
    cases.push_back({p, M, E});
  }
  double sink = 0;
  // Each timed run follows an untimed run of the same variant, so that every variant is measured
  // warm, as in a loop calling it.
  auto timed = [cpu_clock](auto const &run, std::vector<double> &into) {
    run();
    if (cpu_clock) {
      into.push_back(bench::process_cpu_ms(run));
      return;
    }
    auto t0 = clock_type::now();
    run();
    into.push_back(ms_since(t0));
  };
  std::vector<double> plain_ms;
  for (auto const &[p, M, E] : cases) {
    std::vector<double> plain, objective, gradient, operators[2];
    std::size_t nodes = 0, operator_nodes[2] = {0, 0};
    auto run_plain = [&] { sink += dlstm::objective_plain(p); };
    auto run_objective = [&] {
      dc::tape tp;
      tp.ex = dc::cpu{threads};
      sink += dlstm::loss(p, tp.constant(M), tp.constant(E)).item();
    };
    auto run_gradient = [&] {
      dc::tape tp;
      tp.ex = dc::cpu{threads};
      auto m = tp.variable(M), e = tp.variable(E);
      auto loss = dlstm::loss(p, m, e);
      tp.backward(loss);
      sink += m.grad().data()[0];
      nodes = tp.node_count();
    };
    auto run_operators = [&](int each) {
      dc::tape tp;
      tp.ex = dc::cpu{threads};
      auto m = tp.variable(M), e = tp.variable(E);
      auto loss = dlstm::loss_operators(p, m, e, each == 1);
      tp.backward(loss);
      sink += m.grad().data()[0];
      operator_nodes[each] = tp.node_count();
    };
    for (int r = 0; r < reps; ++r) { // interleaved
      timed(run_plain, plain);
      timed(run_objective, objective);
      timed(run_gradient, gradient);
      timed([&] { run_operators(0); }, operators[0]);
      timed([&] { run_operators(1); }, operators[1]);
    }
    std::string size = "l" + std::to_string(p.l) + "_c" + std::to_string(p.c);
    double mp = median(plain), mo = median(objective), mg = median(gradient);
    plain_ms.push_back(mp);
    std::printf("dlstm,plain_objective,%s,1,%.4f,,,1.00\n", size.c_str(), mp);
    std::printf("dlstm,objective,%s,%d,%.4f,,,%.2f\n", size.c_str(), threads, mo, mo / mp);
    std::printf("dlstm,gradient,%s,%d,%.4f,%.3f,%zu,%.2f\n", size.c_str(), threads, mg,
                1e3 * mg / double(nodes), nodes, mg / mp);
    for (int each = 0; each < 2; ++each) {
      std::vector<double> paired; // per repetition: plain operators / fused cell
      for (std::size_t r = 0; r < gradient.size(); ++r)
        paired.push_back(operators[each][r] / gradient[r]);
      double const mop = median(operators[each]);
      std::printf("dlstm,%s,%s,%d,%.4f,%.3f,%zu,%.2f,,,%.3f,%.3f,%.3f\n",
                  each ? "operators_each_statement_gradient" : "operators_gradient", size.c_str(),
                  threads, mop, 1e3 * mop / double(operator_nodes[each]), operator_nodes[each],
                  mop / mp, quantile(paired, 0.5), quantile(paired, 0.25), quantile(paired, 0.75));
    }
    std::fflush(stdout);
  }
  if (o.only == "dlstm")
    return 0;
  // ---- node chains --------------------------------------------------------------------------
  char const *names[] = {"fused", "lazy", "unfused"};
  for (dc::index_t n : {dc::index_t(14), dc::index_t(256), dc::index_t(4096), dc::index_t(65536)}) {
    int nodes =
        int(std::max<dc::index_t>(64, std::min<dc::index_t>(4096, (dc::index_t(1) << 22) / n)));
    if (quick)
      nodes = std::min(nodes, 256);
    std::vector<double> rec[3], bwd[3];
    for (int r = 0; r < reps; ++r)
      for (int v = 0; v < 3; ++v) { // interleaved, each timed run after an untimed one
        (void)chain(v, n, nodes, threads);
        auto [a, b] = chain(v, n, nodes, threads);
        rec[v].push_back(a), bwd[v].push_back(b);
      }
    for (int v = 0; v < 3; ++v) {
      int per = v == 2 ? 3 : 1; // unfused: tanh, *, + are three nodes per step
      double mr = median(rec[v]), mb = median(bwd[v]);
      std::printf("node_chain,%s_record,%ld,%d,%.4f,%.3f,%d,\n", names[v], long(n), threads, mr,
                  1e3 * mr / nodes, nodes * per);
      std::printf("node_chain,%s_backward,%ld,%d,%.4f,%.3f,%d,\n", names[v], long(n), threads, mb,
                  1e3 * mb / nodes, nodes * per);
      std::printf("node_chain,%s_record_and_backward,%ld,%d,%.4f,%.3f,%d,\n", names[v], long(n),
                  threads, mr + mb, 1e3 * (mr + mb) / nodes, nodes * per);
      std::fflush(stdout);
    }
  }

  // The same gradients on the unfused tape (ratios to the plain objective measured above).
  for (std::size_t i = 0; i < cases.size(); ++i) {
    auto const &[p, M, E] = cases[i];
    std::vector<double> unfused;
    auto run_unfused = [&] {
      dc::tape tp;
      tp.ex = dc::cpu{threads};
      tp.fused = false;
      auto m = tp.variable(M), e = tp.variable(E);
      tp.backward(dlstm::loss(p, m, e));
      sink += m.grad().data()[0];
    };
    for (int r = 0; r < reps; ++r)
      timed(run_unfused, unfused);
    std::string size = "l" + std::to_string(p.l) + "_c" + std::to_string(p.c);
    double const mu = median(unfused);
    std::printf("dlstm,unfused_gradient,%s,%d,%.4f,,,%.2f\n", size.c_str(), threads, mu,
                mu / plain_ms[i]);
    std::fflush(stdout);
  }
  if (sink == 12345.678)
    std::printf("#\n");
}

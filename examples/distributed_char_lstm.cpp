// The char-LSTM demo (examples/char_lstm.cpp) trained by several processes: each rank computes the
// loss of its share of every global batch, dualcast::distributed::data_parallel averages the
// gradients over the ranks during backward, and Adam runs unchanged on every rank.
//
//   mpirun -np 2 distributed_char_lstm [steps = 100] [hidden = 64] [global batch = 24] [seq = 16]
//                                      [--fixed-order] [--no-overlap] [--check] [--bench]
//
// Prints the loss of each global batch (the mean over the ranks of their mean losses) on rank 0.
// --check: rank 0 also trains a replica on its own with the whole global batch and the same
// starting point, and compares the two loss curves (exit status 1 if they differ by more than
// float rounding). --bench: per-step times (median), and of them the time spent waiting at the end
// of backward for gradient all-reduces still running (the communication the overlap did not hide).
#include "models/char_lstm.hpp"

#include <dualcast/autodiff.hpp>
#include <dualcast/distributed.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace dc = dualcast;
namespace dd = dualcast::distributed;
using namespace char_lstm;

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}
} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> pos;
  bool fixed = false, check = false, bench = false, overlap = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--fixed-order")
      fixed = true;
    else if (a == "--no-overlap")
      overlap = false;
    else if (a == "--check")
      check = true;
    else if (a == "--bench")
      bench = true;
    else
      pos.push_back(a);
  }
  auto arg = [&](std::size_t k, long d) { return k < pos.size() ? std::atol(pos[k].c_str()) : d; };
  int const steps = int(arg(0, 100));
  dc::index_t const hidden = arg(1, 64);
  int const global_batch = int(arg(2, 24));
  int const seq = int(arg(3, 16));

  return dd::run(argc, argv, [&](dd::communicator &comm) {
    bool const root = comm.rank() == 0;
    if (global_batch % comm.size() != 0)
      throw dc::shape_error("the global batch (" + std::to_string(global_batch) +
                            ") must divide evenly among the " + std::to_string(comm.size()) +
                            " ranks");
    vocabulary const voc(corpus);
    if (root)
      std::printf("char-LSTM on %d ranks: hidden %ld, global batch %d x %d characters, %d Adam "
                  "steps%s\n",
                  comm.size(), long(hidden), global_batch, seq, steps,
                  fixed ? ", fixed-order reduction" : "");

    dc::tape tp;
    model<float> m(tp, voc.size(), hidden, 42);
    dd::data_parallel_options o;
    o.fixed_order = fixed;
    o.overlap = overlap;
    dd::data_parallel<float> dp(comm, tp, m.ps, o);
    dc::adam opt(m.ps, {.lr = 1e-2});

    // The replica: one process, the whole global batch, the same start (rank 0 only).
    dc::tape solo_tp;
    model<float> solo(solo_tp, voc.size(), hidden, 42);
    dc::adam solo_opt(solo.ps, {.lr = 1e-2});

    std::mt19937_64 rng(1); // the same on every rank: the same global batches
    dd::item_range const mine = dd::shard_of(global_batch, comm.rank(), comm.size());
    std::vector<double> step_ms, wait_ms;
    double worst = 0, first = 0, last = 0;
    for (int it = 1; it <= steps; ++it) {
      std::vector<std::size_t> starts = random_starts(global_batch, seq, rng);
      std::vector<std::size_t> my_starts(starts.begin() + mine.begin, starts.begin() + mine.end);
      comm.barrier(); // (steps timed from a common start)
      auto const t0 = std::chrono::steady_clock::now();
      auto loss = loss_of(tp, m, batch_at(voc, my_starts, seq));
      tp.backward(loss);
      opt.step();
      tp.zero_grad();
      tp.clear();
      step_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      wait_ms.push_back(1e3 * dp.last_stats().end_wait_s);

      auto l = dc::tensor<double>::scalar(double(loss.item()));
      comm.all_reduce(l, dd::reduce_op::mean);
      double const global_loss = l.item();
      if (it == 1)
        first = global_loss;
      last = global_loss;
      if (check && root) {
        auto solo_loss = loss_of(solo_tp, solo, batch_at(voc, starts, seq));
        solo_tp.backward(solo_loss);
        solo_opt.step();
        solo_tp.zero_grad();
        solo_tp.clear();
        double const s = solo_loss.item();
        worst = std::max(worst, std::abs(global_loss - s) / std::abs(s));
      }
      if (root && !bench && (it % std::max(1, steps / 10) == 0 || it == 1))
        std::printf("step %4d  loss %.5f\n", it, global_loss);
    }
    if (root)
      std::printf("loss %.3f -> %.3f\n", first, last);
    if (bench && root) {
      // (the first three steps warm the caches and the memory pool up)
      std::size_t const warm = std::min<std::size_t>(3, step_ms.size() / 2);
      double const step = median({step_ms.begin() + long(warm), step_ms.end()});
      double const wait = median({wait_ms.begin() + long(warm), wait_ms.end()});
      std::printf("per step (median of %zu): %.2f ms, of which %.3f ms (%.1f %%) waiting for "
                  "gradient all-reduces at the end of backward; %zu buckets, %.2f MiB of "
                  "gradients\n",
                  step_ms.size() - warm, step, wait, 100 * wait / step, dp.bucket_count(),
                  double(dp.last_stats().bytes) / (1 << 20));
      // framework,ranks,overlap,hidden,global_batch,seq,step_ms,wait_ms
      std::printf("csv: dualcast,%d,%d,%ld,%d,%d,%.4f,%.4f\n", comm.size(), overlap ? 1 : 0,
                  long(hidden), global_batch, seq, step, wait);
    }
    bool ok = last < first;
    if (check && root) {
      // Float rounding only: the two add the batch's terms in different orders.
      bool const same = worst < 2e-3;
      std::printf("against one process with the whole global batch: largest relative difference "
                  "of the losses %.2e: %s\n",
                  worst, same ? "the same curve" : "DIFFERENT");
      ok = ok && same;
    }
    if (!ok)
      throw dc::error("the loss did not fall, or the curves differ");
  });
}

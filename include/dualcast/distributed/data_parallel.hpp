// dualcast/distributed/data_parallel.hpp: one model trained by several processes, each on its
// shard of every batch, with the gradients averaged over the processes during backward.
//
//   dualcast::distributed::communicator &comm = ...;            // (distributed::run gives one)
//   dualcast::tape tp;
//   model m(tp, ...);                                            // its parameters in m.ps
//   dualcast::distributed::data_parallel dp(comm, tp, m.ps);     // rank 0's values everywhere
//   dualcast::adam opt(m.ps, {...});
//   for (...) {
//     auto loss = loss_of(tp, m, my_shard_of_the_batch);         // (distributed/sampler.hpp)
//     tp.backward(loss);                                         // gradients: mean over ranks
//     opt.step(); opt.zero_grad(); tp.clear();
//   }
//
// As DistributedDataParallel does: the parameters are broadcast from rank 0 when it is made, and
// the gradients are gathered into buckets (about bucket_bytes each, in the reverse order of the
// parameter list: a model's last parameters get their gradients first). A bucket's all-reduce
// starts as soon as backward has computed every gradient in it (tape::on_gradient_ready) and runs
// while backward goes on; at the end of the node sweep the means over the ranks replace the
// ranks' gradients (each rank's whole gradient is reduced: this backward's and any it held from
// before, so gradients kept without zero_grad accumulate as on one process). Optimizers run
// unchanged.
//
// Every rank must run the same sequence of backward calls (each one all-reduces, except under
// no_sync(): gradient accumulation over micro-batches); buckets start in
// one fixed order on every rank, so a data-dependent graph (a parameter unused on one rank) is
// fine: it contributes zeros there. fixed_order = true gathers every rank's gradients and adds
// them in rank order on each rank: the result is bit-identical across runs and equals one
// process's gradient accumulated over the same shards in rank order (g0 + g1 + ...), divided by
// the number of ranks. Different parameter lists on different ranks (names, shapes) are an error
// on every rank at construction.
#pragma once

#include <dualcast/core/errors.hpp>
#include <dualcast/distributed/communicator.hpp>
#include <dualcast/distributed/host_transport.hpp>
#include <dualcast/nn/parameters.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

namespace dualcast {
namespace distributed {

struct data_parallel_options {
  // Target size of one bucket (a parameter larger than this gets a bucket of its own).
  std::size_t bucket_bytes = std::size_t(25) << 20;
  // Add the ranks' gradients in rank order (all-gather, then a local sum) instead of MPI's
  // all-reduce: bit-identical results across runs, at size times the received bytes.
  bool fixed_order = false;
  // Start each bucket's reduction as soon as its gradients are final (true), or all of them at
  // the end of backward (false: no overlap; for measuring what the overlap hides).
  bool overlap = true;
};

// What the last backward spent on communication (seconds), for benchmarks.
struct data_parallel_stats {
  double end_wait_s = 0; // waiting at the end of backward for all-reduces still running
  double copy_s = 0;     // gradients into and out of the buckets
  std::size_t buckets = 0;
  std::size_t bytes = 0; // of one rank's gradients
};

// Transport: how buckets move (host buffers and MPI: detail::host_transport; device buffers and
// NCCL: cuda_data_parallel in distributed/nccl.cuh).
template <class T, class Transport = detail::host_transport<T>> class data_parallel {
public:
  // comm: a communicator (MPI), or for cuda_data_parallel an nccl_communicator.
  template <class Comm>
  data_parallel(Comm &comm, tape &tp, parameters<T> const &ps, data_parallel_options o = {})
      : tr_(comm, o.fixed_order), tp_(tp), opt_(o) {
    char const *op = "dualcast::distributed::data_parallel";
    for (auto const &p : ps)
      if (p.v.requires_grad()) {
        if (p.v.owner() != &tp || !p.v.is_leaf())
          throw tape_error(std::string(op) + ": parameter '" + p.name +
                           "' is not a leaf variable of the tape given");
        Transport::check_device(op, p.name, p.v.value().dev());
        params_.push_back({p.name, p.v, 0, 0});
      }
    agree_on_parameters(op);
    for (auto &p : params_) { // rank 0's values everywhere
      tensor<T> v = p.v.value();
      tr_.broadcast(v, 0);
    }
    make_buckets();
    for (std::size_t i = 0; i < params_.size(); ++i)
      hooks_.push_back(tp_.on_gradient_ready(params_[i].v, [this, i] { gradient_ready(i); }));
    hooks_.push_back(tp_.on_backward_end([this] { finish(); }));
  }
  data_parallel(data_parallel const &) = delete;
  data_parallel &operator=(data_parallel const &) = delete;
  ~data_parallel() {
    for (auto id : hooks_)
      tp_.remove_hook(id);
  }

  // While the returned guard lives, backward does not all-reduce: gradients accumulate on each
  // rank as on one process (gradient accumulation over several micro-batches). The first
  // backward after it all-reduces each rank's whole gradient -- what accumulated, and its own --
  // as DistributedDataParallel's no_sync does.
  class no_sync_guard {
  public:
    explicit no_sync_guard(data_parallel &dp) : dp_(dp), was_(dp.no_sync_) { dp.no_sync_ = true; }
    no_sync_guard(no_sync_guard const &) = delete;
    no_sync_guard &operator=(no_sync_guard const &) = delete;
    ~no_sync_guard() { dp_.no_sync_ = was_; }

  private:
    data_parallel &dp_;
    bool was_;
  };
  [[nodiscard]] no_sync_guard no_sync() { return no_sync_guard(*this); }

  data_parallel_stats const &last_stats() const { return stats_; }
  std::size_t bucket_count() const { return buckets_.size(); }

private:
  struct param {
    std::string name;
    var<T> v;
    std::size_t bucket, offset;
    bool sent_fresh = true; // what went into the bucket is this backward's gradient alone
  };
  struct bucket {
    std::vector<std::size_t> params;
    std::size_t size = 0;    // elements
    std::size_t pending = 0; // gradients not in yet in this backward
  };

  void agree_on_parameters(char const *op) {
    std::string mine;
    for (auto const &p : params_)
      mine += p.name + " " + to_string(p.v.dims()) + "; ";
    std::vector<std::string> all = tr_.mpi().all_gather_strings(mine, op);
    for (std::size_t r = 1; r < all.size(); ++r)
      if (all[r] != all[0])
        throw distributed_error(std::string(op) + ": the parameters differ across ranks: rank 0 " +
                                "has [" + all[0] + "], rank " + std::to_string(r) + " has [" +
                                all[r] + "]");
  }

  // In the reverse order of the list (a model's last parameters get their gradients first).
  void make_buckets() {
    std::size_t const limit = std::max<std::size_t>(1, opt_.bucket_bytes / sizeof(T));
    for (std::size_t k = params_.size(); k-- > 0;) {
      std::size_t const n = std::size_t(params_[k].v.size());
      if (buckets_.empty() || (buckets_.back().size > 0 && buckets_.back().size + n > limit))
        buckets_.emplace_back();
      bucket &b = buckets_.back();
      params_[k].bucket = buckets_.size() - 1;
      params_[k].offset = b.size;
      b.params.push_back(k);
      b.size += n;
    }
    std::vector<std::size_t> sizes;
    for (bucket const &b : buckets_)
      sizes.push_back(b.size);
    tr_.allocate(sizes);
    reset();
  }

  void reset() {
    for (bucket &b : buckets_)
      b.pending = b.params.size();
    next_ = 0;
    stats_ = {};
    stats_.buckets = buckets_.size();
    for (bucket const &b : buckets_)
      stats_.bytes += b.size * sizeof(T);
  }

  // This backward's gradient of parameter i is final: into its bucket; with overlap, start the
  // buckets that are complete.
  void gradient_ready(std::size_t i) {
    if (no_sync_)
      return;
    auto const t0 = std::chrono::steady_clock::now();
    param &p = params_[i];
    bucket &b = buckets_[p.bucket];
    if (b.pending == 0)
      throw distributed_error(
          "dualcast::distributed::data_parallel: a backward on this rank stopped after it had "
          "started gradient all-reduces, so the ranks are out of step; end the job "
          "(distributed::run does) and start again");
    // The rank's whole gradient: this backward's (undefined: zeros) and, where it is not zero,
    // the one from before (accumulated under no_sync, or kept without zero_grad).
    auto const &slot = p.v.slot();
    tensor<T> whole = slot->grad;
    auto const &side = slot->side(); // (a leaf's)
    p.sent_fresh = !side.held.defined() || side.held_zero;
    if (!p.sent_fresh) {
      if (whole.defined()) {
        whole = whole.clone();
        dualcast::detail::add_into(whole, side.held);
      } else {
        whole = side.held;
      }
    }
    tr_.put(p.bucket, p.offset, whole, std::size_t(p.v.size()));
    --b.pending;
    stats_.copy_s += seconds_since(t0);
    if (opt_.overlap)
      start_ready_buckets();
  }

  // Starts the buckets whose gradients are all in, in bucket order (the same on every rank).
  void start_ready_buckets() {
    while (next_ < buckets_.size() && buckets_[next_].pending == 0)
      tr_.start(next_++, reduce_op_name);
    if (next_ > 0)
      tr_.progress(reduce_op_name);
  }

  // End of the node sweep: every hook has run, so every bucket can start (without overlap they
  // all start here). Wait, then put the means in place of this backward's gradients.
  void finish() {
    if (no_sync_)
      return;
    auto const t0 = std::chrono::steady_clock::now();
    start_ready_buckets();
    if (next_ != buckets_.size())
      throw distributed_error(std::string(reduce_op_name) +
                              ": internal: " + std::to_string(buckets_.size() - next_) +
                              " buckets never became ready during backward");
    tr_.wait_all(reduce_op_name);
    stats_.end_wait_s = seconds_since(t0);
    auto const t1 = std::chrono::steady_clock::now();
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      tr_.mean(b);
      for (std::size_t k : buckets_[b].params)
        write_back(params_[k]);
    }
    stats_.copy_s += seconds_since(t1);
    double const wait = stats_.end_wait_s, copy = stats_.copy_s;
    reset();
    stats_.end_wait_s = wait;
    stats_.copy_s = copy;
  }

  void write_back(param const &p) {
    auto const &slot = p.v.slot();
    // A gradient that changed after it was handed to the all-reduce would be lost without a word:
    // refuse it (a recording path that did not report the leaf's use to the tape).
    if (p.sent_fresh && !tr_.unchanged(p.bucket, p.offset, slot->grad, std::size_t(p.v.size())))
      throw distributed_error("dualcast::distributed::data_parallel: internal: the gradient of '" +
                              p.name + "' changed after it was all-reduced");
    slot->grad = tr_.take(p.bucket, p.offset, p.v.dims(), p.v.value().dev());
    slot->side().replace_held = true; // (the mean already holds the gradient from before)
    slot->borrowed = false;
    slot->zeros_outside_views = false;
    slot->side().handed.clear();
  }

  static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  static constexpr char const *reduce_op_name =
      "dualcast::distributed::data_parallel (gradient all-reduce)";

  Transport tr_;
  tape &tp_;
  data_parallel_options opt_;
  std::vector<param> params_;
  std::vector<bucket> buckets_;
  std::size_t next_ = 0; // the next bucket to start
  std::vector<tape::hook_id> hooks_;
  data_parallel_stats stats_;
  bool no_sync_ = false;
};

} // namespace distributed
} // namespace dualcast

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
// while backward goes on; at the end of the node sweep the results replace this backward's
// gradients, divided by the number of ranks. Optimizers run unchanged.
//
// Every rank must run the same sequence of backward calls (each one all-reduces); buckets start in
// one fixed order on every rank, so a data-dependent graph (a parameter unused on one rank) is
// fine: it contributes zeros there. fixed_order = true gathers every rank's gradients and adds
// them in rank order on each rank: the result is bit-identical across runs and equals one
// process's gradient accumulated over the same shards in rank order (g0 + g1 + ...), divided by
// the number of ranks. Different parameter lists on different ranks (names, shapes) are an error
// on every rank at construction.
#pragma once

#include <dualcast/core/errors.hpp>
#include <dualcast/distributed/communicator.hpp>
#include <dualcast/nn/parameters.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

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

template <class T> class data_parallel {
public:
  data_parallel(communicator &comm, tape &tp, parameters<T> const &ps, data_parallel_options o = {})
      : comm_(comm), tp_(tp), opt_(o) {
    char const *op = "dualcast::distributed::data_parallel";
    for (auto const &p : ps)
      if (p.v.requires_grad()) {
        if (p.v.owner() != &tp || !p.v.is_leaf())
          throw tape_error(std::string(op) + ": parameter '" + p.name +
                           "' is not a leaf variable of the tape given");
        if (!p.v.value().dev().is_host())
          throw device_error(std::string(op) + ": parameter '" + p.name + "' is on " +
                             to_string(p.v.value().dev()) +
                             "; data_parallel takes host parameters (CUDA ones need NCCL, which "
                             "dualcast does not support yet)");
        params_.push_back({p.name, p.v, 0, 0});
      }
    agree_on_parameters(op);
    for (auto &p : params_) { // rank 0's values everywhere
      tensor<T> v = p.v.value();
      comm_.broadcast(v, 0);
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

  data_parallel_stats const &last_stats() const { return stats_; }
  std::size_t bucket_count() const { return buckets_.size(); }

private:
  struct param {
    std::string name;
    var<T> v;
    std::size_t bucket, offset;
  };
  struct bucket {
    std::vector<std::size_t> params;
    std::size_t size = 0; // elements
    std::vector<T> send, recv;
    std::size_t pending = 0;
    bool started = false;
  };

  void agree_on_parameters(char const *op) {
    std::string mine;
    for (auto const &p : params_)
      mine += p.name + " " + to_string(p.v.dims()) + "; ";
    std::vector<std::string> all = comm_.all_gather_strings(mine, op);
    for (int r = 1; r < comm_.size(); ++r)
      if (all[std::size_t(r)] != all[0])
        throw distributed_error(std::string(op) + ": the parameters differ across ranks: rank 0 " +
                                "has [" + all[0] + "], rank " + std::to_string(r) + " has [" +
                                all[std::size_t(r)] + "]");
  }

  void make_buckets() {
    std::size_t const limit = opt_.bucket_bytes / sizeof(T) > 0 ? opt_.bucket_bytes / sizeof(T) : 1;
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
    std::size_t const ranks = std::size_t(comm_.size());
    for (bucket &b : buckets_) {
      b.send.resize(b.size);
      b.recv.resize(opt_.fixed_order ? b.size * ranks : b.size);
    }
    requests_.assign(buckets_.size(), MPI_REQUEST_NULL);
    reset();
  }

  void reset() {
    for (bucket &b : buckets_) {
      b.pending = b.params.size();
      b.started = false;
    }
    next_ = 0;
    stats_ = {};
    stats_.buckets = buckets_.size();
    for (bucket const &b : buckets_)
      stats_.bytes += b.size * sizeof(T);
  }

  // This backward's gradient of parameter i is final: into its bucket; start the buckets that
  // are complete, in bucket order.
  void gradient_ready(std::size_t i) {
    auto const t0 = std::chrono::steady_clock::now();
    param const &p = params_[i];
    bucket &b = buckets_[p.bucket];
    if (b.pending == 0)
      throw distributed_error(
          "dualcast::distributed::data_parallel: a backward on this rank stopped after it had "
          "started gradient all-reduces, so the ranks are out of step; end the job "
          "(distributed::run does) and start again");
    T *dst = b.send.data() + p.offset;
    auto const &slot = p.v.slot();
    if (slot->grad.defined()) {
      tensor<T> g = slot->grad.contiguous();
      std::memcpy(dst, g.data(), std::size_t(g.size()) * sizeof(T));
    } else {
      std::fill(dst, dst + p.v.size(), T(0)); // not reached on this rank
    }
    --b.pending;
    stats_.copy_s += seconds_since(t0);
    if (opt_.overlap)
      start_ready_buckets();
  }

  // Starts the buckets whose gradients are all in, in bucket order (the same on every rank).
  void start_ready_buckets() {
    char const *op = "dualcast::distributed::data_parallel (gradient all-reduce)";
    while (next_ < buckets_.size() && buckets_[next_].pending == 0) {
      bucket &nb = buckets_[next_];
      if (opt_.fixed_order)
        comm_.start_all_gather(nb.send.data(), nb.recv.data(), nb.size, op, requests_[next_]);
      else
        comm_.start_all_reduce_sum(nb.send.data(), nb.recv.data(), nb.size, op, requests_[next_]);
      nb.started = true;
      ++next_;
    }
    if (next_ > 0)
      comm_.test_all(requests_, op); // (lets MPI move the started ones on)
  }

  // End of the node sweep: every hook has run, so every bucket can start (without overlap they
  // all start here). Wait, then write the means back as this backward's gradients.
  void finish() {
    char const *op = "dualcast::distributed::data_parallel (gradient all-reduce)";
    auto const t0 = std::chrono::steady_clock::now();
    start_ready_buckets();
    if (next_ != buckets_.size())
      throw distributed_error(std::string(op) +
                              ": internal: " + std::to_string(buckets_.size() - next_) +
                              " buckets never became ready during backward");
    comm_.wait_all(requests_, op);
    stats_.end_wait_s = seconds_since(t0);
    auto const t1 = std::chrono::steady_clock::now();
    std::size_t const ranks = std::size_t(comm_.size());
    for (bucket &b : buckets_) {
      if (opt_.fixed_order) { // g0 + g1 + ... in rank order, into recv's first part
        for (std::size_t r = 1; r < ranks; ++r)
          for (std::size_t e = 0; e < b.size; ++e)
            b.recv[e] += b.recv[r * b.size + e];
      }
      for (std::size_t e = 0; e < b.size; ++e)
        b.recv[e] /= T(comm_.size());
      for (std::size_t k : b.params)
        write_back(params_[k], b);
    }
    stats_.copy_s += seconds_since(t1);
    double const wait = stats_.end_wait_s, copy = stats_.copy_s;
    reset();
    stats_.end_wait_s = wait;
    stats_.copy_s = copy;
  }

  void write_back(param const &p, bucket const &b) {
    auto const &slot = p.v.slot();
    T const *mean = b.recv.data() + p.offset;
    std::size_t const n = std::size_t(p.v.size());
    // A gradient that changed after it was handed to the all-reduce would be lost without a word:
    // refuse it (a recording path that did not report the leaf's use to the tape).
    T const *sent = b.send.data() + p.offset;
    if (slot->grad.defined()) {
      tensor<T> g = slot->grad.contiguous();
      if (std::memcmp(g.data(), sent, n * sizeof(T)) != 0)
        throw distributed_error(
            "dualcast::distributed::data_parallel: internal: the gradient of '" + p.name +
            "' changed after it was all-reduced");
    }
    tensor<T> out = tensor<T>::empty(p.v.dims());
    std::memcpy(out.mutable_data(), mean, n * sizeof(T));
    slot->grad = std::move(out);
    slot->borrowed = false;
    slot->zeros_outside_views = false;
    slot->handed.clear();
  }

  static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  communicator &comm_;
  tape &tp_;
  data_parallel_options opt_;
  std::vector<param> params_;
  std::vector<bucket> buckets_;
  std::vector<MPI_Request> requests_;
  std::size_t next_ = 0; // the next bucket to start
  std::vector<tape::hook_id> hooks_;
  data_parallel_stats stats_;
};

} // namespace distributed
} // namespace dualcast

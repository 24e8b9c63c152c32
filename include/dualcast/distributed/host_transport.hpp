// dualcast/distributed/host_transport.hpp: how data_parallel moves gradient buckets of host
// parameters: host buffers and MPI's non-blocking collectives. (The CUDA counterpart, device
// buffers and NCCL on the tape's stream, is distributed/nccl.cuh.)
#pragma once

#include <dualcast/core/errors.hpp>
#include <dualcast/distributed/communicator.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

namespace dualcast::distributed::detail {

template <class T> class host_transport {
public:
  host_transport(communicator &comm, bool fixed_order) : comm_(comm), fixed_(fixed_order) {}

  communicator &mpi() const { return comm_; }
  // The parameters it can move (tensors on the host).
  static void check_device(char const *op, std::string const &name, device const &d) {
    if (!d.is_host())
      throw device_error(std::string(op) + ": parameter '" + name + "' is on " + to_string(d) +
                         "; data_parallel<T> over MPI takes host parameters (CUDA parameters: "
                         "cuda_data_parallel<T> over NCCL, dualcast/distributed/nccl.cuh)");
  }
  void broadcast(tensor<T> &value, int root) { comm_.broadcast(value, root); }

  // b buckets of n[b] elements each.
  void allocate(std::vector<std::size_t> const &sizes) {
    buckets_.assign(sizes.size(), {});
    requests_.assign(sizes.size(), MPI_REQUEST_NULL);
    std::size_t const ranks = std::size_t(comm_.size());
    for (std::size_t b = 0; b < sizes.size(); ++b) {
      buckets_[b].n = sizes[b];
      buckets_[b].send.resize(sizes[b]);
      buckets_[b].recv.resize(fixed_ ? sizes[b] * ranks : sizes[b]);
    }
  }
  // A gradient (or zeros: undefined) into bucket b at offset.
  void put(std::size_t b, std::size_t offset, tensor<T> const &g, std::size_t n) {
    T *dst = buckets_[b].send.data() + offset;
    if (!g.defined()) {
      std::fill(dst, dst + n, T(0));
      return;
    }
    tensor<T> c = g.contiguous();
    std::memcpy(dst, c.data(), n * sizeof(T));
  }
  void start(std::size_t b, char const *op) {
    bucket &k = buckets_[b];
    if (fixed_)
      comm_.start_all_gather(k.send.data(), k.recv.data(), k.n, op, requests_[b]);
    else
      comm_.start_all_reduce_sum(k.send.data(), k.recv.data(), k.n, op, requests_[b]);
  }
  // Lets MPI move started collectives on (it progresses only inside its calls).
  void progress(char const *op) { comm_.test_all(requests_, op); }
  void wait_all(char const *op) { comm_.wait_all(requests_, op); }
  // Bucket b's mean over the ranks, into the first n elements of its receive buffer: the ranks'
  // gradients added in rank order (fixed order) or MPI's sum, divided by the number of ranks.
  void mean(std::size_t b) {
    bucket &k = buckets_[b];
    if (fixed_)
      for (std::size_t r = 1; r < std::size_t(comm_.size()); ++r)
        for (std::size_t e = 0; e < k.n; ++e)
          k.recv[e] += k.recv[r * k.n + e];
    for (std::size_t e = 0; e < k.n; ++e)
      k.recv[e] /= T(comm_.size());
  }
  // Whether g still holds what put() copied (a gradient written after it was handed over).
  bool unchanged(std::size_t b, std::size_t offset, tensor<T> const &g, std::size_t n) const {
    if (!g.defined())
      return true;
    tensor<T> c = g.contiguous();
    return std::memcmp(c.data(), buckets_[b].send.data() + offset, n * sizeof(T)) == 0;
  }
  // The mean for a parameter of shape dims at offset in bucket b, as a new tensor.
  tensor<T> take(std::size_t b, std::size_t offset, shape const &dims, device const &) const {
    tensor<T> out = tensor<T>::empty(dims);
    std::memcpy(out.mutable_data(), buckets_[b].recv.data() + offset,
                std::size_t(out.size()) * sizeof(T));
    return out;
  }

private:
  struct bucket {
    std::size_t n = 0;
    std::vector<T> send, recv;
  };
  communicator &comm_;
  bool fixed_;
  std::vector<bucket> buckets_;
  std::vector<MPI_Request> requests_;
};

} // namespace dualcast::distributed::detail

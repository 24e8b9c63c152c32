// dualcast/distributed/nccl.cuh: data parallelism for CUDA tensors, over NCCL (nvcc translation
// units; needs <nccl.h> and <mpi.h>, links libnccl and MPI).
//
//   dualcast::distributed::communicator comm;                 // MPI: ranks, and NCCL's bootstrap
//   dualcast::distributed::nccl_communicator gpus(comm);      // rank r on GPU r % (GPUs here)
//   dualcast::tape tp{stream};
//   ... parameters on dualcast::device::cuda(gpus.device()) ...
//   dualcast::distributed::cuda_data_parallel<float> dp(gpus, tp, m.ps);
//
// As data_parallel over MPI (distributed/data_parallel.hpp), with the buckets in device memory
// and their all-reduces (ncclAllReduce, or ncclAllGather and an ordered sum for fixed_order)
// enqueued on the stream backward runs on, behind the gradients they read. Waits poll the stream
// and ncclCommGetAsyncError, at most the MPI communicator's timeout; then the NCCL communicator
// is aborted (ncclCommAbort) and distributed_error thrown, so a rank that fails or dies does not
// leave the others waiting forever.
//
// Compiled in CI (nvcc, sm_80 / sm_90, against the headers of NCCL's Python package); it needs
// two or more GPUs to run, which none of our machines has: it has not run.
#pragma once

#include <dualcast/backend/cuda/check.cuh>
#include <dualcast/distributed/communicator.hpp>
#include <dualcast/distributed/data_parallel.hpp>

#include <nccl.h>

#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace dualcast::distributed {

namespace detail {
inline void nccl_check(ncclResult_t r, char const *what) {
  if (r != ncclSuccess)
    throw distributed_error(std::string(what) + ": NCCL error: " + ncclGetErrorString(r));
}
template <class T> ncclDataType_t nccl_type() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "dualcast::distributed: NCCL collectives of float or double tensors");
  return std::is_same_v<T, float> ? ncclFloat32 : ncclFloat64;
}
inline cudaStream_t as_cuda(stream_handle s) { return static_cast<cudaStream_t>(s.get()); }
} // namespace detail

// NCCL over the ranks of an MPI communicator: rank 0 makes the unique id, MPI broadcasts it.
class nccl_communicator {
public:
  // device < 0: this rank's index among the ranks on its node, modulo the node's GPUs.
  explicit nccl_communicator(communicator &mpi, int device = -1) : mpi_(mpi) {
    char const *op = "dualcast::distributed::nccl_communicator";
    int count = 0;
    dualcast::detail::cuda_backend::check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (count == 0)
      throw device_error(std::string(op) + ": no CUDA device on rank " +
                         std::to_string(mpi.rank()));
    if (device < 0) {
      MPI_Comm node{};
      MPI_Comm_split_type(mpi.handle(), MPI_COMM_TYPE_SHARED, mpi.rank(), MPI_INFO_NULL, &node);
      int local = 0;
      MPI_Comm_rank(node, &local);
      MPI_Comm_free(&node);
      device = local % count;
    }
    device_ = device;
    dualcast::detail::cuda_backend::check(cudaSetDevice(device_), "cudaSetDevice");
    ncclUniqueId id{};
    if (mpi.rank() == 0)
      detail::nccl_check(ncclGetUniqueId(&id), op);
    mpi.broadcast(reinterpret_cast<char *>(&id), sizeof id, 0, op);
    detail::nccl_check(ncclCommInitRank(&comm_, mpi.size(), id, mpi.rank()), op);
  }
  nccl_communicator(nccl_communicator const &) = delete;
  nccl_communicator &operator=(nccl_communicator const &) = delete;
  ~nccl_communicator() {
    if (comm_)
      ncclCommDestroy(comm_);
  }

  communicator &mpi() const { return mpi_; }
  int rank() const { return mpi_.rank(); }
  int size() const { return mpi_.size(); }
  int device() const { return device_; }
  ncclComm_t handle() const { return comm_; }

  // Element-wise sum (or mean) of x over the ranks, in place, on stream s (enqueued; wait() or
  // any later work on s sees it).
  template <class T>
  void all_reduce(tensor<T> &x, reduce_op how, stream_handle s = current_stream()) const {
    char const *op = "dualcast::distributed::nccl_communicator::all_reduce";
    require_device(op, x.dev());
    tensor<T> c = x.is_contiguous() ? x : x.contiguous();
    detail::nccl_check(
        ncclAllReduce(c.data(), c.mutable_data(), std::size_t(c.size()), detail::nccl_type<T>(),
                      how == reduce_op::mean ? ncclAvg : ncclSum, comm_, detail::as_cuda(s)),
        op);
    if (!x.is_contiguous())
      x.copy_(c);
  }
  template <class T>
  void broadcast(tensor<T> &x, int root, stream_handle s = current_stream()) const {
    char const *op = "dualcast::distributed::nccl_communicator::broadcast";
    require_device(op, x.dev());
    tensor<T> c = x.is_contiguous() ? x : x.contiguous();
    detail::nccl_check(ncclBroadcast(c.data(), c.mutable_data(), std::size_t(c.size()),
                                     detail::nccl_type<T>(), root, comm_, detail::as_cuda(s)),
                       op);
    if (!x.is_contiguous())
      x.copy_(c);
  }
  // Waits for the work enqueued on s, polling NCCL's asynchronous errors, at most the MPI
  // communicator's timeout; a failure aborts this communicator (the others' NCCL calls then fail
  // too) and throws.
  void wait(stream_handle s, char const *op) {
    auto const start = std::chrono::steady_clock::now();
    for (;;) {
      cudaError_t const q = cudaStreamQuery(detail::as_cuda(s));
      if (q == cudaSuccess)
        return;
      if (q != cudaErrorNotReady)
        dualcast::detail::cuda_backend::check(q, op);
      ncclResult_t async = ncclSuccess;
      detail::nccl_check(ncclCommGetAsyncError(comm_, &async), op);
      if (async != ncclSuccess || std::chrono::steady_clock::now() - start > mpi_.timeout) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        throw distributed_error(
            std::string(op) + ": rank " + std::to_string(rank()) +
            (async != ncclSuccess ? std::string(": NCCL error: ") + ncclGetErrorString(async)
                                  : ": waited more than " + std::to_string(mpi_.timeout.count()) +
                                        " s for the other ranks"));
      }
      std::this_thread::yield();
    }
  }

private:
  void require_device(char const *op, dualcast::device const &d) const {
    if (d.is_host() || d.index != device_)
      throw device_error(std::string(op) + ": the tensor is on " + to_string(d) + ", not on " +
                         to_string(dualcast::device::cuda(device_)) + " (this rank's GPU)");
  }

  communicator &mpi_;
  ncclComm_t comm_ = nullptr;
  int device_ = 0;
};

namespace detail {
// recv[e] = (recv[e] + recv[n + e] + ...) / ranks: the fixed-order sum of an all-gather (ranks > 1
// parts) or the scaling of an all-reduce's sum (ranks parts given as 1).
template <class T> __global__ void ordered_mean(T *recv, std::size_t n, int parts, int ranks) {
  for (std::size_t e = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; e < n;
       e += std::size_t(gridDim.x) * blockDim.x) {
    T acc = recv[e];
    for (int r = 1; r < parts; ++r)
      acc += recv[std::size_t(r) * n + e];
    recv[e] = acc / T(ranks);
  }
}
// *differs = 1 where a[e] != b[e] (bitwise: NaNs that are the same bits compare equal).
template <class T>
__global__ void differs_from(T const *a, T const *b, std::size_t n, int *differs) {
  for (std::size_t e = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; e < n;
       e += std::size_t(gridDim.x) * blockDim.x) {
    using U = std::conditional_t<sizeof(T) == 4, unsigned, unsigned long long>;
    if (*reinterpret_cast<U const *>(a + e) != *reinterpret_cast<U const *>(b + e))
      *differs = 1;
  }
}
inline unsigned blocks_for(std::size_t n) {
  return unsigned(std::min<std::size_t>((n + 255) / 256, 4096));
}

// data_parallel's buckets in device memory, moved by NCCL on the stream backward runs on.
template <class T> class nccl_transport {
public:
  nccl_transport(nccl_communicator &comm, bool fixed_order) : comm_(comm), fixed_(fixed_order) {}

  communicator &mpi() const { return comm_.mpi(); }
  static void check_device(char const *op, std::string const &name, dualcast::device const &d) {
    if (d.is_host())
      throw device_error(std::string(op) + ": parameter '" + name +
                         "' is on the host; cuda_data_parallel<T> takes CUDA parameters (host "
                         "ones: data_parallel<T> over MPI)");
  }
  void broadcast(tensor<T> &value, int root) {
    comm_.broadcast(value, root, current_stream());
    comm_.wait(current_stream(), "dualcast::distributed::cuda_data_parallel (broadcast)");
  }
  void allocate(std::vector<std::size_t> const &sizes) {
    auto const gpu = dualcast::device::cuda(comm_.device());
    std::size_t const ranks = std::size_t(comm_.size());
    buckets_.clear();
    for (std::size_t n : sizes)
      buckets_.push_back({n, tensor<T>::empty({index_t(n)}, gpu),
                          tensor<T>::empty({index_t(fixed_ ? n * ranks : n)}, gpu)});
    flag_ = tensor<float>::zeros({1}, gpu); // (an int's worth of device memory)
  }
  void put(std::size_t b, std::size_t offset, tensor<T> const &g, std::size_t n) {
    T *dst = buckets_[b].send.mutable_data() + offset;
    cudaStream_t const s = as_cuda(current_stream());
    if (!g.defined()) {
      dualcast::detail::cuda_backend::check(cudaMemsetAsync(dst, 0, n * sizeof(T), s),
                                            "cudaMemsetAsync (gradient bucket)");
      return;
    }
    tensor<T> c = g.contiguous();
    dualcast::detail::cuda_backend::check(
        cudaMemcpyAsync(dst, c.data(), n * sizeof(T), cudaMemcpyDeviceToDevice, s),
        "cudaMemcpyAsync (gradient bucket)");
  }
  void start(std::size_t b, char const *op) {
    bucket &k = buckets_[b];
    cudaStream_t const s = as_cuda(current_stream());
    if (fixed_)
      nccl_check(ncclAllGather(k.send.data(), k.recv.mutable_data(), k.n, nccl_type<T>(),
                               comm_.handle(), s),
                 op);
    else
      nccl_check(ncclAllReduce(k.send.data(), k.recv.mutable_data(), k.n, nccl_type<T>(), ncclSum,
                               comm_.handle(), s),
                 op);
  }
  void progress(char const *) {} // (NCCL progresses by itself)
  void wait_all(char const *op) { comm_.wait(current_stream(), op); }
  void mean(std::size_t b) {
    bucket &k = buckets_[b];
    if (k.n == 0)
      return;
    ordered_mean<<<blocks_for(k.n), 256, 0, as_cuda(current_stream())>>>(
        k.recv.mutable_data(), k.n, fixed_ ? comm_.size() : 1, comm_.size());
    dualcast::detail::cuda_backend::check(cudaGetLastError(), "ordered_mean launch");
  }
  bool unchanged(std::size_t b, std::size_t offset, tensor<T> const &g, std::size_t n) {
    if (!g.defined() || n == 0)
      return true;
    cudaStream_t const s = as_cuda(current_stream());
    int *flag = reinterpret_cast<int *>(flag_.mutable_data());
    dualcast::detail::cuda_backend::check(cudaMemsetAsync(flag, 0, sizeof(int), s),
                                          "cudaMemsetAsync (check flag)");
    tensor<T> c = g.contiguous();
    differs_from<<<blocks_for(n), 256, 0, s>>>(c.data(), buckets_[b].send.data() + offset, n, flag);
    dualcast::detail::cuda_backend::check(cudaGetLastError(), "differs_from launch");
    int host = 0;
    dualcast::detail::cuda_backend::check(
        cudaMemcpyAsync(&host, flag, sizeof(int), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
    dualcast::detail::cuda_backend::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return host == 0;
  }
  tensor<T> take(std::size_t b, std::size_t offset, shape const &dims,
                 dualcast::device const &d) const {
    tensor<T> out = tensor<T>::empty(dims, d);
    dualcast::detail::cuda_backend::check(
        cudaMemcpyAsync(out.mutable_data(), buckets_[b].recv.data() + offset,
                        std::size_t(out.size()) * sizeof(T), cudaMemcpyDeviceToDevice,
                        as_cuda(current_stream())),
        "cudaMemcpyAsync (mean gradient)");
    return out;
  }

private:
  struct bucket {
    std::size_t n = 0;
    tensor<T> send, recv;
  };
  nccl_communicator &comm_;
  bool fixed_;
  std::vector<bucket> buckets_;
  tensor<float> flag_;
};
} // namespace detail

// Data parallelism for CUDA parameters (see data_parallel): construct with an nccl_communicator.
template <class T> using cuda_data_parallel = data_parallel<T, detail::nccl_transport<T>>;

} // namespace dualcast::distributed

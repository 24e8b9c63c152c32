// dualcast/distributed/communicator.hpp: processes that compute together, over MPI.
//
//   int main(int argc, char **argv) {
//     return dualcast::distributed::run(argc, argv, [](dualcast::distributed::communicator &comm) {
//       auto x = dualcast::tensor<float>::full({4}, float(comm.rank()));
//       comm.all_reduce(x, dualcast::distributed::reduce_op::sum);   // 0 + 1 + ... on every rank
//       comm.broadcast(x, 0);                                        // rank 0's values everywhere
//     });
//   }
//   mpirun -np 2 ./program
//
// The engine is MPI (any implementation; tested with OpenMPI): this header needs <mpi.h> and the
// program links MPI (CMake: the target dualcast::distributed, defined where MPI is found). Host
// tensors only; CUDA tensors are refused with a device_error (their collectives: NCCL,
// dualcast/distributed/nccl.cuh).
//
// Failures never hang: every collective waits with a timeout (communicator::timeout, 300 s by
// default) and then throws distributed_error naming the operation and the rank; distributed::run
// turns an exception on any rank into a message naming that rank and MPI_Abort, which ends every
// other rank of the job at once (a rank that dies is noticed by mpirun, which ends the others).
#pragma once

#include <dualcast/core/errors.hpp>
#include <dualcast/tensor/tensor.hpp>

// (the C API only: MPI's deprecated C++ bindings warn under -Wextra)
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace dualcast {

// A collective operation failed or timed out, or ranks disagree (shapes, parameter lists).
class distributed_error : public error {
public:
  using error::error;
};

namespace distributed {

enum class reduce_op : std::uint8_t { sum, mean };

namespace detail {
template <class T> MPI_Datatype mpi_type() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> ||
                    std::is_same_v<T, std::int64_t> || std::is_same_v<T, char>,
                "dualcast::distributed: float, double, int64 or char elements");
  if constexpr (std::is_same_v<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return MPI_INT64_T;
  else
    return MPI_CHAR;
}
} // namespace detail

// MPI for the lifetime of this object: initialised here unless the program did it already, and
// finalised here if it was initialised here. While an exception unwinds through it, it aborts the
// whole job instead (MPI_Finalize would wait for ranks that are waiting for this one).
class session {
public:
  session(int *argc, char ***argv) {
    int done = 0;
    MPI_Initialized(&done);
    if (!done) {
      int provided = 0;
      // Funneled: only the thread that called in talks to MPI (OpenMP threads only compute).
      if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        throw distributed_error("dualcast::distributed::session: MPI_Init_thread failed");
      owned_ = true;
    }
    exceptions_ = std::uncaught_exceptions();
  }
  session(session const &) = delete;
  session &operator=(session const &) = delete;
  ~session() {
    if (!owned_)
      return;
    if (std::uncaught_exceptions() > exceptions_) {
      int rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      std::fprintf(stderr,
                   "dualcast::distributed: rank %d left with an exception; aborting the job\n",
                   rank);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
      MPI_Finalize();
  }

private:
  bool owned_ = false;
  int exceptions_ = 0;
};

// A group of ranks (a duplicate of MPI_COMM_WORLD by default, so that its traffic never mixes with
// the program's own), whose errors come back as distributed_error instead of ending the process.
class communicator {
public:
  // Collectives that have not completed after this long throw (a rank that stopped taking part).
  std::chrono::duration<double> timeout{300.0};

  communicator() : communicator(MPI_COMM_WORLD) {}
  explicit communicator(MPI_Comm base) {
    check(MPI_Comm_dup(base, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  communicator(communicator const &) = delete;
  communicator &operator=(communicator const &) = delete;
  ~communicator() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
      MPI_Comm_free(&comm_);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm handle() const { return comm_; }

  void barrier() const {
    MPI_Request r{};
    check(MPI_Ibarrier(comm_, &r), "barrier");
    wait(r, "barrier");
  }

  // Every rank's x becomes root's (same shape on every rank: checked).
  template <class T> void broadcast(tensor<T> &x, int root) const {
    char const *op = "dualcast::distributed::broadcast";
    check_root(op, root);
    require_host(op, x);
    check_same_shape(op, x.dims());
    tensor<T> c = x.is_contiguous() ? x : x.contiguous();
    broadcast(c.mutable_data(), std::size_t(c.size()), root, op);
    if (!x.is_contiguous())
      x.copy_(c);
  }
  // Element-wise sum (or mean) of x over the ranks, on every rank, in place.
  template <class T> void all_reduce(tensor<T> &x, reduce_op how) const {
    char const *op = "dualcast::distributed::all_reduce";
    require_host(op, x);
    check_same_shape(op, x.dims());
    tensor<T> c = x.is_contiguous() ? x : x.contiguous();
    T *p = c.mutable_data();
    all_reduce_sum(MPI_IN_PLACE, p, std::size_t(c.size()), op);
    if (how == reduce_op::mean)
      for (index_t i = 0; i < c.size(); ++i)
        p[i] /= T(size_);
    if (!x.is_contiguous())
      x.copy_(c);
  }

  // ---- raw buffers (the building blocks; n elements each) ------------------------------------
  template <class T> void broadcast(T *data, std::size_t n, int root, char const *op) const {
    MPI_Request r{};
    check(MPI_Ibcast(data, count(n, op), detail::mpi_type<T>(), root, comm_, &r), op);
    wait(r, op);
  }
  // send may be MPI_IN_PLACE (then recv holds the input).
  template <class T>
  void all_reduce_sum(void const *send, T *recv, std::size_t n, char const *op) const {
    MPI_Request r{};
    start_all_reduce_sum(send, recv, n, op, r);
    wait(r, op);
  }
  template <class T>
  void start_all_reduce_sum(void const *send, T *recv, std::size_t n, char const *op,
                            MPI_Request &r) const {
    check(MPI_Iallreduce(send, recv, count(n, op), detail::mpi_type<T>(), MPI_SUM, comm_, &r), op);
  }
  // recv (n * size elements) gets every rank's n elements, in rank order.
  template <class T>
  void start_all_gather(T const *send, T *recv, std::size_t n, char const *op,
                        MPI_Request &r) const {
    check(MPI_Iallgather(send, count(n, op), detail::mpi_type<T>(), recv, count(n, op),
                         detail::mpi_type<T>(), comm_, &r),
          op);
  }
  template <class T> void all_gather(T const *send, T *recv, std::size_t n, char const *op) const {
    MPI_Request r{};
    start_all_gather(send, recv, n, op, r);
    wait(r, op);
  }
  // Drives started collectives on (MPI progresses only inside its calls); true when all are done.
  bool test_all(std::vector<MPI_Request> &rs, char const *op) const {
    int done = 0;
    check(MPI_Testall(int(rs.size()), rs.data(), &done, MPI_STATUSES_IGNORE), op);
    return done != 0;
  }
  void wait(MPI_Request &r, char const *op) const {
    std::vector<MPI_Request> rs{r};
    wait_all(rs, op);
    r = rs[0];
  }
  // Waits for started collectives, at most `timeout` (then distributed_error).
  void wait_all(std::vector<MPI_Request> &rs, char const *op) const {
    auto const start = std::chrono::steady_clock::now();
    for (int spins = 0; !test_all(rs, op); ++spins) {
      if (std::chrono::steady_clock::now() - start > timeout)
        throw distributed_error(std::string(op) + ": rank " + std::to_string(rank_) +
                                " waited more than " + std::to_string(timeout.count()) +
                                " s for the other ranks (one of them stopped taking part: it "
                                "failed, exited, or runs a different sequence of collectives)");
      if (spins > 1000)
        std::this_thread::yield();
    }
  }

  // Every rank's string, in rank order (for agreement checks and error messages).
  std::vector<std::string> all_gather_strings(std::string const &mine, char const *op) const {
    std::int64_t len = std::int64_t(mine.size());
    std::vector<std::int64_t> lens(static_cast<std::size_t>(size_));
    all_gather(&len, lens.data(), 1, op);
    std::int64_t longest = 0;
    for (auto l : lens)
      longest = l > longest ? l : longest;
    std::string padded = mine;
    padded.resize(std::size_t(longest));
    std::string all(std::size_t(longest) * std::size_t(size_), '\0');
    if (longest > 0)
      all_gather(padded.data(), all.data(), std::size_t(longest), op);
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r)
      out.push_back(
          all.substr(std::size_t(r) * std::size_t(longest), std::size_t(lens[std::size_t(r)])));
    return out;
  }

private:
  static void check(int code, char const *op) {
    if (code == MPI_SUCCESS)
      return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, text, &len);
    throw distributed_error(std::string(op) +
                            ": MPI error: " + std::string(text, std::size_t(len)));
  }
  static int count(std::size_t n, char const *op) {
    if (n > std::size_t(std::numeric_limits<int>::max()))
      throw distributed_error(std::string(op) + ": " + std::to_string(n) +
                              " elements in one message; MPI counts stop at 2^31 - 1");
    return int(n);
  }
  void check_root(char const *op, int root) const {
    if (root < 0 || root >= size_)
      throw distributed_error(std::string(op) + ": root " + std::to_string(root) +
                              " is not a rank (there are " + std::to_string(size_) + ")");
  }
  template <class T> static void require_host(char const *op, tensor<T> const &x) {
    if (!x.dev().is_host())
      throw device_error(std::string(op) + ": the tensor is on " + to_string(x.dev()) +
                         "; the MPI communicator takes host tensors (CUDA tensors: "
                         "nccl_communicator, dualcast/distributed/nccl.cuh)");
  }
  // All ranks must pass the same shape: checked with one small all-gather, so that a mismatch
  // is an error on every rank instead of a truncated message or a hang.
  void check_same_shape(char const *op, shape const &s) const {
    std::vector<std::string> all = all_gather_strings(to_string(s), op);
    for (int r = 0; r < size_; ++r)
      if (all[std::size_t(r)] != all[0])
        throw distributed_error(std::string(op) + ": the tensor has shape " + all[0] +
                                " on rank 0 but " + all[std::size_t(r)] + " on rank " +
                                std::to_string(r));
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

// Runs body(comm) on this process of an MPI job and returns its exit status: 0, or -- when body
// throws on any rank -- a message naming that rank and the error on stderr, then MPI_Abort, which
// ends every rank (the others must not wait for a collective this rank will never join).
template <class F> int run(int argc, char **argv, F &&body) {
  session mpi(&argc, &argv);
  int rank = -1;
  try {
    communicator comm;
    rank = comm.rank();
    body(comm);
  } catch (std::exception const &e) {
    std::fprintf(stderr, "dualcast::distributed: rank %d failed: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 0;
}

} // namespace distributed
} // namespace dualcast

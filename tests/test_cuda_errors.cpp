// CUDA error reporting (issue 5), run on every machine with the CUDA toolkit: CUDA's failures
// become dualcast::cuda_error carrying the failed call and CUDA's error name and string, and a
// machine without a usable GPU gets a clear cuda_error at first use, never a crash. (With a GPU,
// the same first use succeeds and an impossible allocation is an allocation_error instead.)
// Host code compiled by the C++ compiler against the CUDA runtime; not a GPU test.
#include <dualcast/backend/cuda/check.cuh>
#include <dualcast/backend/cuda/memory.cuh>
#include <dualcast/backend/stream.hpp>
#include <dualcast/tensor/memory.hpp>

#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

namespace dc = dualcast;
using doctest::Contains;

namespace {
bool gpu_usable() {
  int count = 0;
  bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  (void)cudaGetLastError();
  return ok;
}
} // namespace

TEST_CASE("cuda_error names the failed call and carries CUDA's error name and string") {
  for (cudaError_t e : {cudaErrorInvalidValue, cudaErrorMemoryAllocation, cudaErrorNoDevice,
                        cudaErrorLaunchFailure}) {
    std::string const expected = std::string("cudaMemcpyAsync failed: ") + cudaGetErrorName(e) +
                                 ": " + cudaGetErrorString(e);
    CHECK_THROWS_WITH_AS(dc::detail::cuda_backend::check(e, "cudaMemcpyAsync"),
                         Contains(expected.c_str()), dc::cuda_error);
  }
  CHECK_NOTHROW(dc::detail::cuda_backend::check(cudaSuccess, "cudaMemcpyAsync"));
  // cuda_error is a dualcast::error, catchable as std::exception
  CHECK_THROWS_AS(dc::detail::cuda_backend::check(cudaErrorInvalidValue, "x"), dc::error);
}

TEST_CASE("first use of CUDA memory: cuda_error without a GPU, allocation_error when too big") {
  dc::detail::cuda_backend::cuda_resource r;
  if (!gpu_usable()) {
    CHECK_THROWS_WITH_AS(dc::detail::cuda_backend::require_device(), Contains("needs a GPU"),
                         dc::cuda_error);
    CHECK_THROWS_WITH_AS((void)r.allocate(1024, dc::device::cuda(0)),
                         Contains("the CUDA backend needs a GPU"), dc::cuda_error);
    // the failure is not sticky: asking again gives the same clear error
    CHECK_THROWS_AS((void)r.allocate(1024, dc::device::cuda(0)), dc::cuda_error);
  } else {
    std::size_t const huge = std::size_t(1) << 60;
    CHECK_THROWS_WITH_AS((void)r.allocate(huge, dc::device::cuda(0)),
                         Contains(std::to_string(huge).c_str()), dc::allocation_error);
    void *p = r.allocate(1024, dc::device::cuda(0)); // and the device is still usable
    CHECK(p != nullptr);
    r.deallocate(p, 1024, dc::device::cuda(0));
  }
  CHECK_THROWS_AS((void)r.allocate(16, dc::device::host()), dc::device_error);
}

// The stream-ordered pool of the tape's CUDA tensors (cuda_pool_resource): without a GPU every way
// in (plain, on a stream, through a storage block made in a stream_scope, a copy) is the same
// clear cuda_error, again and again, and nothing is counted as in use; with one, a block is
// allocated on a user stream, written and read back in that stream's order, freed on it, and a
// storage block remembers the stream it was made on.
TEST_CASE(
    "stream-ordered CUDA pool: cuda_error without a GPU -- blocks on a user stream with one") {
  dc::detail::cuda_backend::cuda_pool_resource pool;
  dc::memory_resource &r = pool;
  dc::device const gpu = dc::device::cuda(0);
  CHECK_THROWS_WITH_AS((void)pool.allocate(16, dc::device::host()),
                       Contains("cannot allocate host memory"), dc::device_error);
  if (!gpu_usable()) {
    int fake_stream = 0; // never reached: the device check comes first
    dc::stream_handle const s{&fake_stream};
    for (int again = 0; again < 2; ++again) {
      CHECK_THROWS_WITH_AS((void)pool.allocate(1024, gpu), Contains("the CUDA backend needs a GPU"),
                           dc::cuda_error);
      CHECK_THROWS_WITH_AS((void)r.allocate_on(1024, gpu, s),
                           Contains("the CUDA backend needs a GPU"), dc::cuda_error);
      dc::stream_scope const scope(s);
      CHECK_THROWS_WITH_AS(dc::storage(1024, gpu, r), Contains("the CUDA backend needs a GPU"),
                           dc::cuda_error);
      char host[4] = {};
      CHECK_THROWS_WITH_AS(
          dc::detail::cuda_backend::copy_bytes(host, dc::device::host(), host, gpu, sizeof host, s),
          Contains("the CUDA backend needs a GPU"), dc::cuda_error);
    }
    CHECK(pool.bytes_in_use() == 0);
    CHECK(!pool.stream_ordered(0));
    return;
  }
  std::size_t const huge = std::size_t(1) << 60;
  CHECK_THROWS_WITH_AS((void)pool.allocate(huge, gpu), Contains(std::to_string(huge).c_str()),
                       dc::allocation_error);
  CHECK(pool.bytes_in_use() == 0);
  cudaStream_t s = nullptr;
  dc::detail::cuda_backend::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                                  "cudaStreamCreateWithFlags");
  constexpr std::size_t n = std::size_t(1) << 20;
  void *p = r.allocate_on(n, gpu, s);
  CHECK(p != nullptr);
  CHECK(pool.bytes_in_use() == n);
  int supported = 0;
  CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0) == cudaSuccess);
  CHECK(pool.stream_ordered(0) == (supported != 0));
  CHECK(cudaMemsetAsync(p, 0x5a, n, s) == cudaSuccess);
  std::vector<unsigned char> back(n, 0);
  dc::detail::cuda_backend::copy_bytes(back.data(), dc::device::host(), p, gpu, n, s);
  CHECK(back == std::vector<unsigned char>(n, 0x5a)); // the copy waited for s
  r.deallocate_on(p, n, gpu, s);
  CHECK(pool.bytes_in_use() == 0);
  CHECK(pool.peak_bytes_in_use() >= n);
  {
    dc::stream_scope const scope(s);
    dc::storage block(64, gpu, r);
    CHECK(block.stream() == dc::stream_handle{s});
    dc::storage on_host(64, dc::device::host(), dc::default_pool());
    CHECK(on_host.stream().is_default());
  }
  CHECK(pool.bytes_in_use() == 0);
  CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(cudaStreamDestroy(s) == cudaSuccess);
}

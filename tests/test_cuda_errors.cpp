// CUDA error reporting (issue 5), run on every machine with the CUDA toolkit: CUDA's failures
// become dualcast::cuda_error carrying the failed call and CUDA's error name and string, and a
// machine without a usable GPU gets a clear cuda_error at first use, never a crash. (With a GPU,
// the same first use succeeds and an impossible allocation is an allocation_error instead.)
// Host code compiled by the C++ compiler against the CUDA runtime; not a GPU test.
#include <dualcast/backend/cuda/check.cuh>
#include <dualcast/backend/cuda/memory.cuh>

#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

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

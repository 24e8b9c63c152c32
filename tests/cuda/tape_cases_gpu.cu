// The tape test bodies of tests/cases/tape_cases.hpp on CUDA tensors: the whole tape instantiated
// for the CUDA executor (fused nodes store / recompute, lazy expressions, unfused mode,
// reductions, shape operations, softmax family, indexing, cuBLAS matmuls). Called from
// tests/test_gpu.cpp, which reports the tests skipped without a GPU.
#include <dualcast/cuda.cuh>

#include "../cases/tape_cases.hpp"

#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

std::string dualcast_gpu_tape_lstm_step_case() {
  return dualcast_tests::lstm_step_case(dualcast::device::cuda(0));
}
std::string dualcast_gpu_tape_mlp_case() {
  return dualcast_tests::mlp_case(dualcast::device::cuda(0));
}
std::string dualcast_gpu_tape_ops_case() {
  return dualcast_tests::ops_case(dualcast::device::cuda(0));
}
std::string dualcast_gpu_tape_primitives_case() {
  return dualcast_tests::primitives_case(dualcast::device::cuda(0));
}
std::string dualcast_gpu_tape_torch_ops_case() {
  return dualcast_tests::torch_ops_case(dualcast::device::cuda(0));
}
std::string dualcast_gpu_tape_index_tensors_case() {
  return dualcast_tests::index_tensors_case(dualcast::device::cuda(0));
}
// CPU == GPU, the tape's side: every case on host tensors and on CUDA tensors, within 256 ulp of
// double (GPU reductions add in another order; see tests/cases/tape_cases.hpp).
std::string dualcast_gpu_tape_law() {
  return dualcast_tests::tape_law(dualcast::device::cuda(0), 256);
}
// CUB's paths (issue 40): every cuda_primitives choice set to cub -- the broadcast reductions,
// cumsum of few rows (forward and backward), reduce_by_index's sorted path on the device -- through
// the same bodies: central differences (the sorted-bins case), CPU == GPU within 256 ulp (every
// tape case) and few long rows within 1e-10. The default choice is restored afterwards.
std::string dualcast_gpu_cub_tape_law() {
  namespace dc = dualcast;
  struct restore {
    dc::cuda_primitives saved = dc::default_cuda_primitives();
    ~restore() { dc::set_default_cuda_primitives(saved); }
  } const keep;
  auto const cub = dc::cuda_impl::cub;
  dc::set_default_cuda_primitives({cub, cub, cub, cub});
  std::string r = dualcast_tests::sorted_bins_case(dc::device::cuda(0));
  if (r.empty())
    r = dualcast_tests::tape_law(dc::device::cuda(0), 256);
  if (r.empty())
    r = dualcast_tests::long_rows_law(dc::device::cuda(0), 1e-10);
  return r.empty() ? r : "with CUB's primitives: " + r;
}
std::string dualcast_gpu_tape_sorted_bins_case() {
  return dualcast_tests::sorted_bins_case(dualcast::device::cuda(0));
}
// Few long rows (whole-array sums cut into chunks, max / min over chunks, scans and recurrences
// in pieces): the GPU against the host within 1e-10 relative (other addition orders).
std::string dualcast_gpu_long_rows_law() {
  return dualcast_tests::long_rows_law(dualcast::device::cuda(0), 1e-10);
}

// Two tapes on two streams (issue 17): the LSTM step and the MLP bodies above, each with one SGD
// step, run by two threads at once, each thread's tape on its own stream, several times; every
// run must equal, bit for bit, the same step run alone on the default stream. Twice: with
// blocking streams (cudaStreamCreate) where only the tape knows the stream (the inputs are
// uploaded and the results read in a stream_scope of it; what the bodies upload themselves goes
// on the default stream, which blocking streams wait for), and with non-blocking streams
// (cudaStreamNonBlocking: not ordered after the default stream) where the whole step runs in a
// stream_scope of the tape's stream.
namespace {
namespace dc = dualcast;
using dualcast_tests::tape_fn;
using dualcast_tests::tensor64;
using dualcast_tests::var64;

// The loss, the gradients and the values after one SGD step (momentum), as host numbers.
std::vector<double> step_on(tape_fn const &f, std::vector<tensor64> const &xs, cudaStream_t s,
                            bool whole_step_in_scope) {
  dc::device const d = dc::device::cuda(0);
  dc::detail::stream_scope_if const whole(s, whole_step_in_scope);
  std::vector<tensor64> on_gpu;
  {
    dc::stream_scope const uploads(s);
    for (auto const &x : xs)
      on_gpu.push_back(x.to(d).clone());
  }
  dc::tape tp{s};
  std::vector<var64> vs;
  for (auto const &x : on_gpu)
    vs.push_back(tp.variable(x));
  var64 const loss = dualcast_tests::weigh(f(vs));
  tp.backward(loss);
  std::vector<double> r{loss.item()}; // (on the tape's stream)
  dc::sgd<double> opt(vs, {.lr = 0.1, .momentum = 0.9});
  opt.step();
  dc::stream_scope const reads(s);
  for (auto const &v : vs) {
    auto const g = v.grad().to_vector();
    auto const w = v.value().to_vector();
    r.insert(r.end(), g.begin(), g.end());
    r.insert(r.end(), w.begin(), w.end());
  }
  tp.zero_grad();
  return r;
}

std::string compare(std::string const &what, std::vector<double> const &got,
                    std::vector<double> const &want) {
  if (got.size() != want.size())
    return what + ": " + std::to_string(got.size()) + " numbers, want " +
           std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(double)) != 0)
      return what + ": number " + std::to_string(i) + " is " + std::to_string(got[i]) +
             ", the sequential run on the default stream gives " + std::to_string(want[i]);
  return {};
}
} // namespace

std::string dualcast_gpu_tape_two_streams_case() {
  struct body {
    char const *name;
    tape_fn f;
    std::vector<tensor64> xs;
  };
  auto const lstm = dualcast_tests::lstm_step_problem(), mlp = dualcast_tests::mlp_problem();
  body const bodies[2] = {{"lstm step", lstm.f, lstm.inputs}, {"mlp", mlp.f, mlp.inputs}};
  std::vector<double> want[2];
  for (int b = 0; b < 2; ++b)
    want[b] = step_on(bodies[b].f, bodies[b].xs, nullptr, false);
  constexpr int reps = 20;
  for (unsigned flags : {unsigned(cudaStreamDefault), unsigned(cudaStreamNonBlocking)}) {
    bool const whole = flags == cudaStreamNonBlocking;
    std::string const kind = whole ? "non-blocking streams" : "blocking streams";
    cudaStream_t streams[2] = {nullptr, nullptr};
    for (auto &s : streams)
      dc::detail::cuda_backend::check(cudaStreamCreateWithFlags(&s, flags),
                                      "cudaStreamCreateWithFlags");
    std::string errors[2];
    auto run = [&](int t) {
      try {
        for (int i = 0; i < reps && errors[t].empty(); ++i) {
          int const b = (t + i) % 2; // both threads run both bodies, interleaved
          errors[t] = compare(kind + ", thread " + std::to_string(t) + ", run " +
                                  std::to_string(i) + ", " + bodies[b].name,
                              step_on(bodies[b].f, bodies[b].xs, streams[t], whole), want[b]);
        }
      } catch (std::exception const &e) {
        errors[t] = kind + ", thread " + std::to_string(t) + ": " + e.what();
      }
    };
    std::thread first(run, 0), second(run, 1);
    first.join();
    second.join();
    for (auto &s : streams) {
      (void)cudaStreamSynchronize(s);
      (void)cudaStreamDestroy(s);
    }
    for (auto const &e : errors)
      if (!e.empty())
        return e;
  }
  return {};
}

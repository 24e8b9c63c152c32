// The LSTM cell called from C++ inside the PyTorch process, for bench/interop/torch_lstm_cell.py:
// dualcast::apply + dualcast::vjp (bench/lstm_cell.cpp's fused_vjp: every input active, outputs
// and cotangents written into arrays allocated once) on torch tensors' memory, so that the
// Python operation and the same kernel called from C++ are timed interleaved in one process.
//   torch.ops.dualcast_bench.lstm_cell_cpp(ins[5], outs[2], cotangents[2], grads[5], reps) ->
//   the seconds of each of `reps` calls
#include <dualcast/interop/torch.hpp>
#include <dualcast/kernel/cells.hpp>

#include <chrono>
#include <vector>

namespace {

namespace dc = dualcast;
namespace di = dualcast::interop::detail;

std::vector<double> lstm_cell_cpp(at::TensorList ins, at::TensorList outs, at::TensorList cot,
                                  at::TensorList grads, std::int64_t reps) {
  TORCH_CHECK(ins.size() == 5 && outs.size() == 2 && cot.size() == 2 && grads.size() == 5,
              "lstm_cell_cpp: 5 inputs, 2 outputs, 2 cotangents, 5 gradients");
  for (auto const *l : {&ins, &outs, &cot, &grads})
    for (auto const &t : *l)
      TORCH_CHECK(t.scalar_type() == c10::kFloat && t.is_cpu() && t.is_contiguous(),
                  "lstm_cell_cpp: contiguous float32 CPU tensors");
  auto v = [](at::Tensor const &t) { return di::view_of<float>(t); };
  auto cv = [](at::Tensor const &t) { return di::view_of<float const>(t); };
  dc::cpu ex{at::get_num_threads()};
  std::vector<double> s;
  for (std::int64_t r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    dc::apply(ex, dc::cells::lstm, dc::out(v(outs[0]), v(outs[1])), cv(ins[0]), cv(ins[1]),
              cv(ins[2]), cv(ins[3]), cv(ins[4]));
    dc::vjp(ex, dc::cells::lstm,
            dc::out(v(grads[0]), v(grads[1]), v(grads[2]), v(grads[3]), v(grads[4])),
            dc::in(cv(ins[0]), cv(ins[1]), cv(ins[2]), cv(ins[3]), cv(ins[4])),
            dc::in(cv(cot[0]), cv(cot[1])));
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return s;
}

} // namespace

TORCH_LIBRARY(dualcast_bench, m) {
  m.def("lstm_cell_cpp(Tensor[] ins, Tensor[] outs, Tensor[] cot, Tensor[] grads, int reps) -> "
        "float[]",
        &lstm_cell_cpp);
}

// Compile check (CI's cuda stage, where NCCL's headers are found): data parallelism over NCCL for
// CUDA parameters, every member instantiated in float and double. It cannot run on our machines
// (NCCL needs one GPU per rank, and none has two).
#include <dualcast/autodiff.hpp>
#include <dualcast/distributed/nccl.cuh>

namespace dd = dualcast::distributed;

template class dualcast::distributed::data_parallel<float, dd::detail::nccl_transport<float>>;
template class dualcast::distributed::data_parallel<double, dd::detail::nccl_transport<double>>;
template class dualcast::distributed::detail::nccl_transport<float>;
template class dualcast::distributed::detail::nccl_transport<double>;

// What a training step calls.
void nccl_step(dd::communicator &mpi, dualcast::tape &tp, dualcast::parameters<float> const &ps,
               dualcast::var<float> const &loss) {
  dd::nccl_communicator gpus(mpi);
  dd::cuda_data_parallel<float> dp(gpus, tp, ps);
  tp.backward(loss);
  auto x = dualcast::tensor<double>::zeros({4}, dualcast::device::cuda(gpus.device()));
  gpus.all_reduce(x, dd::reduce_op::mean);
  gpus.broadcast(x, 0);
  gpus.wait(dualcast::current_stream(), "nccl_step");
}

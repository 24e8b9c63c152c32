// torch_cells.cpp compiled by nvcc: the same operators with CPU and CUDA implementations.
#include "torch_cells.cpp"

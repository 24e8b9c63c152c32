"""The argument tables of the reference entries dualcast_ref_<name> that DUALCAST_XLA_REFERENCE
defines (include/dualcast/interop/detail/xla_reference.hpp): for ctypes, the arrays' data
pointers, their ranks and 8 extents per array. Used by the tests and the JAX benchmark."""
import ctypes


def array_table(arrays):
    """(pointers, ranks, dims) of C-contiguous NumPy arrays, as the reference entries take them."""
    ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    ranks = (ctypes.c_int * len(arrays))(*[a.ndim for a in arrays])
    dims = (ctypes.c_longlong * (8 * len(arrays)))()
    for k, a in enumerate(arrays):
        for d, e in enumerate(a.shape):
            dims[8 * k + d] = e
    return ptrs, ranks, dims

"""The reference entries dualcast_ref_<name> that DUALCAST_REFERENCE_ENTRY defines in a kernel
library (include/dualcast/interop/detail/reference_entry.hpp): dualcast::apply / vjp called
directly on NumPy arrays through ctypes, no framework. Used by the tests (bit-for-bit comparisons
of the PyTorch and JAX operations) and the JAX benchmark."""
import ctypes

import numpy as np


def array_table(arrays):
    """(pointers, ranks, dims) of C-contiguous NumPy arrays, as the reference entries take them."""
    ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    ranks = (ctypes.c_int * len(arrays))(*[a.ndim for a in arrays])
    dims = (ctypes.c_longlong * (8 * len(arrays)))()
    for k, a in enumerate(arrays):
        for d, e in enumerate(a.shape):
            dims[8 * k + d] = e
    return ptrs, ranks, dims


class Reference:
    """The reference entries dualcast_ref_<name> of one library."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)

    def _call(self, name, mode, args, res_shapes):
        dtype = args[0].dtype
        args = [np.require(np.asarray(a, dtype), requirements="C") for a in args]
        res = [np.zeros(s, dtype) for s in res_shapes]

        ap, ar, ad = array_table(args)
        rp, rr, rd = array_table(res)
        err = ctypes.create_string_buffer(512)
        rc = getattr(self.lib, f"dualcast_ref_{name}")(
            mode, int(dtype == np.float64), len(args), ap, ar, ad, len(res), rp, rr, rd, err, 512)
        if rc != 0:
            raise RuntimeError(err.value.decode())
        return res

    def forward(self, name, args, n_out):
        shape = np.broadcast_shapes(*(np.shape(a) for a in args))
        return self._call(name, 0, args, [shape] * n_out)

    def vjp(self, name, args, cotangents, active):
        return self._call(name, 1, list(args) + list(cotangents),
                          [np.shape(args[i]) for i in active])

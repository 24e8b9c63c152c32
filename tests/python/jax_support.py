"""What the JAX tests share: the skip (no JAX: print DUALCAST_SKIPPED, exit 0, so ctest reports
skipped, never passed), the libraries' paths, and the reference entries of a kernel library
(DUALCAST_XLA_REFERENCE: dualcast::apply / vjp called directly on NumPy arrays, no XLA)."""
import ctypes
import os
import sys

import numpy as np

from dualcast._reference import array_table


def require_jax(cpu_only=True):
    """Imports JAX with x64 on (on the CPU only unless cpu_only is False), or exits as
    skipped."""
    try:
        import jax
    except ImportError:
        print("DUALCAST_SKIPPED: jax is not installed for", sys.executable)
        sys.exit(0)
    jax.config.update("jax_enable_x64", True)
    if cpu_only:
        jax.config.update("jax_platforms", "cpu")
    return jax


def library(var):
    path = os.environ.get(var)
    if not path or not os.path.exists(path):
        sys.exit(f"{var} does not name a built library (run through ctest)")
    return path


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

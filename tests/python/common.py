"""Shared set-up of the PyTorch tests: skip (DUALCAST_SKIPPED) where torch or the built
operator libraries are missing; run dualcast's own reference program."""

import os
import subprocess
import sys
import tempfile


def skip(reason):
    print("DUALCAST_SKIPPED: " + reason)
    sys.exit(0)


def require_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        skip("torch is not installed for " + sys.executable)
    if not os.environ.get("DUALCAST_TORCH_CELLS"):
        skip("the operator libraries were not built (no torch at configure time)")


def reference(kernel, arrays):
    """dualcast::apply + dualcast::vjp on float64 arrays (dict name -> numpy array), by the C++
    program tests/python/reference.cpp; returns its outputs as a dict of numpy arrays."""
    import numpy as np
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.npz"), os.path.join(d, "out.npz")
        np.savez(src, **{k: np.ascontiguousarray(v, dtype=np.float64) for k, v in arrays.items()})
        subprocess.run([os.environ["DUALCAST_REFERENCE"], kernel, src, dst], check=True)
        with np.load(dst) as f:
            return {k: f[k] for k in f.files}

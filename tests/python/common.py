"""Shared set-up of the PyTorch tests: skip (DUALCAST_SKIPPED) where torch or the built
operator libraries are missing; dualcast's own answer from the libraries' reference entries."""

import os
import sys


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


def reference(library):
    """The reference entries of the library the environment variable `library` names
    (DUALCAST_TORCH_CELLS, DUALCAST_TEST_KERNELS): dualcast::apply / vjp called directly on NumPy
    arrays, compiled in the same translation unit as the operators under test."""
    from dualcast._reference import Reference
    return Reference(os.environ[library])

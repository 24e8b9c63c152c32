"""What the JAX tests share: the skip (no JAX: print DUALCAST_SKIPPED, exit 0, so ctest reports
skipped, never passed), the libraries' paths, and the reference entries of a kernel library
(DUALCAST_REFERENCE_ENTRY: dualcast::apply / vjp called directly on NumPy arrays, no XLA)."""
import os
import sys

from dualcast._reference import Reference  # noqa: F401 (the JAX tests take it from here)


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



"""Runs examples/python/jax_user_kernel.py (a user kernel under jit(grad(...)), the guide's JAX
snippet) at a small size: it exits non-zero unless the loss halves."""
import os
import subprocess
import sys

import jax_support

jax_support.require_jax()
lib = jax_support.library("DUALCAST_JAX_EXAMPLE")
here = os.path.dirname(os.path.abspath(__file__))
script = os.path.join(here, "..", "..", "examples", "python", "jax_user_kernel.py")
r = subprocess.run([sys.executable, script, lib, "--steps", "100"], capture_output=True,
                   text=True, timeout=300)
print(r.stdout, r.stderr, sep="")
if r.returncode != 0 or "loss" not in r.stdout:
    sys.exit(f"the example failed (exit {r.returncode})")

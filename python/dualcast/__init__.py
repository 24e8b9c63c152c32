"""dualcast from Python: dualcast.torch (PyTorch operators) and dualcast.jax (JAX operations)."""

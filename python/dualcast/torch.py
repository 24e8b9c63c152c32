"""dualcast kernels as differentiable PyTorch operations.

    import dualcast.torch as dct
    h, c = dct.lstm_cell(i, f, g, o, c)            # the ready cells (this package's own library)
    ops = dct.load_library("my_kernels.so")        # kernels registered with DUALCAST_TORCH_KERNEL
    y = ops.softclip(x, t)

Each operation runs ONE fused dualcast pass forward (values only) and, when autograd asks, ONE
fused pass backward (dualcast::vjp: the kernel re-evaluated on dual numbers of only the inputs
that require grad; nothing is stored but the inputs, which are saved for backward, so modifying
one in place before backward raises torch's version-counter error). The autograd node is
recorded by the operator's own C++ autograd kernel (dualcast/interop/torch.hpp), so the
operators are differentiable from C++ and TorchScript too, and a call costs one operator call.
Arguments broadcast by torch's rules; the gradient of a broadcast argument is summed to its
shape. float32 and float64 on CPU (CUDA where the library was compiled by nvcc against a CUDA
torch); on the meta device the operators give the outputs' shapes.

Double backward (create_graph=True, then differentiating the gradient) raises a RuntimeError at
the second backward: the backward is a fused kernel of its own, not differentiable again (the
gradients computed with create_graph=True carry a node that raises, so a second derivative never
silently misses this operation).
torch.compile (torch >= 2.4): the operators trace as graph nodes (their Meta kernels give fake
tensors the shapes; torch.library.opcheck passes), fullgraph=True included; the compiled
program calls the same fused kernels. torch 1.13 has no torch.compile.
"""

import ctypes
import os

import torch

__all__ = ["load_library", "lstm_cell", "gru_cell", "hmlstm_update", "KernelLibrary"]


class _Kernel:
    """One registered kernel: its operators and what the library said about it."""

    def __init__(self, qualname, arity, outputs, nondiff, args, doc):
        self.qualname = qualname
        ns, name = qualname.split("::")
        self.name = name
        self.arity = arity
        self.outputs = outputs
        self.nondiff = nondiff
        names = [a.strip() for a in args.split(",")] if args.strip() else []
        if len(names) != arity:
            names = ["x%d" % a for a in range(arity)]
        self.args = names
        self.doc = doc
        self.forward_op = getattr(getattr(torch.ops, ns), name)
        self.vjp_op = getattr(getattr(torch.ops, ns), name + "_vjp")


def _make_callable(k):
    op = k.forward_op

    def call(*args):
        if len(args) != k.arity:
            raise TypeError("%s takes %d tensors (%s), got %d"
                            % (k.name, k.arity, ", ".join(k.args), len(args)))
        for a, x in enumerate(args):
            if not isinstance(x, torch.Tensor):
                raise TypeError("%s: argument %d (%s) is a %s, not a torch.Tensor"
                                % (k.name, a, k.args[a], type(x).__name__))
        outs = op(list(args))  # (its C++ autograd kernel records the backward)
        return tuple(outs) if k.outputs > 1 else outs[0]

    call.__name__ = k.name
    call.__qualname__ = k.name
    outs = "a tuple of %d tensors" % k.outputs if k.outputs > 1 else "a tensor"
    call.__doc__ = "%s(%s) -> %s\n\n%s\n\nA dualcast kernel (operator %s): tensors of one dtype " \
        "(float32 or float64) and device, broadcast together; differentiable in %s." % (
            k.name, ", ".join(k.args), outs, k.doc, k.qualname,
            ", ".join(a for i, a in enumerate(k.args) if not (k.nondiff >> i) & 1))
    return call


class KernelLibrary:
    """The kernels of one library loaded by load_library, as attributes (see names())."""

    def __init__(self, path, kernels):
        self.path = path
        self._kernels = kernels
        for k in kernels:
            setattr(self, k.name, _make_callable(k))

    def names(self):
        return [k.name for k in self._kernels]

    def __repr__(self):
        return "<dualcast kernels %s from %s>" % (", ".join(self.names()), self.path)


_loaded = {}


def load_library(path):
    """Loads a library built with dualcast_add_python_kernels(... FRAMEWORK torch ...) and
    returns its kernels as differentiable callables (attributes named as registered)."""
    path = os.path.abspath(os.fspath(path))
    if path in _loaded:
        return _loaded[path]
    if not os.path.exists(path):
        raise FileNotFoundError("dualcast.torch.load_library: no file " + path)
    torch.ops.load_library(path)
    try:
        listing = ctypes.CDLL(path).dualcast_torch_kernels
    except AttributeError:
        raise RuntimeError("dualcast.torch.load_library: %s registers no dualcast kernel "
                           "(no dualcast_torch_kernels symbol)" % path) from None
    listing.restype = ctypes.c_char_p
    kernels = []
    for line in listing().decode().splitlines():
        qualname, arity, outputs, nondiff, args, doc = line.split("\t")
        kernels.append(_Kernel(qualname, int(arity), int(outputs), int(nondiff), args, doc))
    lib = KernelLibrary(path, kernels)
    _loaded[path] = lib
    return lib


def _cells_path():
    env = os.environ.get("DUALCAST_TORCH_CELLS")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for f in sorted(os.listdir(here)):
        if f.startswith("_torch_cells") and f.endswith((".so", ".dylib", ".pyd")):
            return os.path.join(here, f)
    return None


def _load_cells():
    path = _cells_path()
    if path is None:
        raise RuntimeError(
            "dualcast.torch: the cells library (_torch_cells) was not built: reinstall with "
            "torch installed (pip install --no-build-isolation ./python), or set "
            "DUALCAST_TORCH_CELLS to the built library")
    return load_library(path)


# Loaded at import where it exists, so that the first call of a cell inside torch.compile finds
# the operators registered (loading a library is not traceable: a graph break); an error is
# raised at the first use instead, so that user kernels work without the cells.
try:
    _cells = _load_cells()
except (OSError, RuntimeError):
    _cells = None


def _cell(name):
    global _cells
    if _cells is None:
        _cells = _load_cells()
    return getattr(_cells, name)


def _cell_wrapper(name, signature, doc):
    def call(*args):
        return _cell(name)(*args)

    call.__name__ = name
    call.__qualname__ = name
    call.__doc__ = "%s%s\n\n%s" % (name, signature, doc)
    return call


lstm_cell = _cell_wrapper(
    "lstm_cell", "(i, f, g, o, c) -> (h', c')",
    "LSTM cell update from the gate pre-activations i, f, g, o and the previous cell state c:\n"
    "c' = sigmoid(f) c + sigmoid(i) tanh(g), h' = sigmoid(o) tanh(c'). One fused pass forward,\n"
    "one fused pass backward (only the inputs that require grad are differentiated).")
gru_cell = _cell_wrapper(
    "gru_cell", "(x_r, x_z, x_n, h_r, h_z, h_n, h) -> h'",
    "GRU cell update (PyTorch's formulation): r = sigmoid(x_r + h_r), z = sigmoid(x_z + h_z),\n"
    "n = tanh(x_n + r h_n), h' = (1 - z) n + z h.")
hmlstm_update = _cell_wrapper(
    "hmlstm_update", "(z, zb, c, f, i, g) -> c'",
    "HM-LSTM cell-state update with boundary masks z, zb (0 or 1, not differentiated):\n"
    "FLUSH (z == 1) c' = sigmoid(i) tanh(g); COPY (z == 0 and zb == 0) c' = c;\n"
    "UPDATE c' = sigmoid(f) c + sigmoid(i) tanh(g).")

"""The op registry: one entry per public op.

An entry names the op's public function, its CPU function and GPU launcher (same
arguments: the graph, then canonical arrays and scalars, then outputs), the kernel
families its GPU path launches (cuda/<family>.cu), and its byte model: the least number
of bytes one call must move, the numerator of its fraction of the memory roofline.
`warmup()`, `csrattn check`, `csrattn bench` and the test tables iterate over it; the naive
reference and the test cases of each op live in cupy_csrattn.testing, keyed by op name.

Each ops/ module registers its functions with the ``register`` decorator, so importing
cupy_csrattn fills ``OPS`` (in the order of the package's imports).
"""

from dataclasses import dataclass
from typing import Callable

from cupy_csrattn.gpu import replay


@dataclass(frozen=True)
class Op:
    name: str
    function: Callable
    cpu: Callable
    gpu: Callable
    kernels: tuple
    bytes: Callable  # (graph, dtype, H, F) -> bytes; the fused attentions also take edge_terms=False
    forward: str = None  # for a backward op: the name of its forward op

    def backend(self, on_gpu):
        """The function that computes the op on the chosen device."""
        return self.gpu if on_gpu else self.cpu


OPS = {}


def register(*, cpu, gpu, kernels, bytes, forward=None):
    """Decorator: record the public function as an op (named after it) and return it, wrapped
    so that GPU calls repeating an earlier one replay its launches (gpu/replay.py), with the
    entry as its ``op`` attribute."""

    def add(function):
        name = function.__name__
        if name in OPS:
            raise ValueError(f"op {name} is registered twice")
        public = replay.replayed(function)
        public.op = OPS[name] = Op(name, public, cpu, gpu, tuple(kernels), bytes, forward)
        return public

    return add


def kernel_families():
    """Every kernel family some registered op launches, in registration order."""
    return tuple(dict.fromkeys(family for op in OPS.values() for family in op.kernels))

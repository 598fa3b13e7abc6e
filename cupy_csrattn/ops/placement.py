"""Placement: moves one call's arrays to where it runs, in the layout the backends take."""

import math

import numpy as np

from cupy_csrattn import _validate, backend
from cupy_csrattn.gpu import recording


class Placement:
    """Where one call runs, and its arrays there in the canonical layout.

    Backends see edge arrays as (E, H), node features as (N, H, F) and per-node scalars as
    (N, H), all C-contiguous in one dtype: the public (E, *S), (N, *S, F) and (N, *S) arrays
    with their trailing shape S flattened into H = prod(S) heads (a reshape, a view of a
    C-contiguous input in the computing dtype), and write into outputs they are handed. For a
    CSC/COO matrix given as the graph, ``edge_order`` maps graph edges to the matrix's
    stored entries: edge inputs are gathered into graph order and edge outputs scattered back.
    An ``out=`` that shares memory with an input gets its result after the run: the kernels
    write each output row while other rows still read the inputs (a node row of ``values`` is
    a neighbour of many rows), so they compute into a fresh array, copied into ``out``.
    """

    def __init__(self, graph, edge_order, arrays):
        """arrays: {argument name: array or None}, every array argument of the call (the
        names are those its errors give)."""
        self._names = {id(a): name for name, a in arrays.items() if a is not None}
        arrays = list(arrays.values())
        self.on_gpu = backend.uses_gpu(graph.device, [a for a in arrays if a is not None])
        if self.on_gpu and not backend.gpu_available():
            raise RuntimeError(f"CuPy input needs a usable CUDA device: {backend.gpu_status()[1]}")
        self.graph = graph.to_gpu() if self.on_gpu else graph
        self.xp = backend.array_module(self.on_gpu)
        self.edge_order = backend.to_device(edge_order, self.on_gpu)
        self._inputs = [a for a in arrays if isinstance(a, self.xp.ndarray)]
        self._scatter = []  # (work, result): edge outputs, scattered into the matrix's order
        self._copies = []  # (work, out): results for an out= that shares memory with an input
        self._outputs = []  # CPU calls: every array handed to the backend to write

    def run(self, op, *args, **optional):
        """Compute registered op ``op`` on this call's device: its backend function with the
        placed graph and ``args`` (canonical arrays, scalars, outputs), and the ``optional``
        keyword arguments that are not None (a call without them then suits a backend
        function that does not take them); then the results go where ``output`` said."""
        given = {name: value for name, value in optional.items() if value is not None}
        compute = op.backend(self.on_gpu)
        if self.on_gpu:
            compute(self.graph, *args, **given)
        elif self._outputs and not any(work.size for work in self._outputs):
            pass  # nothing to write; the CPU backend's loops over heads would still run (2**40 heads of size 0)
        else:
            # IEEE arithmetic, as on the GPU: NaN and +-inf inputs give the NaN and +-inf results
            # each op documents, not NumPy's floating-point warnings (or, under
            # np.seterr(all="raise"), errors that the GPU path never raises).
            with np.errstate(all="ignore"):
                compute(self.graph, *args, **given)
        self._finish()

    def node_input(self, x, dtype, per_node_scalar=False):
        """(N, H, F) view or copy of an (N, *S, F) node array; (N, H) of an (N, *S) one when
        per_node_scalar."""
        name = self._name(x)
        x = self._converted(x, self._contiguous(self._to_device(x, name), dtype, name))
        if per_node_scalar:
            return x.reshape(x.shape[0], math.prod(x.shape[1:]))
        return x.reshape(x.shape[0], math.prod(x.shape[1:-1]), x.shape[-1])

    def dense_input(self, x, dtype, shape):
        """x (neither a node nor an edge array: a parameter) as a C-contiguous array of ``shape``."""
        name = self._name(x)
        placed = self._contiguous(self._to_device(x, name), dtype, name)
        return self._converted(x, placed).reshape(shape)

    def edge_input(self, x, dtype, features=False):
        """(E, H) view or copy of an (E, *S) edge array, in graph edge order; (E, H, F) of an
        (E, *S, F) one when features; None for None (an optional input not given)."""
        if x is None:
            return None
        original, name = x, self._name(x)
        x = self._to_device(x, name)
        if self.edge_order is not None:
            self._check_copy(x, x.dtype, name)
            x = x[self.edge_order]
        x = self._converted(original, self._contiguous(x, dtype, name))
        if features:
            return x.reshape(x.shape[0], math.prod(x.shape[1:-1]), x.shape[-1])
        return x.reshape(x.shape[0], math.prod(x.shape[1:]))

    def _name(self, x):
        """The argument name of input ``x``, as the op gave it."""
        return self._names.get(id(x), "an input")

    def _check_copy(self, x, dtype, name, on_gpu=None):
        """Before a copy of input ``x`` (argument ``name``) in ``dtype`` is made on the
        computing device (or the host, on_gpu False): MemoryError where it cannot fit, as an
        output's (see output). A zero-stride (broadcast) input holds little memory but copies
        at its whole size."""
        nbytes = x.size * np.dtype(dtype).itemsize
        where = self.on_gpu if on_gpu is None else on_gpu
        what = f"a copy of {name} of shape {tuple(x.shape)} in {np.dtype(dtype).name}"
        backend.check_memory(what, nbytes, where)

    def _to_device(self, x, name):
        """x on the computing device (backend.to_device), each copy that makes checked first:
        CuPy copies a NumPy array to the GPU through a C-contiguous one on the host."""
        if self.on_gpu and not backend.is_cupy_array(x):
            x = np.asarray(x)
            if not x.flags.c_contiguous:
                self._check_copy(x, x.dtype, name, on_gpu=False)
            self._check_copy(x, x.dtype, name)
        return backend.to_device(x, self.on_gpu)

    def _contiguous(self, x, dtype, name):
        """x in ``dtype``, C-contiguous (itself where it is already; a copy checked first). A
        narrowing conversion (an lse given in float64 for float32 data) rounds as IEEE does, to
        inf past the range, as CuPy's does: on the CPU without NumPy's overflow warning (an
        error under np.seterr(all="raise")), as in ``run``."""
        if x.dtype != dtype or not x.flags.c_contiguous:
            self._check_copy(x, dtype, name)
        if self.on_gpu or x.dtype == dtype:
            return self.xp.ascontiguousarray(x.astype(dtype, copy=False))
        with np.errstate(all="ignore"):
            return np.ascontiguousarray(x.astype(dtype))

    def _converted(self, original, placed):
        """placed; a call being recorded for replay learns when it is a copy of original."""
        if recording.recording() and (not backend.is_cupy_array(original) or placed.data.ptr != original.data.ptr):
            recording.other_work("an input was converted")
        return placed

    def output(self, name, out, shape, dtype, canonical_shape, edge=False):
        """(array handed to the backend, array returned to the caller)."""
        if out is not None:
            _validate.out_array(name, out, shape, dtype, self.on_gpu)
        else:  # NumPy's and CuPy's MemoryErrors name no output; an overcommitted one is killed when written
            nbytes = math.prod(shape) * np.dtype(dtype).itemsize
            backend.check_memory(f"the output {name} of shape {tuple(shape)}", nbytes, self.on_gpu)
        work, result = self._output(out, shape, dtype, canonical_shape, edge)
        if not self.on_gpu:
            self._outputs.append(work)
        return work, result

    def _output(self, out, shape, dtype, canonical_shape, edge):
        if edge and self.edge_order is not None:
            recording.other_work("edge outputs are scattered into a matrix's order")
            result = out if out is not None else self.xp.empty(shape, dtype)
            work = self.xp.empty(canonical_shape, dtype)
            self._scatter.append((work, result))
            return work, result
        if out is not None:
            if not any(backend.may_share_memory(out, x) for x in self._inputs):
                return out.reshape(canonical_shape), out
            recording.other_work("out shares memory with an input")
            work = self.xp.empty(canonical_shape, dtype)
            self._copies.append((work, out))
            return work, out
        result = self.xp.empty(shape, dtype)
        if self.on_gpu and recording.recording():
            recording.note_allocation(result)
        return result.reshape(canonical_shape), result

    def _finish(self):
        """Scatter edge outputs back into the matrix's stored order; copy the results of an out=
        that shares memory with an input into it."""
        for work, result in self._scatter:
            result.reshape(work.shape)[self.edge_order] = work
        for work, out in self._copies:
            out.reshape(work.shape)[...] = work
        self._scatter.clear()
        self._copies.clear()
        self._outputs.clear()

"""Replay: an op call on the GPU that repeats an earlier one costs its launches, little more.

A GPU call of an op on a given CSRGraph does the same work every time its arguments have
the same description: the op, the types, dtypes, shapes, strides and alignments of the
arrays, the values of the scalars, the current device. Once validated and run, such a call
is recorded: the kernels it launched (grids, argument tuples) and the arrays it allocated
(outputs and scratch). A later call with the same description skips validation, placement and
the launchers' choices: it allocates fresh memory for the recorded arrays (one block for the
arrays it returns and a small scratch, another for a large scratch), writes the addresses of
the caller's arrays and the new ones into the kernels' argument slots where the recorded call
had its own, and launches the same kernels in the same order on the current stream. The results are those of
the full call, bit for bit, because it is the same work.

A call is recorded at its second occurrence (its first may build the graph's derived data,
which later calls only read) and only when all of its GPU work went through
kernels.launch and its allocations through kernels.scratch / Placement.output: a call that
converts an input (another dtype, a non-contiguous layout), gathers a matrix's edges into
graph order or computes with CuPy array operations reports that (``other_work``) and keeps
the full path. Calls with a NumPy array, an array of size 0, two arguments starting at one
address, an out= overlapping another argument or an argument of any other kind are never
recorded (nor replayed). The graph holds the records: they die
with it, and a graph's arrays must not change after it is built (the CSRGraph contract).
"""

import ctypes
import functools
import operator
import threading
from typing import NamedTuple

import numpy as np

from cupy_csrattn import backend
from cupy_csrattn.gpu import cuda_graph, recording

try:  # CuPy's binding of the driver API: cuLaunchKernel, cuCtxGetCurrent
    from cupy_backends.cuda.api import driver as _driver_api
except ImportError:  # pragma: no cover - without CuPy nothing is replayed
    _driver_api = None

ENABLED = True  # tests switch replay off to compare with the full path
MAX_RECORDS_PER_GRAPH = 256

_SCALARS = (int, float, bool, str)
NO_CONTEXT = object()  # what a replay returns, having done nothing, on a thread with no current context
_IN, _NEW = 0, 1  # sources of an array argument: a caller's array, a new allocation


def _describe(function, args, kwargs):
    """(key, arrays, addresses) of a call of ``function``, or three Nones when it is not
    recordable: the key names everything the call's work depends on, the op first (two ops may
    take arguments of one description: spmm and attention_aggregate both take (E, H) and
    (N, H, F) arrays); arrays are the caller's, in argument order, and addresses their data's."""
    cupy = backend.cupy
    ndarray = cupy.ndarray
    key, arrays, addresses = [function, tuple(kwargs), None], [], []  # None: the device, filled last
    for value in (*args[1:], *kwargs.values()) if kwargs else args[1:]:
        kind = type(value)
        if kind is ndarray:
            memory = value.data
            address = memory.ptr
            if address in addresses or not value.size:
                return None, None, None
            addresses.append(address)
            arrays.append(value)
            key.append((value.dtype, value.shape, value.strides, address & 15, memory.device_id))
        elif value is None or kind in _SCALARS:  # a float zero by its bits: -0.0 == 0.0, but scale=-0.0 gives -0.0s
            key.append((kind, value.hex() if kind is float and not value else value))
        else:
            return None, None, None
    if not arrays:  # a call with no CuPy array does not run on the GPU
        return None, None, None
    out = kwargs.get("out") if kwargs else None  # one overlapping an input is computed apart (ops/placement.py)
    if type(out) is ndarray and any(a is not out and backend.may_share_memory(out, a) for a in arrays):
        return None, None, None
    key[2] = cupy.cuda.runtime.getDevice()
    return tuple(key), arrays, addresses


def _source(array, arrays, allocations):
    """(source, index, byte offset) of the caller's array or allocation holding ``array``'s
    memory; None when none does, "ambiguous" when several do."""
    pointer, found = array.data.ptr, []
    for source, candidates in ((_IN, arrays), (_NEW, allocations)):
        for index, candidate in enumerate(candidates):
            begin = candidate.data.ptr
            if begin <= pointer < begin + candidate.nbytes:
                found.append((source, index, pointer - begin))
    if len(found) > 1:
        return "ambiguous"
    return found[0] if found else None


class _NotReplayable(Exception):
    pass


class _Slot(NamedTuple):
    """Where a result comes from: a caller's array (_IN, ``shape`` None) or a new allocation
    (_NEW), returned with ``shape``."""

    source: int
    index: int
    shape: tuple


class Replay:
    """The recorded work of one call, repeated with a later call's arrays.

    Each recorded kernel keeps its arguments in 8-byte slots (cuda_graph.argument_slots): the
    graph's arrays and the scalars are written once, the call's own arrays (the caller's and
    the new allocations) per call. A record of several kernels launches them as one CUDA graph
    (gpu/cuda_graph.py), the kernels of one ``independent`` block free to run side by side;
    otherwise (one kernel, no driver library, a stream being captured, a graph the driver
    refused) each kernel goes to cuLaunchKernel through CuPy's driver binding with its slots,
    which costs the host a fraction of a launch through CuPy's Function (that converts every
    argument on every call). The arrays a call returns share one allocation, freed when the
    last of them is: one allocation and an array header per result cost the host less than an
    allocation per array. A thread with no current CUDA context (the driver API needs one)
    gets NO_CONTEXT: its call takes the full path, which makes one current.
    """

    def __init__(self, collected, arrays, result):
        cupy = backend.cupy
        # (a kernel's slot values, position, index, byte offset) per slot holding a call's own
        # array: index into [*the caller's arrays, *the allocations] (the address list a replay builds)
        self._writes = []
        # per kernel: the cuLaunchKernel arguments before the stream, its kernelParams, the slots keeping them alive
        self._launches = []
        self._graph_arrays = []  # keeps the arrays whose addresses the slots hold alive
        graph_launches = []
        for kernel, grid, block, args, stage in collected.launches:
            slots, initial = [], []
            for position, value in enumerate(args):
                if type(value) is cupy.ndarray:
                    source = _source(value, arrays, collected.allocations)
                    if source == "ambiguous":
                        raise _NotReplayable("an argument's memory lies in two arrays")
                    if source is None:  # the graph's own data, the same in every call
                        self._graph_arrays.append(value)
                        initial.append(value.data.ptr)
                        continue
                    origin, index, offset = source
                    slots.append((position, index if origin == _IN else len(arrays) + index, offset))
                    initial.append(0)
                elif isinstance(value, np.generic):
                    initial.append(cuda_graph.slot_value(value))
                else:
                    raise _NotReplayable(f"a kernel argument of type {type(value).__name__}")
            grid, block = (*grid, 1, 1)[:3], (*block, 1, 1)[:3]
            values, pointers = argument_slots = cuda_graph.argument_slots(initial)
            function = kernel.kernel.ptr
            self._writes += [(values, *slot) for slot in slots]
            self._launches.append(((function, *grid, *block, 0), ctypes.addressof(pointers), argument_slots))
            graph_launches.append((function, grid, block, argument_slots, stage))
        self.result = self._template(result, arrays, collected.allocations)
        self._pick = _picker(self.result, len(arrays))
        self._place_allocations(collected.allocations)
        self._graph = _kernel_graph(graph_launches)
        self._single = None  # (launch head, params) of a record that _single_kernel_lone serves
        if len(self._launches) == 1 and self._lone is not None and self.result == _Slot(_NEW, 0, self._lone[0]):
            self._single = self._launches[0][:2]
        self._lock = threading.Lock()  # the argument slots serve one call at a time

    def _place_allocations(self, allocations):
        """Where a replay puts each recorded allocation. The arrays the call returns share one
        block of memory, each at an offset aligned as a fresh allocation's start is for any
        vector load. Its scratch joins that block when it is small (SCRATCH_WITH_RESULTS),
        else takes a block of its own, freed when the call returns so that no result holds it.
        A returned array alone, with no scratch, is allocated as itself.
        ``_blocks``: (bytes, members) per block, members (index, offset, shape to return or
        None, dtype); ``_lone``: (shape, dtype) of that lone array, else None."""
        returned = {}

        def collect(template):
            if isinstance(template, _Slot):
                if template.source == _NEW:
                    if template.index in returned:  # a replay makes one array of each allocation
                        raise _NotReplayable("an allocation is returned twice")
                    returned[template.index] = template.shape
            elif template is not None:
                for part in template:
                    collect(part)

        collect(self.result)
        results = [index for index in range(len(allocations)) if index in returned]
        scratch = [index for index in range(len(allocations)) if index not in returned]
        scratch_bytes = sum(_aligned(allocations[index].nbytes) for index in scratch)
        if results and scratch_bytes <= SCRATCH_WITH_RESULTS:
            groups = [results + scratch]
        else:
            groups = [group for group in (results, scratch) if group]
        self._blocks = []
        for group in groups:
            members, size = [], 0
            for index in group:
                members.append((index, size, returned.get(index), allocations[index].dtype))
                size += _aligned(allocations[index].nbytes)
            self._blocks.append((size, members))
        self._num_allocations = len(allocations)
        self._lone = None
        if len(self._blocks) == 1 and len(self._blocks[0][1]) == 1 and results:
            _, _, shape, dtype = self._blocks[0][1][0]
            self._lone = shape, dtype

    def _allocate(self):
        """(memory, addresses, arrays) of a replay: the blocks of memory it allocated (to be held
        until its kernels are launched), the address of each allocation and the array of each
        returned one (None for scratch), by allocation index."""
        cupy = backend.cupy
        ndarray, alloc = cupy.ndarray, cupy.cuda.alloc
        memory, addresses, arrays = [], [0] * self._num_allocations, [None] * self._num_allocations
        for size, members in self._blocks:
            block = alloc(size)
            memory.append(block)
            start = block.ptr
            for index, offset, shape, dtype in members:
                addresses[index] = start + offset
                if shape is not None:
                    arrays[index] = ndarray(shape, dtype, block + offset if offset else block)
        return memory, addresses, arrays

    @staticmethod
    def _template(result, arrays, allocations):
        if result is None:
            return None
        if isinstance(result, tuple):
            return tuple(Replay._template(r, arrays, allocations) for r in result)
        for index, array in enumerate(arrays):
            if result is array:
                return _Slot(_IN, index, None)
        for index, array in enumerate(allocations):
            if type(result) is type(array) and result.data.ptr == array.data.ptr and result.nbytes == array.nbytes:
                return _Slot(_NEW, index, result.shape)
        raise _NotReplayable("a result is neither an argument nor an allocation")

    def __call__(self, arrays, addresses):
        """The call's results (``arrays``: the caller's, ``addresses``: their data's, a list
        this call extends), or NO_CONTEXT (nothing done) where this thread has no current
        CUDA context."""
        if not _driver_api.ctxGetCurrent():
            return NO_CONTEXT
        if self._single is not None:
            return self._single_kernel_lone(addresses)
        cupy = backend.cupy
        # new: the address of each allocation; memory: the blocks holding them, held until the
        # kernels are launched (freed earlier, the pool could hand them to another array)
        if self._lone is not None:  # most ops: one returned array, no scratch
            array = cupy.ndarray(*self._lone)
            memory, new, returned = None, [array.data.ptr], [array]
        else:
            memory, new, returned = self._allocate()
        stream = cupy.cuda.get_current_stream()
        where = addresses + new  # the address of each array, the caller's then the allocations'
        with self._lock:
            for values, position, index, offset in self._writes:
                values[position] = where[index] + offset
            graph = self._graph
            if graph is not None and not stream.is_capturing():
                if graph.launch(stream.ptr):
                    return self._pick([*arrays, *returned, None])
                self._graph = None  # refused by the driver: kernel by kernel from now on
            launch_kernel, stream_ptr = _driver_api.launchKernel, stream.ptr
            for head, params, _ in self._launches:
                launch_kernel(*head, stream_ptr, params, 0)
        return self._pick([*arrays, *returned, None])

    def _single_kernel_lone(self, addresses):
        """The commonest record, called as __call__: one kernel, one new array that is the
        call's result, no scratch."""
        cupy = backend.cupy
        array = cupy.ndarray(*self._lone)
        addresses.append(array.data.ptr)
        head, params = self._single
        with self._lock:
            for values, position, index, offset in self._writes:
                values[position] = addresses[index] + offset
            _driver_api.launchKernel(*head, cupy.cuda.get_current_stream().ptr, params, 0)
        return array


def _picker(template, num_arrays):
    """fn(values) -> a call's results as ``template`` places them, values being the list
    [*the caller's arrays, *the allocations' arrays (None for scratch), None]: one
    itemgetter for a result or a flat tuple of them, the commonest shapes."""

    def position(slot):
        if slot is None:
            return -1
        return slot.index if slot.source == _IN else num_arrays + slot.index

    if template is None or isinstance(template, _Slot):
        return operator.itemgetter(position(template))
    if len(template) > 1 and all(part is None or isinstance(part, _Slot) for part in template):
        return operator.itemgetter(*map(position, template))
    parts = [_picker(part, num_arrays) for part in template]
    return lambda values: tuple([part(values) for part in parts])


# Offsets of a replay's allocations in its blocks: CuPy's memory pool aligns each allocation
# to 512 bytes, and the launchers chose vector loads (up to 16 bytes) for the recorded ones.
ALIGNMENT = 256

# A call's scratch of at most this many bytes shares the block of the arrays it returns: a
# pool allocation and its free cost the host about a third of a bare kernel launch, and the
# calls whose host time matters (their GPU work is short) have small scratch. The results of
# such a call hold at most this much more memory.
SCRATCH_WITH_RESULTS = 64 * 1024


def _aligned(nbytes):
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


# Records of fewer kernels launch them directly: a graph costs a launch of its own. Measured on
# the 384-row graph when direct launches went through CuPy's Function (a little dearer than
# cuLaunchKernel on slots, about 1 us a call), a one-kernel graph saved host time where a
# call's addresses repeat (0.86-0.96x the direct launch's) and cost more where its outputs
# move from call to call, setting the node's parameters through ctypes on every call (the
# fused forwards, their outputs kept: 0.95-1.11x; benchmarks/results/host_37cbadf_611e7ce_*).
GRAPH_MIN_LAUNCHES = 2


def _kernel_graph(launches):
    """A KernelGraph of ``launches`` where it pays and the driver builds it, else None."""
    functions = cuda_graph.driver()
    if functions is None or len(launches) < GRAPH_MIN_LAUNCHES:
        return None
    try:
        return cuda_graph.KernelGraph(functions, launches)
    except cuda_graph.GraphError:
        return None


RECORDS = "replay records"  # the graph's cache entry holding its records


def _records(graph):
    return graph.cached(RECORDS, dict)


def replayed(function):
    """``function`` (a public op taking the graph first), replaying its recorded GPU calls."""
    thread = recording.thread_state()

    @functools.wraps(function)
    def call(*args, **kwargs):
        # The checks a replayed call makes read attributes, not call functions: on the 384-row
        # graphs each call of a Python function costs the host a few percent of a launch.
        if not ENABLED or backend.cupy is None or thread.recorder is not None or not args:
            return function(*args, **kwargs)
        cached = getattr(args[0], "cached", None)
        if cached is None:
            return function(*args, **kwargs)
        key, arrays, addresses = _describe(function, args, kwargs)
        if key is None:
            return function(*args, **kwargs)
        records = cached(RECORDS, dict)
        record = records.get(key, 0)
        if type(record) is Replay:
            result = record(arrays, addresses)
            return function(*args, **kwargs) if result is NO_CONTEXT else result
        if record is None or len(records) >= MAX_RECORDS_PER_GRAPH:
            return function(*args, **kwargs)
        if record == 0:  # first occurrence: may build the graph's derived data
            result = function(*args, **kwargs)
            records[key] = 1
            return result
        return _record(function, args, kwargs, records, key, arrays)

    return call


def _record(function, args, kwargs, records, key, arrays):
    with recording.recorder() as collected:
        result = function(*args, **kwargs)
    if collected.reason is not None or not collected.launches:
        records[key] = None
        return result
    try:
        records[key] = Replay(collected, arrays, result)
    except _NotReplayable:
        records[key] = None
    return result

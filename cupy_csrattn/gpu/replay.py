"""Replay: an op call on the GPU that repeats an earlier one costs its launches, little more.

A GPU call of an op on a given CSRGraph does the same work every time its arguments have
the same description: the op, the types, dtypes, shapes, strides and alignments of the
arrays, the values of the scalars, the current device. Once validated and run, such a call
is recorded: the kernels it launched (grids, argument tuples) and the arrays it allocated
(outputs and scratch). A later call with the same description skips validation, placement and
the launchers' choices: it takes memory for the recorded arrays (that of the record's last
replay where the caller holds none of its results any more, else fresh memory:
gpu/replay_results.py), writes the addresses of the caller's arrays and the new ones into
the kernels' argument slots where the recorded call had its own, and launches the same
kernels in the same order on the current stream. The results are those of the full call,
bit for bit, because it is the same work.

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

import numpy as np

from cupy_csrattn import backend
from cupy_csrattn.gpu import cuda_graph, recording, replay_results
from cupy_csrattn.gpu.replay_results import IN, NEW, NotReplayable, Slot

try:  # CuPy's binding of the driver API: cuLaunchKernel, cuCtxGetCurrent
    from cupy_backends.cuda.api import driver as _driver_api
except ImportError:  # pragma: no cover - without CuPy nothing is replayed
    _driver_api = None

ENABLED = True  # tests switch replay off to compare with the full path
MAX_RECORDS_PER_GRAPH = 256

_SCALARS = (int, float, bool, str)
_SIZE = operator.attrgetter("size")
NO_CONTEXT = object()  # what a replay returns, having done nothing, on a thread with no current context


def _describe(function, args, kwargs):
    """(key, arrays, addresses, out_at) of a call of ``function``, or four Nones when it is not
    recordable: the key names everything the call's work depends on, the op first (two ops may
    take arguments of one description: spmm and attention_aggregate both take (E, H) and
    (N, H, F) arrays); arrays are the caller's, in argument order, addresses their data's, and
    out_at the index of out= among them (None without one). An array of size 0 is not tested
    here: its shape in the key tells, and ``replayed`` tests it before a call is recorded."""
    cupy = backend.cupy
    ndarray = cupy.ndarray
    key, arrays, addresses = [function, tuple(kwargs), None], [], []  # None: the device, filled last
    out, out_at = kwargs.get("out") if kwargs else None, None
    for value in [*args[1:], *kwargs.values()] if kwargs else args[1:]:
        kind = type(value)
        if kind is ndarray:
            memory = value.data
            address = memory.ptr
            if address in addresses:
                return None, None, None, None
            if value is out:
                out_at = len(arrays)
            addresses.append(address)
            arrays.append(value)
            key.append((value.dtype, value.shape, value.strides, address & 15, memory.device_id))
        elif value is None or kind in _SCALARS:  # a float zero by its bits: -0.0 == 0.0, but scale=-0.0 gives -0.0s
            key.append((kind, value.hex() if kind is float and not value else value))
        else:
            return None, None, None, None
    if not arrays:  # a call with no CuPy array does not run on the GPU
        return None, None, None, None
    key[2] = cupy.cuda.runtime.getDevice()
    return tuple(key), arrays, addresses, out_at


def _extents(arrays):
    """Each (non-empty) array's [low, high) bytes as offsets from its address: the bounds
    backend.may_share_memory compares. The description fixes each array's shape and strides,
    so every call of one key has the same."""
    return [tuple(bound - a.data.ptr for bound in backend.byte_bounds(a)) for a in arrays]


def _out_overlaps(addresses, extents, out_at):
    """Whether out= (the array at ``out_at``) of a call whose arrays are at ``addresses``, with
    these extents, overlaps another of them: such a call is computed apart
    (ops/placement.py), neither recorded nor replayed."""
    low, high = extents[out_at]
    first, last = addresses[out_at] + low, addresses[out_at] + high
    for index, (low, high) in enumerate(extents):
        if index != out_at and addresses[index] + low < last and first < addresses[index] + high:
            return True
    return False


def _source(array, arrays, allocations):
    """(source, index, byte offset) of the caller's array or allocation holding ``array``'s
    memory; None when none does, "ambiguous" when several do."""
    pointer, found = array.data.ptr, []
    for source, candidates in ((IN, arrays), (NEW, allocations)):
        for index, candidate in enumerate(candidates):
            begin = candidate.data.ptr
            if begin <= pointer < begin + candidate.nbytes:
                found.append((source, index, pointer - begin))
    if len(found) > 1:
        return "ambiguous"
    return found[0] if found else None


class Replay:
    """The recorded work of one call, repeated with a later call's arrays.

    Each recorded kernel keeps its arguments in 8-byte slots (cuda_graph.argument_slots): the
    graph's arrays and the scalars are written once, the call's own arrays (the caller's and
    the new allocations) where their addresses differ from the last replay's. A record of
    several kernels launches them as one CUDA graph (gpu/cuda_graph.py), the kernels of one
    ``independent`` block free to run side by side; a kept arena taken again gets a graph of
    its own, whose nodes keep its addresses, so that a caller whose results take turns
    between arenas sets no node parameters. Otherwise (one kernel, no driver library, a
    stream being captured, a graph the driver refused) each kernel goes to cuLaunchKernel
    through CuPy's driver binding with its slots, which costs the host a fraction of a launch
    through CuPy's Function (that converts every argument on every call). The memory a
    replay needs comes from gpu/replay_results.py: the memory and result arrays of a kept
    replay whose results the caller no longer refers to, else new memory (one block for the
    results and a small scratch). A thread with no current CUDA context (the driver API
    needs one) gets NO_CONTEXT: its call takes the full path, which makes one current.
    """

    def __init__(self, collected, arrays, result, out_at=None):
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
                        raise NotReplayable("an argument's memory lies in two arrays")
                    if source is None:  # the graph's own data, the same in every call
                        self._graph_arrays.append(value)
                        initial.append(value.data.ptr)
                        continue
                    origin, index, offset = source
                    slots.append((position, index if origin == IN else len(arrays) + index, offset))
                    initial.append(0)
                elif isinstance(value, np.generic):
                    initial.append(cuda_graph.slot_value(value))
                else:
                    raise NotReplayable(f"a kernel argument of type {type(value).__name__}")
            grid, block = (*grid, 1, 1)[:3], (*block, 1, 1)[:3]
            values, pointers = argument_slots = cuda_graph.argument_slots(initial)
            function = kernel.kernel.ptr
            self._writes += [(values, *slot) for slot in slots]
            self._launches.append(((function, *grid, *block, 0), ctypes.addressof(pointers), argument_slots))
            graph_launches.append((function, grid, block, argument_slots, stage))
        self.result = replay_results.template(result, arrays, collected.allocations)
        self._pick = replay_results.picker(self.result, len(arrays))
        self._pick_new = replay_results.new_picker(self.result)  # results all new arrays: from the arena's alone
        self._layout = replay_results.Layout(self.result, collected.allocations)
        self._graph = _kernel_graph(graph_launches)
        self._graph_launches = graph_launches if self._graph is not None else None  # for the arenas' own graphs
        lone = self._layout.lone
        # one kernel whose one new array is the call's result: launched and returned directly
        self._single = len(self._launches) == 1 and lone is not None and self.result == Slot(NEW, 0, lone[0])
        self._arenas = []  # the memory of the last replays, for the next ones (replay_results.Arena), oldest first
        self._misses = 0  # replays in a row that found every kept arena held
        self._paused = 0  # replays left that neither look at nor keep arenas
        self._slots_at = None  # the addresses the slots hold: [*the caller's arrays', *the allocations']
        self._graph_at = None  # the addresses the graph's nodes were last given
        self._lock = threading.Lock()  # the argument slots and the arena serve one call at a time
        # Whether a later call's out= overlaps another of its arrays is a test of its addresses
        # alone: every call of the key has these extents, and out= at the same index.
        self._out_at = out_at
        self._extents = _extents(arrays)
        self._apart = None  # the addresses last found apart: a caller reusing its buffers repeats them

    def out_overlaps(self, addresses):
        """Whether the out= of a call with these ``addresses`` overlaps another of its arrays
        (False for calls without one)."""
        if self._out_at is None or addresses == self._apart:
            return False
        if _out_overlaps(addresses, self._extents, self._out_at):
            return True
        self._apart = addresses
        return False

    def _memory(self, stream, capturing):
        """The Arena serving a replay on ``stream``: the least recently used kept one that is
        free (the one a caller who holds results for a few calls has let go of first), else
        a new one, kept in place of the least recently used unless the stream is being
        captured (the captured graph's launches would write it) or the record keeps none
        (Layout.kept: HELD_BYTES). Where the caller holds results longer than the kept
        arenas last (a list of them), as many replays in a row finding none free pause the
        looking and keeping for PAUSE_CALLS replays, which then cost what a new allocation does."""
        arenas, layout = self._arenas, self._layout
        if layout.num_allocations == 0:  # its results are the caller's arrays (out=), no scratch
            return replay_results.NO_MEMORY
        keep = layout.kept and not capturing
        if keep and self._paused:
            self._paused -= 1
            keep = False
        if keep:
            for arena in arenas:
                if arena.free(stream):
                    if arena is not arenas[-1]:
                        arenas.remove(arena)
                        arenas.append(arena)
                    self._misses = 0
                    if arena.graph is None and self._graph is not None:  # taken again: worth a graph of its own
                        arena.graph = _kernel_graph(self._graph_launches) or False
                    return arena
            if len(arenas) == layout.kept:
                self._misses += 1
                if self._misses == layout.kept:
                    self._misses, self._paused = 0, PAUSE_CALLS
        arena = layout.allocate(stream)
        if keep:
            arena.watch()
            if len(arenas) == layout.kept:
                del arenas[0]
            arenas.append(arena)
        return arena

    def __call__(self, arrays, addresses):
        """The call's results (``arrays``: the caller's, ``addresses``: their data's), or
        NO_CONTEXT (nothing done) where this thread has no current CUDA context."""
        if not _driver_api.ctxGetCurrent():
            return NO_CONTEXT
        stream = backend.cupy.cuda.get_current_stream()
        stream_ptr = stream.ptr
        capturing = stream_ptr != 0 and stream.is_capturing()  # the legacy default stream is never captured
        # acquire and release, not a with block: that costs the host about 0.1 us more a call
        lock = self._lock
        lock.acquire()
        try:
            # arena: held until the kernels are launched (freed earlier, the pool could hand its
            # memory to another array)
            arena = self._memory(stream_ptr, capturing)
            where = addresses + arena.addresses  # the address of each array, the caller's then the allocations'
            if where != self._slots_at:
                for values, position, index, offset in self._writes:
                    values[position] = where[index] + offset
                self._slots_at = where
            if self._single:
                head, params, _ = self._launches[0]
                _driver_api.launchKernel(*head, stream_ptr, params, 0)
                return arena.arrays[0]
            launched = False
            if self._graph is not None and not capturing:
                own = arena.graph
                if own:  # a kept arena's own graph, its nodes holding its addresses
                    launched = own.launch(stream_ptr, where != arena.graph_at)
                    if launched:
                        arena.graph_at = where
                else:
                    launched = self._graph.launch(stream_ptr, where != self._graph_at)
                    if launched:
                        self._graph_at = where
                if not launched:
                    self._graph = None  # refused by the driver: kernel by kernel from now on
            if not launched:
                launch_kernel = _driver_api.launchKernel
                for head, params, _ in self._launches:
                    launch_kernel(*head, stream_ptr, params, 0)
        finally:
            lock.release()
        pick_new = self._pick_new
        return pick_new(arena.arrays) if pick_new is not None else self._pick([*arrays, *arena.arrays, None])


# Replays that neither look at nor keep arenas once as many in a row as a record keeps found
# all of them held: a caller keeping every result pays a free check per kept arena per call
# only once every this many calls.
PAUSE_CALLS = 64

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
        key, arrays, addresses, out_at = _describe(function, args, kwargs)
        if key is None:
            return function(*args, **kwargs)
        records = cached(RECORDS, dict)
        record = records.get(key, 0)
        if type(record) is Replay:
            if out_at is not None and record.out_overlaps(addresses):
                return function(*args, **kwargs)
            result = record(arrays, addresses)
            return function(*args, **kwargs) if result is NO_CONTEXT else result
        if record is None or len(records) >= MAX_RECORDS_PER_GRAPH or not all(map(_SIZE, arrays)):
            return function(*args, **kwargs)
        if out_at is not None and _out_overlaps(addresses, _extents(arrays), out_at):
            return function(*args, **kwargs)
        if record == 0:  # first occurrence: may build the graph's derived data
            result = function(*args, **kwargs)
            records[key] = 1
            return result
        return _record(function, args, kwargs, records, key, arrays, out_at)

    return call


def _record(function, args, kwargs, records, key, arrays, out_at):
    with recording.recorder() as collected:
        result = function(*args, **kwargs)
    if collected.reason is not None or not collected.launches:
        records[key] = None
        return result
    try:
        records[key] = Replay(collected, arrays, result, out_at)
    except NotReplayable:
        records[key] = None
    return result

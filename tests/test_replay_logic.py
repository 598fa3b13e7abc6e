"""gpu/replay.py's logic without a GPU: a stand-in for CuPy (its arrays are NumPy buffers at
made-up addresses, its kernels Python functions of their argument lists) runs a small op
through the replay wrapper. The first call runs in full, the second is recorded, later ones
replay with their own arrays, out= and scalars; a recording belongs to its thread. The GPU
suite (tests/test_replay.py) checks the same on every real op."""

import collections
import ctypes
import threading
import weakref
from types import SimpleNamespace

import numpy as np
import pytest

from cupy_csrattn import backend
from cupy_csrattn.gpu import cuda_graph, recording, replay, replay_results

BLOCKS = {}  # start address -> the bytes of a stand-in allocation


def _allocate(nbytes):
    """The address of a new stand-in allocation of ``nbytes``."""
    address = FakeArray.next_address[0]
    FakeArray.next_address[0] += 256 * (1 + nbytes // 256)
    BLOCKS[address] = np.zeros(max(nbytes, 1), np.uint8)
    return address


def _block_at(address):
    """(start address, bytes) of the stand-in allocation holding ``address``."""
    for start, block in BLOCKS.items():
        if start <= address < start + len(block):
            return start, block
    raise KeyError(address)


class FakeMemory:
    """Enough of cupy.cuda.MemoryPointer: an address, a device, an offset added, the
    allocation it points into (``mem``, which every pointer into it refers to)."""

    def __init__(self, ptr, mem=None):
        self.ptr = ptr
        self.device_id = 0
        self.mem = mem if mem is not None else SimpleNamespace(ptr=ptr)

    def __add__(self, offset):
        return FakeMemory(self.ptr + offset, self.mem)


class FakeArray:
    """Enough of cupy.ndarray for replay: shape, dtype, strides, sizes and an address; its
    values lie in a stand-in allocation (its own, or ``memptr``'s)."""

    next_address = [1 << 20]

    def __init__(self, shape, dtype, memptr=None):
        self.shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        self.dtype = np.dtype(dtype)
        self.size = int(np.prod(self.shape))
        self.nbytes = self.size * self.dtype.itemsize
        self.strides = tuple(int(np.prod(self.shape[i + 1 :])) * self.dtype.itemsize for i in range(len(self.shape)))
        address = _allocate(self.nbytes) if memptr is None else memptr.ptr
        start, block = _block_at(address)
        self.values = block[address - start : address - start + self.nbytes].view(self.dtype).reshape(self.shape)
        self.data = FakeMemory(address) if memptr is None else memptr

    def reshape(self, *shape):
        return FakeArray(shape[0] if len(shape) == 1 else shape, self.dtype, memptr=self.data)


def _array(value):
    """The six float32 values a kernel argument points to: an array's, or at an address."""
    if isinstance(value, FakeArray):
        return value.values.reshape(-1)
    address = ctypes.c_int64.from_address(value.ptr).value
    start, block = _block_at(address)
    return block[address - start : address - start + 24].view(np.float32)


def _float(value):
    """A float32 kernel argument: a NumPy scalar, or a value held for a replay."""
    return float(value) if isinstance(value, np.generic) else ctypes.c_float.from_address(value.ptr).value


class FakeKernel:
    """out = scale * x + table (table: the graph's own data), over argument lists."""

    ptr = 1  # its CUfunction handle, for FakeDriver

    def __init__(self):
        self.kernel = self  # the CUDA function a replay launches

    def __call__(self, grid, block, args):
        x, table, out, scale = args
        _array(out)[:] = _float(scale) * _array(x) + _array(table)


KERNEL = FakeKernel()
KERNELS = {FakeKernel.ptr: KERNEL}  # CUfunction handle -> kernel, for the stand-in driver
TABLE = FakeArray((6,), np.float32)
TABLE.values[:] = np.arange(6)
FULL_CALLS = []


def scaled_plus_table(graph, x, *, scale=2.0, out=None):
    """A stand-in op, written as a launcher is: allocation and launch reported to the recorder."""
    FULL_CALLS.append(1)
    if out is None:
        out = FakeArray(x.shape, x.dtype)
        if recording.recording():
            recording.note_allocation(out)
    args = (x, TABLE, out, np.float32(scale))
    KERNEL((1,), (32,), args)
    if recording.recording():
        recording.note_launch(KERNEL, (1,), (32,), args)
    return out


class FakeGraph:
    def __init__(self):
        self.cache = {}

    def cached(self, key, build):
        if key not in self.cache:
            self.cache[key] = build()
        return self.cache[key]


class FakeStream:
    ptr = 0

    @staticmethod
    def is_capturing():
        return False


def _run(function, grid, block, slot_addresses):
    """Run kernel ``function`` on the 8-byte argument slots at ``slot_addresses``."""
    KERNELS[function]((grid,), (block,), [SimpleNamespace(ptr=address) for address in slot_addresses])


def _launch_kernel(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
    """cuLaunchKernel: params is the address of the kernel's array of slot addresses (four here)."""
    LAUNCHES.append(function)
    _run(function, gx, bx, list((ctypes.c_void_p * 4).from_address(params)))


LAUNCHES = []  # the kernels launched through the stand-in cuLaunchKernel


@pytest.fixture
def public(monkeypatch):
    runtime = SimpleNamespace(getDevice=lambda: 0)
    cuda = SimpleNamespace(runtime=runtime, get_current_stream=FakeStream, alloc=lambda n: FakeMemory(_allocate(n)))
    fake_cupy = SimpleNamespace(ndarray=FakeArray, cuda=cuda)
    monkeypatch.setattr(backend, "cupy", fake_cupy)
    monkeypatch.setattr(replay, "_driver_api", SimpleNamespace(ctxGetCurrent=lambda: 1, launchKernel=_launch_kernel))
    monkeypatch.setattr(cuda_graph, "driver", lambda: None)  # kernel by kernel unless a test sets a driver
    FULL_CALLS.clear()
    LAUNCHES.clear()
    return replay.replayed(scaled_plus_table)


def _x(seed):
    x = FakeArray((6,), np.float32)
    x.values[:] = np.random.default_rng(seed).standard_normal(6)
    return x


def test_later_calls_replay_with_their_own_arrays(public):
    graph, results = FakeGraph(), []
    for seed in range(5):
        x = _x(seed)
        out = public(graph, x)
        np.testing.assert_array_equal(out.values, np.float32(2.0) * x.values + TABLE.values)
        assert all(out.data.ptr != earlier.data.ptr for earlier in results), "a replay allocates its outputs"
        results.append(out)
    assert len(FULL_CALLS) == 2  # the first call and the recorded one; three replays
    assert [type(r) for r in graph.cache["replay records"].values()] == [replay.Replay]


def test_replays_launch_through_the_driver_binding(public):
    """Replays launch their kernel through cuLaunchKernel on its argument slots, one launch per
    call; the full calls launch it themselves."""
    graph = FakeGraph()
    for seed in range(5):
        public(graph, _x(seed))
    assert len(FULL_CALLS) == 2 and LAUNCHES == [FakeKernel.ptr] * 3


def test_a_thread_without_a_current_context_takes_the_full_path(public, monkeypatch):
    """Where the driver reports no current context (cuLaunchKernel would fail) a recorded call
    runs in full, with the right results; once there is one, it replays again."""
    graph = FakeGraph()
    for seed in range(2):
        public(graph, _x(seed))
    monkeypatch.setattr(replay._driver_api, "ctxGetCurrent", lambda: 0)
    for seed in range(2, 4):
        x = _x(seed)
        np.testing.assert_array_equal(public(graph, x).values, np.float32(2.0) * x.values + TABLE.values)
    assert len(FULL_CALLS) == 4 and not LAUNCHES
    monkeypatch.setattr(replay._driver_api, "ctxGetCurrent", lambda: 1)
    x = _x(9)
    np.testing.assert_array_equal(public(graph, x).values, np.float32(2.0) * x.values + TABLE.values)
    assert len(FULL_CALLS) == 4 and len(LAUNCHES) == 1


def test_out_and_scalars(public):
    graph = FakeGraph()
    for seed in range(3):
        x, out = _x(seed), FakeArray((6,), np.float32)
        assert public(graph, x, out=out) is out
        np.testing.assert_array_equal(out.values, np.float32(2.0) * x.values + TABLE.values)
    assert len(FULL_CALLS) == 2
    x = _x(9)
    np.testing.assert_array_equal(public(graph, x, scale=3.0).values, np.float32(3.0) * x.values + TABLE.values)
    assert len(FULL_CALLS) == 3  # another scalar: another description, the full path


def test_the_same_array_twice_takes_the_full_path(public):
    graph, x = FakeGraph(), _x(1)
    for _ in range(3):
        public(graph, x, out=x)
    assert len(FULL_CALLS) == 3 and "replay records" not in graph.cache


def test_an_out_overlapping_an_input_is_neither_recorded_nor_replayed(public):
    """Recorded with separate arrays, a call of the same description whose out= overlaps x
    takes the full path (which computes such an out apart), every time."""
    graph = FakeGraph()
    for seed in range(3):
        public(graph, _x(seed), out=FakeArray((6,), np.float32))
    assert len(FULL_CALLS) == 2  # the third replayed
    block = FakeArray((16,), np.float32)
    block.values[:] = np.arange(16)
    x, out = FakeArray((6,), np.float32, memptr=block.data), FakeArray((6,), np.float32, memptr=block.data + 16)
    for _ in range(3):
        public(graph, x, out=out)
    assert len(FULL_CALLS) == 5
    x, out = FakeArray((6,), np.float32, memptr=block.data + 16), FakeArray((6,), np.float32, memptr=block.data)
    public(graph, x, out=out)  # out's last two elements are x's first
    assert len(FULL_CALLS) == 6
    x, out = FakeArray((6,), np.float32, memptr=block.data + 32), FakeArray((6,), np.float32, memptr=block.data)
    public(graph, x, out=out)  # apart in one block: replayed
    assert len(FULL_CALLS) == 6
    np.testing.assert_array_equal(out.values, np.float32(2.0) * x.values + TABLE.values)


def test_an_out_overlapping_an_input_first_is_not_counted_toward_a_record(public):
    """Calls whose out= overlaps x from the first take the full path and leave no record: the
    first two calls with separate arrays are the full call and the recorded one."""
    graph, block = FakeGraph(), FakeArray((12,), np.float32)
    x, out = FakeArray((6,), np.float32, memptr=block.data + 8), FakeArray((6,), np.float32, memptr=block.data)
    for _ in range(3):
        public(graph, x, out=out)
    assert len(FULL_CALLS) == 3 and not graph.cache.get("replay records")
    for seed in range(3):
        public(graph, _x(seed), out=FakeArray((6,), np.float32))
    assert len(FULL_CALLS) == 5


def scaled_minus_table(graph, x, *, scale=2.0, out=None):
    """A second stand-in op whose arguments have scaled_plus_table's description."""
    FULL_CALLS.append(1)
    out = FakeArray(x.shape, x.dtype)
    if recording.recording():
        recording.note_allocation(out)
    args = (x, TABLE, out, np.float32(-scale))
    KERNEL((1,), (32,), args)
    if recording.recording():
        recording.note_launch(KERNEL, (1,), (32,), args)
    return out


def test_ops_with_one_description_keep_their_own_records(public):
    """Two ops called alternately with arguments of one description: each replays its own work."""
    other = replay.replayed(scaled_minus_table)
    graph = FakeGraph()
    for seed in range(4):
        x = _x(seed)
        np.testing.assert_array_equal(public(graph, x).values, np.float32(2.0) * x.values + TABLE.values)
        np.testing.assert_array_equal(other(graph, x).values, np.float32(-2.0) * x.values + TABLE.values)
    assert len(FULL_CALLS) == 4  # two full calls of each op, then replays
    assert [type(r) for r in graph.cache["replay records"].values()] == [replay.Replay, replay.Replay]


def test_a_recording_belongs_to_its_thread():
    """Work reported by another thread while one records never enters its record."""
    inside, done = threading.Event(), threading.Event()
    seen = {}

    def other_thread():
        inside.wait(5)
        seen["recording"] = recording.recording()
        recording.other_work("another thread's CuPy operation")
        done.set()

    worker = threading.Thread(target=other_thread)
    worker.start()
    with recording.recorder() as collected:
        assert recording.recording()
        inside.set()
        assert done.wait(5)
    worker.join()
    assert seen == {"recording": False} and collected.reason is None
    assert not recording.recording()


class FakeDriver:
    """The CUDA driver functions of KernelGraphs, in Python: an executable takes a copy of the
    values its graph's nodes' slots hold, setting a node's parameters copies them again, and
    a launch runs each node's kernel (by its function handle) on the executable's copies,
    in node order. Nodes are numbered from 1 across graphs."""

    def __init__(self, refuse_launch=False):
        self.nodes, self.graph_launches, self.params_set = [], 0, 0
        self.dependencies = []  # per node, the (1-based) nodes it depends on
        self.graphs = {}  # graph handle -> its node numbers
        self.executables = {}  # executable handle -> {node number: the slot values it holds}
        self.launched = []  # the executable of each graph launch
        self.refuse_launch = refuse_launch
        self.refuse_build = False  # instantiation fails while set

    def functions(self):
        return {
            "GraphCreate": self._create,
            "GraphAddKernelNode": self._add,
            "GraphInstantiateWithFlags": self._instantiate,
            "GraphExecKernelNodeSetParams": self._set,
            "GraphLaunch": self._launch,
            "GraphExecDestroy": lambda executable: 0,
            "GraphDestroy": lambda graph: 0,
        }

    @staticmethod
    def _handle(reference, value):
        reference._obj.value = value
        return 0

    def _create(self, graph, flags):
        handle = 1000 + len(self.graphs)
        self.graphs[handle] = []
        return self._handle(graph, handle)

    def _add(self, node, graph, dependencies, count, params):
        depends_on = [dependencies[i] for i in range(count)]
        members = self.graphs[graph.value]
        assert all(n in members for n in depends_on), "a node depends on nodes of its graph added before it"
        self.nodes.append(params._obj)
        self.dependencies.append(depends_on)
        members.append(len(self.nodes))
        return self._handle(node, len(self.nodes))

    def _instantiate(self, executable, graph, flags):
        if self.refuse_build:
            return 1
        handle = 2000 + len(self.executables)
        self.executables[handle] = {n: self._slots(self.nodes[n - 1]) for n in self.graphs[graph.value]}
        return self._handle(executable, handle)

    def _set(self, executable, node, params):
        self.params_set += 1
        held = self.executables[executable.value]
        assert node.value in held, "a node of another graph"
        held[node.value] = self._slots(params._obj)
        return 0

    @staticmethod
    def _slots(params):
        pointers = (ctypes.c_void_p * 4).from_address(params.kernelParams)
        return [ctypes.c_uint64.from_address(p).value for p in pointers]

    def _launch(self, executable, stream):
        if self.refuse_launch:
            return 1
        self.graph_launches += 1
        self.launched.append(executable.value)
        for number, values in self.executables[executable.value].items():
            params = self.nodes[number - 1]
            held = [ctypes.c_uint64(v) for v in values]
            _run(params.func, params.gridDimX, params.blockDimX, [ctypes.addressof(v) for v in held])
        return 0


def twice_scaled(graph, x, *, scale=2.0):
    """A stand-in op of two kernels: mid = scale * x + table, out = scale * mid + table."""
    FULL_CALLS.append(1)
    mid, out = FakeArray(x.shape, x.dtype), FakeArray(x.shape, x.dtype)
    if recording.recording():
        recording.note_allocation(mid)
        recording.note_allocation(out)
    for args in ((x, TABLE, mid, np.float32(scale)), (mid, TABLE, out, np.float32(scale))):
        KERNEL((1,), (32,), args)
        if recording.recording():
            recording.note_launch(KERNEL, (1,), (32,), args)
    return out


@pytest.mark.parametrize("refuse_launch", [False, True])
def test_records_of_several_kernels_launch_as_one_graph(public, monkeypatch, refuse_launch):
    """A record of two kernels replays as one graph launch with each call's arrays in its
    slots; where the driver refuses the launch, the call (and later ones) launch kernel by
    kernel."""
    fake = FakeDriver(refuse_launch)
    monkeypatch.setattr(cuda_graph, "driver", fake.functions)
    op, graph = replay.replayed(twice_scaled), FakeGraph()
    for seed in range(5):
        x = _x(seed)
        want = np.float32(2.0) * (np.float32(2.0) * x.values + TABLE.values) + TABLE.values
        np.testing.assert_array_equal(op(graph, x).values, want)
    assert len(FULL_CALLS) == 2
    (record,) = graph.cache["replay records"].values()
    assert fake.graph_launches == (0 if refuse_launch else 3)
    assert len(LAUNCHES) == (2 * 3 if refuse_launch else 0)  # refused: both kernels through cuLaunchKernel
    assert (record._graph is None) == refuse_launch


def staged(graph, x):
    """A stand-in op of four kernels, the middle two independent of each other:
    mid = 2x + table; then, side by side, left = 2 mid + table and right = 3 mid + table;
    then out = 2 left + table (right is the op's second result)."""
    FULL_CALLS.append(1)
    mid, left, right, out = (FakeArray(x.shape, x.dtype) for _ in range(4))
    if recording.recording():
        for array in (mid, left, right, out):
            recording.note_allocation(array)

    def launch(*args):
        KERNEL((1,), (32,), args)
        if recording.recording():
            recording.note_launch(KERNEL, (1,), (32,), args)

    launch(x, TABLE, mid, np.float32(2.0))
    with recording.independent():
        launch(mid, TABLE, left, np.float32(2.0))
        with recording.independent():  # nested: the same block
            launch(mid, TABLE, right, np.float32(3.0))
    launch(left, TABLE, out, np.float32(2.0))
    return out, right


def test_independent_launches_are_one_stage_of_the_graph(public, monkeypatch):
    """The kernels of an independent block become graph nodes that depend on the stage before
    (not on each other), and the kernel after the block depends on all of them; replays give
    the full call's results."""
    fake = FakeDriver()
    monkeypatch.setattr(cuda_graph, "driver", fake.functions)
    op, graph = replay.replayed(staged), FakeGraph()
    for seed in range(4):
        x = _x(seed)
        mid = np.float32(2.0) * x.values + TABLE.values
        want_right = np.float32(3.0) * mid + TABLE.values
        want_out = np.float32(2.0) * (np.float32(2.0) * mid + TABLE.values) + TABLE.values
        out, right = op(graph, x)
        np.testing.assert_array_equal(out.values, want_out)
        np.testing.assert_array_equal(right.values, want_right)
    assert len(FULL_CALLS) == 2 and fake.graph_launches == 2
    assert fake.dependencies == [[], [1], [1], [2, 3]]


def test_independent_outside_a_recording_changes_nothing():
    with recording.independent():
        assert not recording.recording()


def test_a_single_kernel_launches_without_a_graph(public, monkeypatch):
    """A record of one kernel replays through the kernel's CUDA function with each call's
    arrays: no graph is built or launched (a graph costs a launch of its own)."""
    fake = FakeDriver()
    monkeypatch.setattr(cuda_graph, "driver", fake.functions)
    graph = FakeGraph()
    for seed in range(5):
        x = _x(seed)
        np.testing.assert_array_equal(public(graph, x).values, np.float32(2.0) * x.values + TABLE.values)
    (record,) = graph.cache["replay records"].values()
    assert record._graph is None and fake.graph_launches == 0 and not fake.nodes


def test_slot_values_hold_scalars_in_their_low_bytes():
    assert cuda_graph.slot_value(np.int32(-1)) == 0xFFFFFFFF
    assert cuda_graph.slot_value(np.uint64(2**63 + 5)) == 2**63 + 5
    assert ctypes.c_float.from_buffer(ctypes.c_uint64(cuda_graph.slot_value(np.float32(1.5)))).value == 1.5
    assert ctypes.c_double.from_buffer(ctypes.c_uint64(cuda_graph.slot_value(np.float64(-2.25)))).value == -2.25


def test_a_graph_sets_only_the_arguments_that_changed(public, monkeypatch):
    """Replays whose arrays sit where the last one's did (a pool handing back the same
    blocks) set no node parameters; a new input sets the first node's alone; the results
    are right either way (the stand-in driver launches with what each node holds)."""
    fake = FakeDriver()
    monkeypatch.setattr(cuda_graph, "driver", fake.functions)
    op, graph = replay.replayed(twice_scaled), FakeGraph()
    x, other = _x(0), _x(1)
    pool = FakeArray.next_address[0] + (1 << 20)  # the replays' allocations land here every call
    # Calls 0 and 1 run in full (the second recorded); the first replay moves both kernels'
    # allocations to the pool's addresses; later ones set a node only where its input moved.
    for call, (arg, want_set) in enumerate([(x, None), (x, None), (x, 2), (x, 0), (other, 1), (other, 0), (x, 1)]):
        if call >= 2:
            FakeArray.next_address[0] = pool
        before = fake.params_set
        want = np.float32(2.0) * (np.float32(2.0) * arg.values + TABLE.values) + TABLE.values
        np.testing.assert_array_equal(op(graph, arg).values, want)
        if want_set is not None:
            assert fake.params_set - before == want_set, f"call {call}"
    assert fake.graph_launches == 5


def test_kept_arenas_taken_in_turns_launch_graphs_of_their_own(public, monkeypatch):
    """A loop holding each result until the next call: the record's two arenas take turns.
    Each, once taken again, launches a graph of its own whose nodes keep its addresses, so
    that later replays of the same input set no node parameters (one shared graph would set
    both nodes on every call); the results are right throughout."""
    fake = FakeDriver()
    monkeypatch.setattr(cuda_graph, "driver", fake.functions)
    op, graph = replay.replayed(twice_scaled), FakeGraph()
    x = _x(0)
    want = np.float32(2.0) * (np.float32(2.0) * x.values + TABLE.values) + TABLE.values
    out = None
    for call in range(10):
        if call == 6:  # the first two replays made the arenas, the next two took them again
            params_set, launched = fake.params_set, len(fake.launched)
        out = op(graph, x)
        np.testing.assert_array_equal(out.values, want)
    (record,) = graph.cache["replay records"].values()
    own = {arena.graph.executable.value for arena in record._arenas}
    assert fake.params_set == params_set and set(fake.launched[launched:]) == own
    assert len(own) == 2 and record._graph.executable.value not in own
    assert fake.launched[launched:] == fake.launched[launched : launched + 2] * 2


def test_an_arena_whose_graph_is_refused_launches_the_records(public, monkeypatch):
    """Where the driver refuses to build a kept arena's own graph, the arena launches the
    record's graph from then on (its build not tried again); the results are right."""
    fake = FakeDriver()
    monkeypatch.setattr(cuda_graph, "driver", fake.functions)
    op, graph = replay.replayed(twice_scaled), FakeGraph()
    x = _x(0)
    want = np.float32(2.0) * (np.float32(2.0) * x.values + TABLE.values) + TABLE.values
    op(graph, x)
    op(graph, x)  # recorded: the record's graph is built
    fake.refuse_build = True
    out = None
    for _ in range(8):
        out = op(graph, x)
        np.testing.assert_array_equal(out.values, want)
    (record,) = graph.cache["replay records"].values()
    assert [arena.graph for arena in record._arenas] == [False, False]
    assert set(fake.launched) == {record._graph.executable.value} and len(fake.executables) == 1


@pytest.mark.parametrize("scratch_with_results", [1 << 16, 0])
def test_a_replay_returns_its_results_in_one_allocation_with_or_without_its_scratch(
    public, monkeypatch, scratch_with_results
):
    """A replay allocates one block for the arrays it returns, each at an offset aligned for
    any vector load. Its scratch joins that block when it is small (SCRATCH_WITH_RESULTS),
    else takes another block, which no result holds: every replay frees that one."""
    fake = FakeDriver()
    monkeypatch.setattr(cuda_graph, "driver", fake.functions)
    monkeypatch.setattr(replay_results, "SCRATCH_WITH_RESULTS", scratch_with_results)
    op, graph = replay.replayed(staged), FakeGraph()
    for seed in range(2):  # the full call, the recorded one
        op(graph, _x(seed))
    (record,) = graph.cache["replay records"].values()
    allocated = []
    allocate = backend.cupy.cuda.alloc
    monkeypatch.setattr(backend.cupy.cuda, "alloc", lambda n: allocated.append(n) or allocate(n))
    out, right = op(graph, _x(2))
    np.testing.assert_array_equal(
        out.values,
        np.float32(2.0) * (np.float32(2.0) * (np.float32(2.0) * _x(2).values + TABLE.values) + TABLE.values)
        + TABLE.values,
    )
    (held, _), (other, _) = _block_at(out.data.ptr), _block_at(right.data.ptr)
    assert held == other and {out.data.ptr - held, right.data.ptr - held} == {0, replay_results.ALIGNMENT}
    # right and out, then mid and left (six float32 each: one aligned step apiece)
    if scratch_with_results:
        assert allocated == [4 * replay_results.ALIGNMENT]
        assert [size for size, _ in record._layout.blocks] == [4 * replay_results.ALIGNMENT]
    else:
        assert allocated == [2 * replay_results.ALIGNMENT] * 2
        assert [size for size, _ in record._layout.blocks] == [2 * replay_results.ALIGNMENT] * 2
        assert [shape is None for _, members in record._layout.blocks for _, _, shape, _ in members] == [False] * 2 + [
            True
        ] * 2


def reshaped(graph, x):
    """A stand-in op returning its output reshaped, as the ops return (N, *S, F) arrays."""
    return scaled_plus_table(graph, x).reshape(2, 3)


def test_a_replayed_result_has_the_recorded_shape(public):
    op, graph = replay.replayed(reshaped), FakeGraph()
    for seed in range(4):
        x = _x(seed)
        out = op(graph, x)
        assert out.shape == (2, 3)
        np.testing.assert_array_equal(out.values.reshape(-1), np.float32(2.0) * x.values + TABLE.values)
    assert len(FULL_CALLS) == 2


def flat_and_reshaped(graph, x):
    """A stand-in op returning one output twice: as computed and reshaped."""
    out = scaled_plus_table(graph, x)
    return out, out.reshape(2, 3)


def test_an_allocation_returned_twice_is_not_replayed(public):
    """A replay makes one array per allocation, so a call returning one allocation twice (two
    shapes, or two array objects) would come back as one array in one shape: such a call takes
    the full path every time."""
    op, graph = replay.replayed(flat_and_reshaped), FakeGraph()
    for seed in range(4):
        x = _x(seed)
        flat, square = op(graph, x)
        assert flat.shape == (6,) and square.shape == (2, 3) and flat is not square
        np.testing.assert_array_equal(flat.values, np.float32(2.0) * x.values + TABLE.values)
    assert len(FULL_CALLS) == 4


def test_a_lone_result_is_an_array_of_its_own(public, monkeypatch):
    """A replay returning one array and using no scratch allocates that array alone, no block."""
    blocks = []
    allocate = backend.cupy.cuda.alloc
    monkeypatch.setattr(backend.cupy.cuda, "alloc", lambda n: blocks.append(n) or allocate(n))
    graph = FakeGraph()
    for seed in range(4):
        x = _x(seed)
        np.testing.assert_array_equal(public(graph, x).values, np.float32(2.0) * x.values + TABLE.values)
    assert len(FULL_CALLS) == 2 and blocks == []


def test_zeros_of_either_sign_are_different_scalars(public):
    """-0.0 == 0.0 (and hashes alike), but a kernel multiplying by it gives zeros of its sign:
    a call with scale=-0.0 after two with 0.0 replayed their record and returned +0.0."""
    graph, table = FakeGraph(), TABLE.values.copy()
    TABLE.values[:] = -0.0  # added to a zero of either sign, keeps its sign
    try:
        for scale in (0.0, 0.0, -0.0, -0.0, -0.0, 0.0):
            x = _x(1)
            expected = np.float32(scale) * x.values + TABLE.values
            assert (np.signbit(public(graph, x, scale=scale).values) == np.signbit(expected)).all(), scale
    finally:
        TABLE.values[:] = table
    assert len(FULL_CALLS) == 4  # each sign: its first call and its recorded one


def test_a_description_tells_apart_what_the_work_depends_on(public):
    """Calls whose arrays differ only in strides, in their address modulo 16 (the launchers
    choose vector loads of up to 16 bytes by it) or in the keyword that passes them do
    different work: their descriptions (record keys) differ."""

    def key(*arrays, **keywords):
        return replay._describe(scaled_plus_table, (FakeGraph(), *arrays), keywords)[0]

    def at(offset):  # an array starting ``offset`` bytes into a new allocation
        return FakeArray((2, 3), np.float32, memptr=FakeArray((16,), np.float32).data + offset)

    assert key(at(0)) == key(at(0)) == key(at(16))
    transposed = at(0)
    transposed.strides = (4, 8)
    assert key(transposed) != key(at(0))
    assert key(at(8)) != key(at(0)) and key(at(4)) != key(at(0))
    assert key(at(0), x=at(0)) != key(at(0), y=at(0))


@pytest.mark.parametrize(
    "template",
    [
        None,
        replay_results.Slot(replay_results.IN, 1, None),
        replay_results.Slot(replay_results.NEW, 0, (2,)),
        (replay_results.Slot(replay_results.NEW, 0, (2,)), replay_results.Slot(replay_results.NEW, 1, (3,))),
        (replay_results.Slot(replay_results.NEW, 1, (3,)),),
        (replay_results.Slot(replay_results.IN, 0, None), None, replay_results.Slot(replay_results.NEW, 1, (3,))),
        ((replay_results.Slot(replay_results.NEW, 0, (2,)), None), replay_results.Slot(replay_results.IN, 1, None)),
        (),
    ],
)
def test_a_replay_returns_its_results_where_the_template_places_them(template):
    """The results of a replay: each slot's array (the caller's or a new one), None where the
    recorded call returned None, in the template's nesting (a lone array, flat or nested tuples)."""
    arrays, returned = ["in0", "in1"], ["new0", "new1"]

    def expected(part):
        if part is None:
            return None
        if isinstance(part, replay_results.Slot):
            return (arrays if part.source == replay_results.IN else returned)[part.index]
        return tuple(expected(p) for p in part)

    result = replay_results.picker(template, len(arrays))([*arrays, *returned, None])
    assert result == expected(template) and type(result) is type(expected(template))


def _recorded(op, graph):
    """Make the full call and the recorded one of ``op`` on ``graph``."""
    for seed in range(2):
        op(graph, _x(seed))
    (record,) = graph.cache["replay records"].values()
    return record


def _check(out, x):
    np.testing.assert_array_equal(out.values, np.float32(2.0) * x.values + TABLE.values)


def test_a_replay_takes_the_memory_of_the_last_one_once_its_results_are_dropped(public):
    """The caller dropped the last replay's result: the next replay returns that array again,
    in its memory, with the new call's values, and allocates nothing."""
    graph = FakeGraph()
    record = _recorded(public, graph)
    out = public(graph, _x(2))
    (arena,), address = record._arenas, out.data.ptr
    del out
    inputs = [_x(seed) for seed in range(3, 6)]
    allocated = FakeArray.next_address[0]
    for x in inputs:
        out = public(graph, x)
        _check(out, x)
        assert out.data.ptr == address and out is arena.arrays[0] and record._arenas == [arena]
        del out
    assert FakeArray.next_address[0] == allocated and len(FULL_CALLS) == 2


@pytest.mark.parametrize("kept", ["the array", "a view", "its memory pointer", "a weak reference", "nothing"])
def test_a_result_the_caller_still_refers_to_is_never_written_again(public, kept):
    """Whatever of a result the caller keeps (the array, a view of it, its memory pointer, a
    weak reference), later replays leave its memory alone; a result whose shape the caller
    changed before dropping it is not returned again in that shape."""
    graph = FakeGraph()
    _recorded(public, graph)
    out = public(graph, _x(2))
    address, values = out.data.ptr, out.values.copy()
    if kept == "the array":
        keep = out
    elif kept == "a view":
        keep = out.reshape(2, 3)
    elif kept == "its memory pointer":
        keep = out.data
    elif kept == "a weak reference":
        keep = weakref.ref(out)
    else:
        keep, out.shape = None, (3, 2)  # changed, then dropped
    del out
    for seed in range(3, 6):
        x = _x(seed)
        later = public(graph, x)
        _check(later, x)
        assert later.data.ptr != address and later.shape == (6,)
        del later
    start, block = _block_at(address)
    np.testing.assert_array_equal(block[address - start : address - start + 24].view(np.float32), values)
    del keep  # what the caller kept, held through every replay above


def test_a_replay_on_another_stream_takes_new_memory(public, monkeypatch):
    """The memory of a replay on one stream serves the next replay only on that stream (as
    CuPy's pool hands a freed block back to the stream that freed it)."""
    graph = FakeGraph()
    _recorded(public, graph)
    out = public(graph, _x(2))
    address = out.data.ptr
    del out
    other = SimpleNamespace(ptr=7, is_capturing=lambda: False)
    monkeypatch.setattr(backend.cupy.cuda, "get_current_stream", lambda: other)
    x = _x(3)
    out = public(graph, x)
    _check(out, x)
    assert out.data.ptr != address


def test_a_call_captured_in_a_cuda_graph_takes_memory_of_its_own(public, monkeypatch):
    """While its stream is captured, a replay neither takes the record's memory nor keeps its
    own for later calls (the captured graph writes it at every launch)."""
    graph = FakeGraph()
    record = _recorded(public, graph)
    out = public(graph, _x(2))
    address = out.data.ptr
    del out
    capturing = SimpleNamespace(ptr=7, is_capturing=lambda: True)
    monkeypatch.setattr(backend.cupy.cuda, "get_current_stream", lambda: capturing)
    captured = public(graph, _x(3)).data.ptr
    assert captured != address and [a.addresses for a in record._arenas] == [[address]]
    monkeypatch.setattr(backend.cupy.cuda, "get_current_stream", FakeStream)
    x = _x(4)
    out = public(graph, x)
    _check(out, x)
    assert out.data.ptr == address


def test_a_replay_larger_than_held_bytes_keeps_no_memory(public, monkeypatch):
    monkeypatch.setattr(replay_results, "HELD_BYTES", 16)
    graph = FakeGraph()
    record = _recorded(public, graph)
    addresses = []
    for seed in range(2, 5):
        x = _x(seed)
        out = public(graph, x)
        _check(out, x)
        addresses.append(out.data.ptr)
        del out
    assert len(set(addresses)) == 3 and record._arenas == []


def test_results_and_scratch_of_several_kernels_are_taken_again_together(public, monkeypatch):
    """A record returning two arrays and using scratch (the staged op): its next replay takes
    the whole block again once both results are dropped, and new memory while one is held."""
    monkeypatch.setattr(cuda_graph, "driver", FakeDriver().functions)
    op, graph = replay.replayed(staged), FakeGraph()
    _recorded(op, graph)

    def expected(x):
        mid = np.float32(2.0) * x.values + TABLE.values
        left = np.float32(2.0) * mid + TABLE.values
        return np.float32(2.0) * left + TABLE.values, np.float32(3.0) * mid + TABLE.values

    def call(seed):
        x = _x(seed)
        out, right = op(graph, x)
        want_out, want_right = expected(x)
        np.testing.assert_array_equal(out.values, want_out)
        np.testing.assert_array_equal(right.values, want_right)
        return out, right

    first = [r.data.ptr for r in call(2)]
    assert [r.data.ptr for r in call(3)] == first
    _, held = call(4)
    held_values = held.values.copy()
    assert [r.data.ptr for r in call(5)] != first
    np.testing.assert_array_equal(held.values, held_values)


def test_a_loop_holding_each_result_until_the_next_call_returns_allocates_nothing(public):
    """``out = op(graph, x)`` in a loop holds the last result while the next call runs: the
    record's two arenas take turns, and no replay after the first two allocates."""
    graph = FakeGraph()
    record = _recorded(public, graph)
    inputs = [_x(seed) for seed in range(2, 9)]
    out, addresses = None, []
    for call, x in enumerate(inputs):
        if call == 2:
            allocated = FakeArray.next_address[0]
        out = public(graph, x)
        _check(out, x)
        addresses.append(out.data.ptr)
    assert FakeArray.next_address[0] == allocated and len(record._arenas) == 2
    assert addresses[2:] == addresses[:2] * 2 + addresses[:1] and addresses[0] != addresses[1]


def test_results_held_for_a_few_calls_leave_one_of_the_kept_arenas_free(public):
    """A caller holding each result for KEPT_ARENAS - 1 later calls (layers of one shape whose
    results wait for their backward): once the record keeps that many arenas, each replay
    takes the least recently used one and none allocates; the held results keep their values."""
    graph = FakeGraph()
    record = _recorded(public, graph)
    held = collections.deque(maxlen=replay_results.KEPT_ARENAS - 1)
    inputs = [_x(seed) for seed in range(2, 2 + replay_results.KEPT_ARENAS + 8)]
    for call, x in enumerate(inputs):
        if call == replay_results.KEPT_ARENAS:
            allocated = FakeArray.next_address[0]
        held.append((public(graph, x), x))
        for out, its_x in held:
            _check(out, its_x)
    assert FakeArray.next_address[0] == allocated and len(record._arenas) == replay_results.KEPT_ARENAS


def test_a_caller_keeping_every_result_pauses_the_arenas(public):
    """Results kept for good (a list): every replay takes new memory and leaves the kept ones
    alone; once as many replays in a row as the record keeps arenas found them all held, the
    next PAUSE_CALLS replays neither look at nor replace them."""
    graph = FakeGraph()
    record = _recorded(public, graph)
    kept, addresses = [], set()
    for seed in range(2, 2 + 2 * replay_results.KEPT_ARENAS):
        x = _x(seed)
        kept.append((public(graph, x), x))
        addresses.add(kept[-1][0].data.ptr)
    arenas = list(record._arenas)
    assert record._paused == replay.PAUSE_CALLS and len(arenas) == replay_results.KEPT_ARENAS
    for seed in range(20, 30):
        x = _x(seed)
        kept.append((public(graph, x), x))
        addresses.add(kept[-1][0].data.ptr)
    assert record._arenas == arenas and record._paused == replay.PAUSE_CALLS - 10
    assert len(addresses) == len(kept)
    for out, x in kept:
        _check(out, x)


def test_a_call_with_an_array_of_size_0_is_never_recorded(public):
    """Such a call takes the full path every time: its op validates it (the key's shape tells a
    replay apart, so the size is tested only before a call would be recorded)."""
    calls = []

    def op(graph, x, y):
        calls.append(1)
        return y

    graph, x, empty = FakeGraph(), _x(0), FakeArray((0,), np.float32)
    wrapped = replay.replayed(op)
    for _ in range(4):
        assert wrapped(graph, x, empty) is empty
    assert len(calls) == 4 and not graph.cache.get("replay records")

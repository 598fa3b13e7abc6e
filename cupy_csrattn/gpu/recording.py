"""Recording: what one GPU call does on the GPU, collected while it runs.

A call being recorded (gpu/replay.py records an op's call to repeat it) reports its work
here: kernels.launch each launch, kernels.scratch and Placement.output each allocation, the
launchers the kernels that may run side by side (``independent``), and any code doing
GPU work that a replay would not repeat (``other_work``). Each thread records its own
calls: another thread's launches never enter a record. Reporters of launches and
allocations ask ``recording()`` first (one attribute read); ``independent`` and
``other_work`` do nothing outside a recording.
"""

import contextlib
import threading


class Recorder:
    """What the calls of one thread do on the GPU while it records (see ``recorder``)."""

    def __init__(self):
        self.launches = []  # (kernel, grid, block, args, stage)
        self.allocations = []
        self.reason = None  # why the work cannot be replayed, or None
        self.stages = 0  # stages begun: a launch alone is one, an ``independent`` block one
        self.in_block = False


class _ThreadState(threading.local):
    recorder = None  # a class default: every thread starts without one, read without getattr's fallback


_local = _ThreadState()


def _current():
    return _local.recorder


@contextlib.contextmanager
def recorder():
    """A Recorder collecting the GPU work this thread does inside the block."""
    _local.recorder = collected = Recorder()
    try:
        yield collected
    finally:
        _local.recorder = None


def recording():
    """True while this thread records a call."""
    return _local.recorder is not None


def thread_state():
    """The per-thread state whose ``recorder`` is the recording Recorder or None: for a caller
    that checks ``recording()`` on every call and wants the attribute read alone."""
    return _local


def note_launch(kernel, grid, block, args):
    current = _current()
    if not current.in_block:
        current.stages += 1
    current.launches.append((kernel, grid, block, args, current.stages))


@contextlib.contextmanager
def independent():
    """Mark the kernels launched inside the block as independent of each other: none reads
    what another writes or writes where another does (disjoint parts of one output are
    fine). A replay's CUDA graph then lets them run side by side, after every launch before
    the block and before every launch after it, so that one's last blocks (a tail of long
    rows, say) overlap another's work; launched directly they run one after the other.
    Blocks do not nest: an inner one adds nothing."""
    current = _current()
    if current is None or current.in_block:
        yield
        return
    current.stages += 1
    current.in_block = True
    try:
        yield
    finally:
        current.in_block = False


def note_allocation(array):
    _current().allocations.append(array)


def other_work(reason):
    """Mark the call this thread is recording (if any) as doing GPU work that a replay would not repeat."""
    current = _current()
    if current is not None and current.reason is None:
        current.reason = reason

"""The arrays a replay (gpu/replay.py) returns and the memory its kernels write: where each
recorded allocation goes (``Layout``), the memory a record keeps for its next replay
(``Arena``) and how the results are handed back (``picker``).

A replayed call needs the memory the recorded call allocated: the arrays it returns and its
scratch. Allocating them and making an array header per result costs the host about as much
as the kernel launch itself, per call. So a record keeps the memory and the result arrays of
its last replays (Arenas: up to KEPT_ARENAS of them and HELD_BYTES in all), and a replay on
the same stream takes one again where nothing outside it refers to it any more: no array, view,
memory pointer or weak reference the caller kept, shapes as made (``Arena.free``, reference
counts against those of the arena alone). This is what CuPy's memory pool would do with the freed
blocks, a block going back to the stream that freed it, without the allocation and the
headers. Where the caller still holds a result of every kept arena, or the stream differs,
the replay allocates anew and the record keeps the new memory in place of its least recently
used arena; a replay on a stream being captured allocates anew and keeps nothing (the
captured graph writes that memory at each of its launches).
"""

import operator
import sys
import weakref
from typing import NamedTuple

from cupy_csrattn import backend

IN, NEW = 0, 1  # sources of an array argument or result: a caller's array, a new allocation

# Offsets of a replay's allocations in its blocks: CuPy's memory pool aligns each allocation
# to 512 bytes, and the launchers chose vector loads (up to 16 bytes) for the recorded ones.
ALIGNMENT = 256

# A call's scratch of at most this many bytes shares the block of the arrays it returns: a
# pool allocation and its free cost the host about a third of a bare kernel launch, and the
# calls whose host time matters (their GPU work is short) have small scratch. The results of
# such a call hold at most this much more memory.
SCRATCH_WITH_RESULTS = 64 * 1024

# A record keeps the memory of its last replays (results and scratch) for the next ones: up to
# KEPT_ARENAS of them and HELD_BYTES in all. The host's saving (an allocation and a header
# per result, about half a bare launch each, and for a graph of several kernels the setting
# of its nodes' parameters) matters where the kernels' work is short, and such calls move
# little. Arenas serve callers that hold results for up to KEPT_ARENAS - 1 later calls:
# ``out = op(graph, out)`` in a loop (the last result is held while the next call runs), a
# forward's results kept for its backward, the layers of one shape of a model whose
# forward results wait for their backward. A record makes arenas only as such callers need
# them (a replay finding every kept one held), so a caller holding nothing keeps one.
HELD_BYTES = 8 << 20
KEPT_ARENAS = 16


class NotReplayable(Exception):
    pass


class Slot(NamedTuple):
    """Where a result comes from: a caller's array (IN, ``shape`` None) or a new allocation
    (NEW), returned with ``shape``."""

    source: int
    index: int
    shape: tuple


def aligned(nbytes):
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


def template(result, arrays, allocations):
    """``result`` with each array replaced by its Slot (tuples kept, None kept)."""
    if result is None:
        return None
    if isinstance(result, tuple):
        return tuple(template(r, arrays, allocations) for r in result)
    for index, array in enumerate(arrays):
        if result is array:
            return Slot(IN, index, None)
    for index, array in enumerate(allocations):
        if type(result) is type(array) and result.data.ptr == array.data.ptr and result.nbytes == array.nbytes:
            return Slot(NEW, index, result.shape)
    raise NotReplayable("a result is neither an argument nor an allocation")


class Layout:
    """Where a replay puts each recorded allocation. The arrays the call returns share one
    block of memory, each at an offset aligned as a fresh allocation's start is for any
    vector load. Its scratch joins that block when it is small (SCRATCH_WITH_RESULTS),
    else takes a block of its own. A returned array alone, with no scratch, is allocated
    as itself (``lone``: its (shape, dtype), else None). ``blocks``: (bytes, members) per
    block, members (index, offset, shape to return or None, dtype)."""

    def __init__(self, result_template, allocations):
        returned = {}

        def collect(part):
            if isinstance(part, Slot):
                if part.source == NEW:
                    if part.index in returned:  # a replay makes one array of each allocation
                        raise NotReplayable("an allocation is returned twice")
                    returned[part.index] = part.shape
            elif part is not None:
                for item in part:
                    collect(item)

        collect(result_template)
        results = [index for index in range(len(allocations)) if index in returned]
        scratch = [index for index in range(len(allocations)) if index not in returned]
        scratch_bytes = sum(aligned(allocations[index].nbytes) for index in scratch)
        if results and scratch_bytes <= SCRATCH_WITH_RESULTS:
            groups = [results + scratch]
        else:
            groups = [group for group in (results, scratch) if group]
        self.blocks = []
        for group in groups:
            members, size = [], 0
            for index in group:
                members.append((index, size, returned.get(index), allocations[index].dtype))
                size += aligned(allocations[index].nbytes)
            self.blocks.append((size, members))
        self.num_allocations = len(allocations)
        self.lone = None
        if len(self.blocks) == 1 and len(self.blocks[0][1]) == 1 and results:
            _, _, shape, dtype = self.blocks[0][1][0]
            self.lone = shape, dtype
        self.nbytes = sum(size for size, _ in self.blocks)
        self.kept = min(KEPT_ARENAS, HELD_BYTES // max(self.nbytes, 1))  # arenas a record keeps
        # the shapes of the returned arrays, in the order allocate makes them
        self.shapes = [shape for _, members in self.blocks for _, _, shape, _ in members if shape is not None]

    def allocate(self, stream):
        """A new Arena of this layout on ``stream`` (a stream's address)."""
        cupy = backend.cupy
        if self.lone is not None:
            array = cupy.ndarray(*self.lone)
            pointer = array.data
            return Arena(stream, [pointer.ptr], [array], (array,), (array, pointer, pointer.mem), self.shapes)
        ndarray, alloc = cupy.ndarray, cupy.cuda.alloc
        addresses, arrays, headers, watched = [0] * self.num_allocations, [None] * self.num_allocations, [], []
        for size, members in self.blocks:
            block = alloc(size)
            watched += (block, block.mem)
            start = block.ptr
            for index, offset, shape, dtype in members:
                addresses[index] = start + offset
                if shape is not None:
                    pointer = block + offset if offset else block
                    arrays[index] = array = ndarray(shape, dtype, pointer)
                    headers.append(array)
                    if offset:
                        watched.append(pointer)
        headers = tuple(headers)
        return Arena(stream, addresses, arrays, headers, headers + tuple(watched), self.shapes)


_SHAPE = operator.attrgetter("shape")
_getrefcount, _getweakrefcount = sys.getrefcount, weakref.getweakrefcount


class Arena:
    """The memory of one replay: ``addresses`` and ``arrays`` (the address of each allocation
    and the array of each returned one, None for scratch, by allocation index), the
    ``stream`` it was used on, and the objects holding its memory (the arrays, their memory
    pointers, the blocks and CuPy's memory objects behind them), whose reference counts tell
    whether anything outside the arena still refers to it."""

    __slots__ = (
        "stream",
        "addresses",
        "arrays",
        "graph",
        "graph_at",
        "_headers",
        "_watched",
        "_shapes",
        "_counts",
        "_first",
    )

    def __init__(self, stream, addresses, arrays, headers, watched, shapes):
        self.stream, self.addresses, self.arrays = stream, addresses, arrays
        # A kept arena taken again gets a CUDA graph of its own (gpu/replay.py): its nodes keep
        # this arena's addresses (graph_at: those they were last given), so replays taking the
        # kept arenas in turn set no node parameters. None: not yet; False: the driver refused.
        self.graph = self.graph_at = None
        self._headers, self._watched, self._shapes = headers, watched, shapes
        self._counts = self._first = None

    def watch(self):
        """Note the reference counts of the arena's objects, called where nothing but the
        arena refers to them (no caller's variable): ``free`` compares with these."""
        self._counts = list(map(_getrefcount, self._watched))
        self._first = _getrefcount(self._watched[0])

    def free(self, stream):
        """True where the arena may serve a replay on ``stream``: it was watched, last used on
        that stream, and nothing outside it refers to its arrays or memory (their reference
        counts are those ``watch`` noted, no weak reference, shapes unchanged). The first
        object (a result, where there is one) is looked at first: it is the one a caller
        holds."""
        watched, headers = self._watched, self._headers
        return (
            stream == self.stream
            and _getrefcount(watched[0]) == self._first
            and [*map(_getrefcount, watched)] == self._counts
            and not any(map(_getweakrefcount, headers))
            and [*map(_SHAPE, headers)] == self._shapes
        )


def picker(result_template, num_arrays):
    """fn(values) -> a call's results as ``result_template`` places them, values being the list
    [*the caller's arrays, *the allocations' arrays (None for scratch), None]: one
    itemgetter for a result or a flat tuple of them, the commonest shapes."""

    def position(slot):
        if slot is None:
            return -1
        return slot.index if slot.source == IN else num_arrays + slot.index

    if result_template is None or isinstance(result_template, Slot):
        return operator.itemgetter(position(result_template))
    if len(result_template) > 1 and all(part is None or isinstance(part, Slot) for part in result_template):
        return operator.itemgetter(*map(position, result_template))
    parts = [picker(part, num_arrays) for part in result_template]
    return lambda values: tuple([part(values) for part in parts])


def new_picker(result_template):
    """fn(an arena's arrays) -> the call's results, where ``result_template`` is a flat tuple
    of two or more new arrays (the fused ops' commonest results); else None."""
    if isinstance(result_template, tuple) and len(result_template) > 1:
        if all(isinstance(part, Slot) and part.source == NEW for part in result_template):
            return operator.itemgetter(*(part.index for part in result_template))
    return None


NO_MEMORY = Arena(None, [], [], (), (), [])  # what a replay that allocates nothing takes

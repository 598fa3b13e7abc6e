"""The arrays a replay (gpu/replay.py) returns and the memory its kernels write: where each
recorded allocation goes (``Layout``), the memory a record keeps for its next replay
(``Arena``) and how the results are handed back (``picker``).

A replayed call needs the memory the recorded call allocated: the arrays it returns and its
scratch. Allocating them and making an array header per result costs the host about as much
as the kernel launch itself, per call. So a record keeps the memory and the result arrays of
its last replay (an Arena, up to HELD_BYTES), and its next replay on the same stream takes
them again where nothing outside the arena refers to them any more: no array, view, memory
pointer or weak reference the caller kept, shapes as made (``Arena.free``, reference counts
against those of the arena alone). This is what CuPy's memory pool would do with the freed
blocks, a block going back to the stream that freed it, without the allocation and the
headers. Where the caller still holds a result (or the stream differs, or is being
captured), the replay allocates anew and the record keeps the new memory instead.
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

# A record keeps the memory of its last replay (results and scratch) for the next one up to
# this many bytes: the host's saving (an allocation and a header per result, about half a
# bare launch each) matters where the kernels' work is short, and such calls move little.
HELD_BYTES = 4 << 20


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

    def allocate(self, stream):
        """A new Arena of this layout on ``stream`` (a stream's address)."""
        cupy = backend.cupy
        if self.lone is not None:
            array = cupy.ndarray(*self.lone)
            return Arena(stream, [], [array.data.ptr], [array])
        ndarray, alloc = cupy.ndarray, cupy.cuda.alloc
        memory, addresses, arrays = [], [0] * self.num_allocations, [None] * self.num_allocations
        for size, members in self.blocks:
            block = alloc(size)
            memory.append(block)
            start = block.ptr
            for index, offset, shape, dtype in members:
                addresses[index] = start + offset
                if shape is not None:
                    arrays[index] = ndarray(shape, dtype, block + offset if offset else block)
        return Arena(stream, memory, addresses, arrays)


_SHAPE = operator.attrgetter("shape")


def _watched(headers, memory):
    """The arrays ``headers``, their memory pointers, the blocks ``memory`` and the memory
    objects behind the pointers (CuPy's ``mem``), each once."""
    pointers = [array.data for array in headers] + list(memory)
    owners = [getattr(pointer, "mem", None) for pointer in pointers]
    unique = {id(item): item for item in (*headers, *pointers, *owners) if item is not None}
    return tuple(unique.values())


class Arena:
    """The memory of one replay: ``memory`` (the blocks, held while the arena is),
    ``addresses`` and ``arrays`` (the address of each allocation and the array of each
    returned one, None for scratch, by allocation index) and the ``stream`` it was used on."""

    __slots__ = ("stream", "memory", "addresses", "arrays", "_headers", "_shapes", "_watched", "_counts")

    def __init__(self, stream, memory, addresses, arrays):
        self.stream, self.memory, self.addresses, self.arrays = stream, memory, addresses, arrays
        self._watched = None

    def watch(self):
        """Note the reference counts of the arena's arrays, their memory pointers and the
        memory behind them, with nothing but the arena referring to them (the caller holds
        none of them): ``free`` compares with these."""
        self._headers = tuple(array for array in self.arrays if array is not None)
        self._shapes = list(map(_SHAPE, self._headers))
        self._watched = _watched(self._headers, self.memory)  # built apart: no local refers to them here
        self._counts = list(map(sys.getrefcount, self._watched))

    def free(self, stream):
        """True where the arena may serve a replay on ``stream``: it was watched, last used on
        that stream, and nothing outside it refers to its arrays or memory (their reference
        counts are those ``watch`` noted, no weak reference, shapes unchanged)."""
        return (
            stream == self.stream
            and self._watched is not None
            and list(map(sys.getrefcount, self._watched)) == self._counts
            and not any(map(weakref.getweakrefcount, self._headers))
            and list(map(_SHAPE, self._headers)) == self._shapes
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

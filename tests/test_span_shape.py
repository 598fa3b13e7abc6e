"""Which fused attention shapes run on the head-span kernels (gpu/attention.py: _span_shape),
without a GPU: arrays stand in with an address and an item size."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from cupy_csrattn.gpu.attention import _head_chunk, _span_shape


def _array(address, dtype=np.float32):
    return SimpleNamespace(data=SimpleNamespace(ptr=address), dtype=np.dtype(dtype))


ALIGNED = [_array(4096), _array(8192)]


@pytest.mark.parametrize(
    "heads,depth,features,want",
    [
        (8, 16, 16, (4, 4, 1)),  # 4 lanes per head, one 4-element vector each
        (4, 64, 64, (8, 4, 2)),
        (1, 64, 64, (16, 4, 1)),  # 16 lanes cover the head: two edge groups per warp
        (3, 5, 3, (8, 1, 1)),  # 3 heads take the lanes of 4; odd widths load element by element
        (32, 16, 16, (1, 4, 4)),
        (32, 32, 32, None),  # a lane would need 32 elements
        (33, 4, 4, None),  # more heads than lanes
        (1, 150, 2, None),  # odd widths: at most 4 elements per lane
        (8, 0, 16, (4, 4, 1)),  # gat: no q or k rows
        (2, 3, 3, (4, 1, 1)),  # 4 lanes cover a head of 3: four edge groups
    ],
)
def test_span_shape(heads, depth, features, want):
    assert _span_shape(heads, depth, features, ALIGNED) == want


def test_misaligned_rows_load_element_by_element():
    assert _span_shape(8, 16, 16, [_array(4096), _array(4100)]) == (4, 1, 4)


def test_float16_loads_16_bytes_and_takes_more_edge_groups():
    halves = [_array(4096, np.float16), _array(8192, np.float16)]
    assert _span_shape(8, 16, 16, halves) == (2, 8, 1)  # two edge groups of 16 lanes
    assert _span_shape(4, 64, 64, halves) == (8, 8, 1)
    assert _span_shape(8, 12, 12, halves) == (4, 4, 1)  # widths not divisible by 8: 8-byte loads
    assert _span_shape(8, 16, 16, [_array(4096, np.float16), _array(4104, np.float16)]) == (4, 4, 1)


@pytest.mark.parametrize(
    "heads,depth,features,itemsize,want",
    [
        (24, 5, 5, 4, (16, 128)),  # 2 lanes of 4 single elements cover 5: 16 heads, then 8
        (40, 4, 4, 4, (32, 512)),  # one lane per head, 32 heads, then 8
        (4, 300, 300, 4, (1, 512)),  # a head takes the whole warp
        (4, 300, 300, 2, (1, 512)),  # float16 of a width not divisible by 8: 8-byte loads
        (2, 0, 512, 2, (1, 512)),  # gat, float16: 16-byte loads of 8, two per lane
        (1, 600, 600, 4, (None, 512)),  # wider than the kernels take
        (2, 150, 150, 8, (None, 128)),  # odd width: single elements, at most 4 per lane
    ],
)
def test_head_chunk(heads, depth, features, itemsize, want):
    """Heads per launch where edge data comes with a shape the head-span kernels do not take
    whole, and the widest head they take."""
    assert _head_chunk(heads, depth, features, itemsize) == want


def test_span_shape_without_edge_groups():
    """Without edge groups a head takes its whole share of the warp, loads of at most 4."""
    halves = [_array(4096, np.float16), _array(8192, np.float16)]
    assert _span_shape(8, 16, 16, halves, groups=False) == (4, 4, 1)
    assert _span_shape(1, 64, 64, ALIGNED, groups=False) == (32, 4, 1)
    assert _span_shape(32, 16, 16, ALIGNED, groups=False) == (1, 4, 4)


class _StandIn:
    """A device array as the head chunking sees it: shape, dtype, address; a slice of heads is
    a view at its offset; writes go nowhere."""

    def __init__(self, shape, dtype, address, contiguous=True):
        self.shape, self.ndim, self.dtype = shape, len(shape), np.dtype(dtype)
        self.data = SimpleNamespace(ptr=address)
        self.contiguous = contiguous

    def __getitem__(self, index):
        heads = index[1]
        offset = heads.start * math.prod(self.shape[2:]) * self.dtype.itemsize
        shape = (self.shape[0], heads.stop - heads.start, *self.shape[2:])
        return _StandIn(shape, self.dtype, self.data.ptr + offset, contiguous=shape == self.shape)

    def __setitem__(self, index, value):
        pass


@pytest.mark.parametrize("dtype, heads, width", [(np.float16, 8, 64), (np.float32, 4, 64), (np.float16, 1, 512)])
def test_edge_data_with_a_misaligned_input_runs_on_aligned_copies(monkeypatch, dtype, heads, width):
    """q a view one element into its buffer: its heads do not fit the head-span kernels at that
    address, while aligned copies of all of them do. The chunk of every head was the array
    itself (ascontiguousarray returns a contiguous array as it is): the call recursed until
    RecursionError. Copies are new arrays now, and the kernels run once, on them."""
    from cupy_csrattn import backend
    from cupy_csrattn.gpu import attention

    addresses = iter(range(1 << 20, 1 << 30, 1 << 20))  # a pool's blocks: aligned

    def new_like(x, order="C"):
        assert order == "C"
        return _StandIn(x.shape, x.dtype, next(addresses))

    def contiguous(x):  # as CuPy's: a contiguous array as it is
        return x if x.contiguous else new_like(x)

    fake = SimpleNamespace(array=new_like, empty_like=new_like, ascontiguousarray=contiguous)
    monkeypatch.setattr(backend, "cupy", fake)
    launched = []
    monkeypatch.setattr(attention, "run_span", lambda stage, shape, *args, **kw: launched.append((stage, shape, args)))
    monkeypatch.setattr(attention, "run_row_kernels", lambda *args, **kw: launched.append(("row kernels",)))
    itemsize = np.dtype(dtype).itemsize
    q = _StandIn((10, heads, width), dtype, (1 << 12) + itemsize)
    k, v, out = (_StandIn((10, heads, width), dtype, (j + 2) << 12) for j in range(3))
    lse, edge = _StandIn((10, heads), np.float32, 5 << 12), _StandIn((20, heads, width), dtype, 6 << 12)
    attention.graph_attention(None, q, k, v, 0.125, out, lse, edge_feat=edge)
    assert len(launched) >= 1 and all(stage == "forward" and shape is not None for stage, shape, _ in launched)
    assert all(x.data.ptr % 16 == 0 for _, _, args in launched for x in args if isinstance(x, _StandIn))


def test_zero_heads_with_edge_data_take_no_chunks():
    """No heads: nothing to chunk (the chunk size was 1 << -1, a ValueError)."""
    from cupy_csrattn.gpu.attention import _head_chunks

    q, k, v = (_StandIn((10, 0, 1024), np.float32, j << 12) for j in (1, 2, 3))
    edge = _StandIn((20, 0, 1024), np.float32, 4 << 12)
    assert _head_chunks(q, k, v, edge=edge, edge_name="edge_feat") is None

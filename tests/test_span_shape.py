"""Which fused attention shapes run on the head-span kernels (gpu/attention.py: _span_shape),
without a GPU: arrays stand in with an address and an item size."""

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

"""hypothesis strategies for random CSR graphs and op shapes (the named graphs are in
cupy_csrattn.testing.graphs)."""

import numpy as np
from hypothesis import strategies as st

from cupy_csrattn.testing.graphs import GraphData


def degree_sequences(max_rows=12, max_degree=9, hub_degrees=(150, 600)):
    """Lists of row degrees: empty lists, zero-degree rows, and now and then one huge row."""

    @st.composite
    def build(draw):
        degrees = draw(st.lists(st.integers(0, max_degree), max_size=max_rows))
        if degrees and hub_degrees and draw(st.integers(0, 7)) == 0:
            where = draw(st.integers(0, len(degrees) - 1))
            degrees[where] = draw(st.integers(*hub_degrees))
        return degrees

    return build()


@st.composite
def csr_graphs(draw, max_rows=12, max_degree=9, max_src=15, hub_degrees=(150, 600)):
    """Random CSR graphs: a degree sequence, then the source index of every edge.

    num_src == num_dst about half the time, otherwise anything from 1 (0 when there
    are no edges) to max_src. Columns are left unsorted half the time; small
    num_src makes duplicate edges common. Index dtype int32 or int64.
    """
    degrees = draw(degree_sequences(max_rows, max_degree, hub_degrees))
    num_edges = sum(degrees)
    if degrees and draw(st.booleans()):
        num_src = len(degrees)
    else:
        num_src = draw(st.integers(1 if num_edges else 0, max_src))
    dtype = draw(st.sampled_from([np.int32, np.int64]))
    indptr = np.zeros(len(degrees) + 1, dtype=dtype)
    indptr[1:] = np.cumsum(degrees, dtype=np.int64)
    if num_edges == 0:
        indices = np.zeros(0, dtype=dtype)
    elif num_edges <= 64:
        indices = np.array(
            draw(st.lists(st.integers(0, num_src - 1), min_size=num_edges, max_size=num_edges)), dtype=dtype
        )
    else:
        seed = draw(st.integers(0, 2**32 - 1))
        indices = np.random.default_rng(seed).integers(0, num_src, num_edges).astype(dtype)
    if draw(st.booleans()):
        for d in range(len(degrees)):
            indices[indptr[d] : indptr[d + 1]].sort()
    return GraphData(indptr, indices, num_src)


# None: no head axis at all; a tuple: a trailing shape S of edge arrays (E, *S) and node
# arrays (N, *S, F), (2, 1) being DGL's and PyG's (E, H, 1) layout
heads = st.sampled_from([None, 1, 3, 8, (1, 3), (2, 1), (2, 1, 2)])
features = st.sampled_from([1, 2, 5, 8])  # odd and even F
float_dtypes = st.sampled_from([np.float32, np.float64])
seeds = st.integers(0, 2**32 - 1)

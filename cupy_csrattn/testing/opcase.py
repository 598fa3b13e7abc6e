"""OpCase, one op call form of the case table (testing.cases), and the random inputs the cases make."""

from dataclasses import dataclass

import numpy as np

from cupy_csrattn.ops.registry import OPS
from cupy_csrattn.testing.arrays import edge_array, node_scalars, node_vectors
from cupy_csrattn.testing.compare import lse_dtype
from cupy_csrattn.testing.graphs import num_dst_of

SDDMM_SCALE = 0.7
ATTN_SCALE = 0.3
GAT_SLOPE = 0.05


def qk_width(F):
    """q/k feature width D, different from the value width F."""
    return F + 1


@dataclass(frozen=True)
class OpCase:
    name: str
    op: str  # name of the registered op it calls
    make: object  # (rng, graph, H, F, dtype) -> (args tuple, kwargs dict) of NumPy inputs
    reference: object  # (graph, args, kwargs) -> tuple of float64 arrays (None where the op returns None)
    out_index: object = 0  # output that out= receives; None: the op takes no out=
    lse_index: object = None  # output that is an lse
    aux: tuple = ()  # positional args that do not take part in dtype promotion (lse)
    # Positional args that enter the outputs linearly, as terms of sums (weights, values,
    # features, gradients): the reference on their absolute values gives, per output element,
    # the sum of its terms' magnitudes, the scale of its rounding error when the sum cancels.
    summed: tuple = ()

    def __str__(self):
        return self.name

    def run(self, graph, args, kwargs):
        result = OPS[self.op].function(graph, *args, **kwargs)
        return result if isinstance(result, tuple) else (result,)

    def magnitudes(self, graph, args, kwargs):
        """Per output, the sum of the magnitudes of each element's terms (see ``summed``), or None."""
        if not self.summed:
            return None
        args = tuple(np.abs(a) if i in self.summed and a is not None else a for i, a in enumerate(args))
        return self.reference(graph, args, kwargs)

    def float_args(self, args, kwargs):
        """The inputs whose dtypes decide the result dtype."""
        return [a for i, a in enumerate(args) if a is not None and i not in self.aux]

    def expected_dtype(self, index, args, kwargs):
        result = np.result_type(*[a.dtype for a in self.float_args(args, kwargs)])
        return lse_dtype(result) if index == self.lse_index else result


# ---------------------------------------------------------------- input makers


def make_scores(rng, g, H, dtype):
    return edge_array(rng, len(g.indices), H, dtype, scale=2.0)


def make_values(rng, g, H, F, dtype):
    return node_vectors(rng, g.num_src, H, F, dtype)


def make_grad_out(rng, g, H, F, dtype):
    return node_vectors(rng, num_dst_of(g), H, F, dtype)


def make_qkv(rng, g, H, F, dtype):
    D = qk_width(F)
    return (
        node_vectors(rng, num_dst_of(g), H, D, dtype),
        node_vectors(rng, g.num_src, H, D, dtype),
        make_values(rng, g, H, F, dtype),
    )


def make_gat_inputs(rng, g, H, F, dtype):
    return (
        node_scalars(rng, num_dst_of(g), H, dtype),
        node_scalars(rng, g.num_src, H, dtype),
        make_values(rng, g, H, F, dtype),
    )

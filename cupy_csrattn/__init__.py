"""Attention over sparse graphs in CSR form (row = destination node, column = source neighbour)."""

from cupy_csrattn.graph import CSRGraph
from cupy_csrattn.ops.aggregate import attention_aggregate, attention_aggregate_backward
from cupy_csrattn.ops.attention import (
    gat_attention,
    gat_attention_backward,
    graph_attention,
    graph_attention_backward,
)
from cupy_csrattn.ops.gatv2 import gatv2_attention, gatv2_attention_backward
from cupy_csrattn.ops.sddmm import sddmm, sddmm_backward
from cupy_csrattn.ops.softmax import edge_softmax, edge_softmax_backward
from cupy_csrattn.ops.spmm import spmm, spmm_backward
from cupy_csrattn.ops.warmup import warmup

__version__ = "0.1.0"

__all__ = [
    "CSRGraph",
    "attention_aggregate",
    "attention_aggregate_backward",
    "edge_softmax",
    "edge_softmax_backward",
    "gat_attention",
    "gat_attention_backward",
    "gatv2_attention",
    "gatv2_attention_backward",
    "graph_attention",
    "graph_attention_backward",
    "sddmm",
    "sddmm_backward",
    "spmm",
    "spmm_backward",
    "warmup",
]

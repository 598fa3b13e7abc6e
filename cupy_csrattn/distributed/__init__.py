"""Every op on a graph partitioned over Dask workers (``pip install "cupy_csrattn[distributed]"``).

    from distributed import Client, LocalCluster
    import cupy_csrattn.distributed as cad

    client = Client(LocalCluster(n_workers=2))     # or Client(cad.gpu_cluster()): one worker per GPU
    pg = cad.PartitionedGraph.from_scipy(A, client) # one block of rows per worker; exchange="nccl" on GPUs
    out = cad.graph_attention(pg, pg.as_node_array(q), pg.as_node_array(k, "src"), pg.as_node_array(v, "src"))

``import cupy_csrattn`` does not import this subpackage, nor Dask.
"""

from cupy_csrattn.distributed.cluster import gpu_cluster
from cupy_csrattn.distributed.graph import DEFAULT_TIMEOUT, EXCHANGES, PartitionedGraph
from cupy_csrattn.distributed.ops import (
    SIGNATURES,
    attention_aggregate,
    attention_aggregate_backward,
    edge_softmax,
    edge_softmax_backward,
    gat_attention,
    gat_attention_backward,
    gatv2_attention,
    gatv2_attention_backward,
    graph_attention,
    graph_attention_backward,
    sddmm,
    sddmm_backward,
    spmm,
    spmm_backward,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "EXCHANGES",
    "PartitionedGraph",
    "SIGNATURES",
    "attention_aggregate",
    "attention_aggregate_backward",
    "edge_softmax",
    "edge_softmax_backward",
    "gat_attention",
    "gat_attention_backward",
    "gatv2_attention",
    "gatv2_attention_backward",
    "gpu_cluster",
    "graph_attention",
    "graph_attention_backward",
    "sddmm",
    "sddmm_backward",
    "spmm",
    "spmm_backward",
]

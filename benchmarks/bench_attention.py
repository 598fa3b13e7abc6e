"""GPU benchmark of sddmm and the fused graph_attention, gat_attention and gatv2_attention,
forward and backward.

Run on a machine with a GPU, from the repository root:
    PYTHONPATH=. python3 benchmarks/bench_attention.py [--quick] [--only NAME ...] [--no-baselines]
        [--repeat N] [--out FILE] [graph.mtx ...]
Writes benchmarks/results/attention_<gpu name>.json (or --out FILE) and prints each record. Against, in the
same run: this library's unfused chain (sddmm -> edge_softmax -> spmm, and their backward),
a plain CuPy composition with cuSPARSE, and PyG-style message passing (gather, softmax,
scatter-add; autograd for the backward) when torch_geometric is importable. Each record of
the fused ops holds peak_extra_bytes: the device memory the call allocates beyond its inputs
(and beyond `out` where it is passed in: the forward of csrattn and of the unfused chain).
The backward cases time forward + backward together (float32 and float16, both shapes).
Each record of the fused ops also holds its fraction of the gather floor (the bytes gathered
with no reuse, cupy_csrattn.bench.fused.gather_floor_bytes, at the same copy bandwidth as the
roofline), and each backward record the backward alone: its time less the forward case's of
the same op, dtype, H and F in this run, and that over the forward's.
Graphs and timing as in bench_gpu.py.
"""

import sys

import bench_gpu


def cases():
    from cupy_csrattn.bench import Case

    f32, f16 = "float32", "float16"
    result = [Case("sddmm", f32, 8, 16), Case("sddmm", f16, 8, 16, baselines=False)]
    for op in ("graph_attention", "gat_attention", "gatv2_attention"):
        for dtype in (f32, f16):  # float16 against this library's float32 only
            for H, F in ((8, 16), (4, 64)):
                baselines = dtype == f32
                result += [Case(op, dtype, H, F, baselines), Case(op + "_backward", dtype, H, F, baselines)]
    return result


if __name__ == "__main__":
    sys.exit(bench_gpu.main(cases, "attention", __doc__))

"""Cases, and running them: one graph at a time, the library's op then each baseline.

Each time is the median of device-synchronized calls after warm-up, on fresh random data;
inputs are rotated between several sets when they would fit in L2. A record holds the
case, the method, its milliseconds, the op's byte count (its registry byte model: a
no-reuse lower bound) and that count's time at the roofline bandwidth; a fused op's record
also its gather floor at the same bandwidth, and a fused backward case's its backward-only
time (see :mod:`cupy_csrattn.bench.fused`).
"""

import functools
import gc
import math
from dataclasses import dataclass

import numpy as np

import cupy_csrattn as ca
from cupy_csrattn import backend
from cupy_csrattn.bench import fused, primitives, simple_kernels
from cupy_csrattn.ops.registry import OPS

#: Inputs are rotated between sets when one (E, 8) float32 edge array fits in this (an L2).
L2_BYTES = 60 << 20

#: How the bench times each op, in the order ``csrattn bench`` runs them: every registered op.
TIMERS = {
    "edge_softmax": primitives.edge_softmax,
    "edge_softmax_backward": primitives.edge_softmax_backward,
    "spmm": primitives.spmm,
    "spmm_backward": primitives.spmm_backward,
    "attention_aggregate": primitives.attention_aggregate,
    "attention_aggregate_backward": primitives.attention_aggregate_backward,
    "sddmm": primitives.sddmm,
    "sddmm_backward": primitives.sddmm_backward,
    "graph_attention": fused.forward,
    "gat_attention": fused.forward,
    "graph_attention_backward": fused.forward_backward,
    "gat_attention_backward": fused.forward_backward,
    "gatv2_attention": fused.forward,
    "gatv2_attention_backward": fused.forward_backward,
}
#: The ops the bench can time, in the order they are run.
BENCH_OPS = tuple(TIMERS)
#: The arrays one case of each op holds, per input set, as counts of (E, H) edge arrays and of
#: (N, H, F) node arrays: its inputs, its outputs and the gradients it is given or returns.
#: The check before a case draws anything sums these, not the op's byte model (OPS[op].bytes),
#: which counts bytes moved: a gathered node row once per edge, E / N times its memory.
HELD_ARRAYS = {
    "edge_softmax": (2, 0),
    "edge_softmax_backward": (3, 0),
    "spmm": (1, 2),
    "spmm_backward": (2, 3),
    "attention_aggregate": (1, 2),
    "attention_aggregate_backward": (2, 3),
    "sddmm": (1, 2),
    "sddmm_backward": (1, 4),
    "graph_attention": (0, 4),
    "gat_attention": (0, 2),
    "graph_attention_backward": (0, 8),
    "gat_attention_backward": (0, 4),
    "gatv2_attention": (0, 3),
    "gatv2_attention_backward": (0, 6),
}


def held_bytes(graph, op, dtype, H, F):
    """The bytes of the arrays a case of ``op`` holds for one input set (HELD_ARRAYS), with
    four (N, H) arrays beside them (a row's log-sum-exp, gat's per-node scores)."""
    edge_arrays, node_arrays = HELD_ARRAYS[op]
    nodes = max(graph.num_dst, graph.num_src)
    elements = edge_arrays * graph.num_edges * H + node_arrays * nodes * H * F + 4 * nodes * H
    return elements * np.dtype(dtype).itemsize


#: Registered ops the bench cannot time (see TIMERS).
UNTIMED_OPS = tuple(name for name in OPS if name not in TIMERS)


def _ignores_features(op):
    """True when the op's byte model does not depend on F: an op on edge arrays only."""
    probe = ca.CSRGraph(np.array([0, 1], np.int32), np.array([0], np.int32), 1)
    return op.bytes(probe, np.float32, 1, 1) == op.bytes(probe, np.float32, 1, 2)


#: Ops without a feature axis: their cases ignore ``F`` (recorded as 0).
EDGE_ONLY_OPS = frozenset(name for name in BENCH_OPS if _ignores_features(OPS[name]))


@dataclass(frozen=True)
class Case:
    """One timed configuration: an op on one dtype, head count and feature width."""

    op: str
    dtype: str
    H: int
    F: int
    baselines: bool = True


def make_cases(ops, dtypes, heads, features):
    """The grid ops x dtypes x heads x features, without repeating ``F`` for edge-only ops."""
    cases = []
    for op in ops:
        if op not in TIMERS:
            raise ValueError(f"unknown op {op!r}; choose from {', '.join(BENCH_OPS)}")
        for dtype in dtypes:
            dtype = np.dtype(dtype).name
            for H in heads:
                for F in [0] if op in EDGE_ONLY_OPS else features:
                    case = Case(op, dtype, int(H), int(F))
                    if case not in cases:
                        cases.append(case)
    return cases


class GraphBench:
    """Times cases on one graph: the library's op, then each applicable baseline.

    Parameters
    ----------
    name : str
        Graph name for the records.
    graph : CSRGraph
        Moved to ``device``.
    device : GpuDevice or CpuDevice
    bandwidth : float
        Roofline bytes per second.
    pyg : (torch, torch_geometric.utils) or (None, None)
        PyG baselines on the GPU when given.
    on_record : callable, optional
        Called with each record as it is made.
    """

    def __init__(self, name, graph, device, bandwidth, pyg=(None, None), on_record=None):
        self.name = name
        self.device = device
        self.xp = device.xp
        self.graph = graph.to_gpu() if device.kind == "gpu" else graph.to_cpu()
        self.rows = self.graph.row_of_edge()
        self.bandwidth = bandwidth
        self.pyg = tuple(pyg) if device.kind == "gpu" else (None, None)
        self.torch = self.pyg[0]
        self.on_record = on_record
        self.records = []
        self.skipped = []
        self.rs = device.random_state(5)
        E = self.graph.num_edges
        self.small = E * 8 * 4 < L2_BYTES
        self.sets = 8 if self.small else 1
        ca.edge_softmax(self.graph, self.xp.zeros((E, 1), np.float32))  # builds and caches the plan
        self._simple = None
        self._library_call = None  # (fn_of_set, data_sets) of the case's own op, for the simple baseline

    def simple(self):
        """The simple kernels on this bench's GPU graph (built on first use)."""
        if self._simple is None:
            self._simple = simple_kernels.SimpleKernels(self.graph)
        return self._simple

    def run(self, case):
        """Time one case (its records go to ``self.records``, skips to ``self.skipped``)."""
        nbytes = OPS[case.op].bytes(self.graph, np.dtype(case.dtype), case.H, case.F)
        self._library_call = None
        # The case's arrays (each input set) must fit the device before any is drawn: an
        # allocation past the host's memory may succeed and the process be killed as it is
        # written. A case that cannot fit is skipped, its reason recorded; the others run.
        try:
            what = f"{case.op} with H={case.H}, F={case.F} on {self.name}"
            held = held_bytes(self.graph, case.op, case.dtype, case.H, case.F)
            backend.check_memory(what, held * self.sets, on_gpu=self.device.kind == "gpu")
        except (MemoryError, ValueError) as error:
            self.skip(case, "csrattn", f"{type(error).__name__}: {error} (no method timed)")
            return
        TIMERS[case.op](self, case, nbytes)

    # -- for the timers -------------------------------------------------------------------
    def rand(self, shape, dtype=np.float32):
        """Standard normal values of ``dtype`` on the device (drawn in float32)."""
        return self.device.standard_normal(self.rs, shape).astype(dtype)

    def composed_name(self):
        """The method name of a plain array composition on this device."""
        return "cupy" if self.device.kind == "gpu" else "numpy"

    def at_bandwidth(self, name, nbytes, ms):
        """{name_ms, name_fraction}: the time of ``nbytes`` at the roofline bandwidth, and that
        time over ``ms`` (the fraction of the bound reached)."""
        bound_ms = nbytes / self.bandwidth * 1e3
        return {f"{name}_ms": bound_ms, f"{name}_fraction": bound_ms / ms if ms > 0 else math.inf}

    def record(self, case, method, ms, nbytes, extra=None):
        graph = self.graph
        entry = dict(
            graph=self.name,
            num_dst=graph.num_dst,
            num_edges=graph.num_edges,
            op=case.op,
            dtype=np.dtype(case.dtype).name,
            H=case.H,
            F=case.F,
            method=method,
            ms=ms,
            bytes=nbytes,
        )
        entry.update(self.at_bandwidth("roofline", nbytes, ms))
        if case.op in fused.FLOOR_OPS:
            floor = fused.gather_floor_bytes(graph, case.op, case.dtype, case.H, case.F)
            entry.update(gather_floor_bytes=floor, **self.at_bandwidth("gather_floor", floor, ms))
            entry.update(fused.backward_estimate(entry, self.records))
        entry.update(extra or {})
        self.records.append(entry)
        if self.on_record is not None:
            self.on_record(entry)
        return entry

    def skip(self, case, method, reason):
        self.skipped.append(
            dict(
                graph=self.name,
                op=case.op,
                dtype=np.dtype(case.dtype).name,
                H=case.H,
                F=case.F,
                method=method,
                reason=reason,
            )
        )

    @staticmethod
    def _rotating(fn_of_set, data_sets):
        """A function of no argument calling ``fn_of_set`` on the data sets in turn."""
        counter = [0]

        def call():
            fn_of_set(data_sets[counter[0] % len(data_sets)])
            counter[0] += 1

        return call

    def timed(self, fn_of_set, data_sets):
        """Milliseconds of ``fn_of_set`` on the data sets in turn."""
        return self.device.time(self._rotating(fn_of_set, data_sets))

    def extras(self, fn_of_set, data_sets):
        """{"us_per_call_host": ...} on the GPU for graphs small enough for launch overhead to show."""
        if not self.small or self.device.kind != "gpu":
            return {}
        return {"us_per_call_host": self.device.time_host_call(lambda: fn_of_set(data_sets[0]))}

    def memory(self, fn_of_set, data_sets):
        """{"peak_extra_bytes": ...} of one call, where the device measures it."""
        peak = self.device.peak_extra_bytes(lambda: fn_of_set(data_sets[0]))
        return {} if peak is None else {"peak_extra_bytes": int(peak)}

    def library(self, case, fn_of_set, data_sets, nbytes, host_call=False, memory=False):
        """Time and record the library's op (method "csrattn")."""
        ms = self.timed(fn_of_set, data_sets)
        self._library_call = fn_of_set, data_sets
        extra = self.extras(fn_of_set, data_sets) if host_call else {}
        if memory:
            extra.update(self.memory(fn_of_set, data_sets))
        self.record(case, "csrattn", ms, nbytes, extra)

    def simple_baseline(self, case, fn_of_set, data_sets, nbytes):
        """Time a simple kernel (``fn_of_set(kernels, data)`` calls a SimpleKernels method) as the
        baseline "simple", where it applies: float32 on the GPU. On a small graph (a synced
        call mostly host time, which drifts within a run) it takes turns, call by call, with
        the case's own op (timed before it by ``library``), whose time in those turns the
        record keeps as ``csrattn_ms_in_turns``: the ratio of the two holds."""
        if self.device.kind != "gpu" or np.dtype(case.dtype) != np.float32:
            return
        try:
            kernels = self.simple()
            fits = fn_of_set(kernels, data_sets[0]) is not None
        except Exception as error:  # reported like any baseline that cannot run
            self.skip(case, "simple", f"{type(error).__name__}: {backend.first_line(error)}")
            return
        if not fits:
            self.skip(case, "simple", f"the largest row ({kernels.max_degree} edges) does not fit in shared memory")
            return
        beside = self._library_call if self.small else None
        self.baseline(case, "simple", functools.partial(fn_of_set, kernels), data_sets, nbytes, beside=beside)

    def baseline(self, case, method, fn_of_set, data_sets, nbytes, memory=False, beside=None):
        """Time and record a baseline; one that fails is recorded as skipped, with the reason.
        ``beside``: (fn_of_set, data_sets) of the library's op, timed in turns with the
        baseline, call by call, its time kept as ``csrattn_ms_in_turns``."""
        try:
            if beside is None:
                ms, extra = self.timed(fn_of_set, data_sets), {}
            else:
                calls = [self._rotating(fn_of_set, data_sets), self._rotating(*beside)]
                ms, ours_ms = self.device.time_in_turns(calls)
                extra = {"csrattn_ms_in_turns": ours_ms}
            if memory:
                extra.update(self.memory(fn_of_set, data_sets))
        except Exception as error:  # a baseline that cannot run this case is reported, not fatal
            self.skip(case, method, f"{type(error).__name__}: {backend.first_line(error)}")
            self.device.free()
            return
        self.record(case, method, ms, nbytes, extra)


def run_cases(graphs, cases, device, bandwidth, pyg=(None, None), on_graph=None, on_case=None, on_record=None):
    """Run every case on every graph.

    Parameters
    ----------
    graphs : iterable of (name, build)
        ``build()`` returns a host CSRGraph; graphs are built one at a time.
    cases : list of Case
    device : GpuDevice or CpuDevice
    bandwidth : float
        Roofline bytes per second.
    pyg : (torch, torch_geometric.utils) or (None, None)
    on_graph : callable, optional
        ``on_graph(name, graph)`` after a graph is built (host graph).
    on_case : callable, optional
        ``on_case(name, case)`` after each case.
    on_record : callable, optional
        ``on_record(record)`` after each timing.

    Returns
    -------
    records : list of dict
    skipped : list of dict
        Baselines that could not run here, with the reason.
    """
    records, skipped = [], []
    for name, build in graphs:
        graph = build()
        if on_graph is not None:
            on_graph(name, graph)
        bench = GraphBench(name, graph, device, bandwidth, pyg, on_record)
        for case in cases:
            bench.run(case)
            if on_case is not None:
                on_case(name, case)
        records += bench.records
        skipped += bench.skipped
        del bench, graph
        gc.collect()  # a host graph and its device twin refer to each other
        device.free()
    return records, skipped

"""Repeated GPU calls (gpu/replay.py) and CUDA graphs: every op and case of the case table,
each dtype, with and without out=, equal bit for bit to the full path on the same inputs."""

import collections

import numpy as np
import pytest
from helpers import poison, require_cupy

from cupy_csrattn.gpu import plan, replay
from cupy_csrattn.ops.registry import OPS
from cupy_csrattn.testing.arrays import make_graph, to_xp
from cupy_csrattn.testing.cases import CASES
from cupy_csrattn.testing.compare import to_np
from cupy_csrattn.testing.graphs import hub, odd_sizes


@pytest.fixture
def cupy():
    return require_cupy()


@pytest.fixture(params=["odd_sizes", "hub-split"])
def graph_data(request, monkeypatch):
    if request.param == "odd_sizes":
        return odd_sizes()
    # The hub row splits into several items, merged in a second kernel.
    monkeypatch.setattr(plan, "WHOLE_ROW_EDGES", 64)
    monkeypatch.setattr(plan, "FUSED_WHOLE_ROW_EDGES", min(64, plan.FUSED_WHOLE_ROW_EDGES))
    return hub()


def _results(result):
    return result if isinstance(result, tuple) else (result,)


def _assert_same(got, want, name):
    for i, (g, w) in enumerate(zip(_results(got), _results(want))):
        assert (g is None) == (w is None), f"{name}: output {i}"
        if g is not None:
            assert g.shape == w.shape and g.dtype == w.dtype, f"{name}: output {i}"
            assert np.array_equal(to_np(g), to_np(w), equal_nan=True), f"{name}: output {i} differs from the full path"


def _replay_records(graph):
    return [r for r in graph.cached("replay records", dict).values() if isinstance(r, replay.Replay)]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_repeated_calls_equal_the_full_path(cupy, graph_data, case, dtype):
    rng = np.random.default_rng(3)
    graph = make_graph(cupy, graph_data)
    public = OPS[case.op].function
    for call in range(4):  # the first runs in full, the second is recorded, the others replay
        args, kwargs = to_xp(cupy, case.make(rng, graph_data, 2, 5, dtype))
        got = public(graph, *args, **kwargs)
        want = public.__wrapped__(graph, *args, **kwargs)
        _assert_same(got, want, f"{case} call {call}")
    assert len(_replay_records(graph)) == 1, "the repeated call was not replayed"


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_replays_take_the_memory_of_dropped_results_and_leave_held_ones(cupy, case, dtype):
    """Results the caller dropped: the next replay takes their memory again (the record's
    arena) and writes the full path's results there; results the caller holds keep their
    values through later replays."""
    rng = np.random.default_rng(8)
    graph_data = odd_sizes()
    graph = make_graph(cupy, graph_data)
    public = OPS[case.op].function
    calls = [to_xp(cupy, case.make(rng, graph_data, 2, 5, dtype)) for _ in range(7)]
    wants = [public.__wrapped__(graph, *args, **kwargs) for args, kwargs in calls]
    arenas = []
    for call, ((args, kwargs), want) in enumerate(zip(calls[:4], wants)):  # full, recorded, two replays
        got = public(graph, *args, **kwargs)
        _assert_same(got, want, f"{case} call {call}")
        del got
        records = _replay_records(graph)
        arenas.append(records[0]._arenas[-1] if records and records[0]._arenas else None)
    assert arenas[2] is not None and arenas[3] is arenas[2], "the replay did not take the dropped results' memory"
    held = [public(graph, *args, **kwargs) for args, kwargs in calls[4:]]
    for call, (got, want) in enumerate(zip(held, wants[4:]), 4):
        _assert_same(got, want, f"{case} held call {call}")


@pytest.mark.parametrize("case", CASES, ids=str)
def test_replays_taking_kept_arenas_in_turns_equal_the_full_path(cupy, graph_data, case):
    """Each call's results held for two more calls, its inputs one of four sets in turn: the
    record's replays take four kept arenas in turns (a record of several kernels giving each
    a graph of its own once taken again, its nodes set where an input moved), and every
    result equals the full path's while it is held."""
    rng = np.random.default_rng(9)
    graph = make_graph(cupy, graph_data)
    public = OPS[case.op].function
    calls = [to_xp(cupy, case.make(rng, graph_data, 2, 5, np.float32)) for _ in range(4)]
    wants = [public.__wrapped__(graph, *args, **kwargs) for args, kwargs in calls]
    held = collections.deque(maxlen=3)
    for call in range(14):
        args, kwargs = calls[call % 4]
        held.append((public(graph, *args, **kwargs), call % 4))
        for got, which in held:
            _assert_same(got, wants[which], f"{case} call {call}, inputs {which}")
    (record,) = _replay_records(graph)
    if record._layout.num_allocations:
        # Four arenas take turns (three held, one free), where HELD_BYTES lets the record keep
        # four; with fewer, every replay finds them held and replaces the oldest.
        kept = record._layout.kept
        assert len(record._arenas) == min(4, kept)
        if record._graph is not None and kept >= 4:
            assert all(arena.graph for arena in record._arenas), "a kept arena taken again has no graph of its own"


@pytest.mark.parametrize("case", [c for c in CASES if c.out_index is not None], ids=str)
def test_replayed_call_writes_out(cupy, case):
    rng = np.random.default_rng(4)
    graph_data = odd_sizes()
    graph = make_graph(cupy, graph_data)
    public = OPS[case.op].function
    for _ in range(3):
        args, kwargs = to_xp(cupy, case.make(rng, graph_data, 3, 4, np.float32))
        want = _results(public.__wrapped__(graph, *args, **kwargs))
        out = poison(cupy, want[case.out_index].shape, want[case.out_index].dtype)
        got = _results(public(graph, *args, **kwargs, out=out))
        assert got[case.out_index] is out
        _assert_same(got, want, str(case))
    assert _replay_records(graph)


def test_bad_input_after_replay_still_raises(cupy):
    graph_data = odd_sizes()
    graph = make_graph(cupy, graph_data)
    scores = cupy.ones((len(graph_data.indices), 2), cupy.float32)
    for _ in range(3):
        OPS["edge_softmax"].function(graph, scores)
    with pytest.raises(ValueError, match="scores"):
        OPS["edge_softmax"].function(graph, scores[:-1])
    with pytest.raises(TypeError, match="scores"):
        OPS["edge_softmax"].function(graph, scores.astype(cupy.int32))
    with pytest.raises(ValueError, match="out"):
        OPS["edge_softmax"].function(graph, scores, out=cupy.empty((3, 2), cupy.float32))


def test_replay_follows_the_arguments(cupy):
    """A replay reads the arrays of its own call: two calls with different inputs of the same
    description give their own results."""
    graph_data = odd_sizes()
    graph = make_graph(cupy, graph_data)
    rng = np.random.default_rng(5)
    inputs = [cupy.asarray(rng.standard_normal((len(graph_data.indices), 3)).astype(np.float32)) for _ in range(4)]
    public = OPS["edge_softmax"].function
    results = [public(graph, s) for s in inputs]
    for s, got in zip(inputs, results):
        _assert_same(got, public.__wrapped__(graph, s), "edge_softmax")
    assert _replay_records(graph)


def test_ops_sharing_a_description_replay_their_own_work(cupy):
    """Every case's op called in turn on one graph, three rounds: ops whose arguments have
    the same description (spmm and attention_aggregate take the same arrays) each replay
    their own recorded work."""
    graph_data = odd_sizes()
    graph = make_graph(cupy, graph_data)
    rng = np.random.default_rng(7)
    calls = [
        (str(case), OPS[case.op].function, *to_xp(cupy, case.make(rng, graph_data, 3, 4, np.float32))) for case in CASES
    ]
    scores = rng.standard_normal((len(graph_data.indices), 3)).astype(np.float32)
    values = rng.standard_normal((graph_data.num_src, 3, 4)).astype(np.float32)
    calls += [(op, OPS[op].function, to_xp(cupy, (scores, values)), {}) for op in ("spmm", "attention_aggregate")]
    for _ in range(3):
        for name, public, args, kwargs in calls:
            _assert_same(public(graph, *args, **kwargs), public.__wrapped__(graph, *args, **kwargs), name)
    assert _replay_records(graph)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_cuda_graph_capture(cupy, case, dtype):
    """Each op captured in a CUDA graph on a cached graph, launched, equals a direct call."""
    rng = np.random.default_rng(6)
    graph_data = hub()
    graph = make_graph(cupy, graph_data)
    public = OPS[case.op].function
    args, kwargs = to_xp(cupy, case.make(rng, graph_data, 2, 5, dtype))
    # The inputs are copied on the default stream, which a non-blocking stream does not wait for.
    cupy.cuda.Device().synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        for _ in range(2):  # the plan, the transpose and the kernels exist before the capture
            public(graph, *args, **kwargs)
        stream.begin_capture(cupy.cuda.runtime.streamCaptureModeRelaxed)
        captured = public(graph, *args, **kwargs)
        cuda_graph = stream.end_capture()
        # The graph must write every result: poison those in memory of their own (a pool block
        # may still hold an earlier call's identical results), not those in an input's.
        inputs = [a for a in (*args, *kwargs.values()) if isinstance(a, cupy.ndarray)]
        for result in _results(captured):
            if result is not None and not any(cupy.may_share_memory(result, a) for a in inputs):
                result.fill(np.nan)
        cuda_graph.launch(stream)
        stream.synchronize()
        want = public.__wrapped__(graph, *args, **kwargs)
        stream.synchronize()
    _assert_same(captured, want, f"{case} captured")


def test_captured_layer_follows_inputs_written_in_place(cupy):
    """The README's pattern: a layer's forward and backward captured once, launched after
    each in-place update of its inputs, equals direct calls on the new inputs."""
    graph = make_graph(cupy, hub())
    rng = np.random.default_rng(7)

    def draw(*shape):
        return cupy.asarray(rng.standard_normal(shape))

    a_dst, a_src = draw(graph.num_dst, 4), draw(graph.num_src, 4)
    values, grad_out = draw(graph.num_src, 4, 16), draw(graph.num_dst, 4, 16)
    forward, backward = OPS["gat_attention"].function, OPS["gat_attention_backward"].function
    cupy.cuda.Device().synchronize()  # the inputs, copied on the default stream, are ready for any stream

    def layer(forward, backward):
        out, lse = forward(graph, a_dst, a_src, values, return_lse=True)
        return out, backward(graph, a_dst, a_src, values, out, grad_out, lse)

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        layer(forward, backward)
        stream.begin_capture()
        out, grads = layer(forward, backward)
        step = stream.end_capture()
        for _ in range(3):
            for x in (a_dst, a_src, values, grad_out):
                x[...] = draw(*x.shape)
            step.launch(stream)
            want_out, want_grads = layer(forward.__wrapped__, backward.__wrapped__)
            stream.synchronize()
            _assert_same(out, want_out, "captured gat_attention")
            _assert_same(grads, want_grads, "captured gat_attention_backward")


@pytest.mark.parametrize("trailing", [(2, 1), (1, 3, 2)], ids=str)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_trailing_shapes_replay(cupy, case, trailing):
    """Edge arrays (E, *S) and node arrays (N, *S, F) reach the kernels as reshaped views, not
    copies (a copy is other work, which keeps the full path): repeated calls replay."""
    rng = np.random.default_rng(7)
    graph_data = odd_sizes()
    graph = make_graph(cupy, graph_data)
    public = OPS[case.op].function
    for call in range(3):
        args, kwargs = to_xp(cupy, case.make(rng, graph_data, trailing, 4, np.float32))
        got = public(graph, *args, **kwargs)
        want = public.__wrapped__(graph, *args, **kwargs)
        _assert_same(got, want, f"{case} call {call}")
        for r in _results(got):  # node and edge arrays (N, *S, ...); a parameter's gradient (*S, D)
            assert r is None or trailing in (r.shape[1 : 1 + len(trailing)], r.shape[: len(trailing)])
    assert len(_replay_records(graph)) == 1, "the repeated call was not replayed"


def test_threads_record_and_replay_their_own_calls(cupy):
    """Several threads call ops at once on their own graphs: each record holds only its own
    thread's launches, so every call equals the full path."""
    import threading

    cases = [next(c for c in CASES if c.op == op) for op in ("edge_softmax", "attention_aggregate", "graph_attention")]
    failures = []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            graph_data = odd_sizes()
            graph = make_graph(cupy, graph_data)
            for _ in range(6):
                for case in cases:
                    public = OPS[case.op].function
                    args, kwargs = to_xp(cupy, case.make(rng, graph_data, 2, 5, np.float32))
                    got = public(graph, *args, **kwargs)
                    want = public.__wrapped__(graph, *args, **kwargs)
                    _assert_same(got, want, f"{case} in thread {seed}")
            assert _replay_records(graph), "no call was replayed"
        except BaseException as error:  # handed to the main thread
            failures.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[0]

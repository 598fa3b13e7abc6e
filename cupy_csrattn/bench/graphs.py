"""The benchmark's graphs, built on the host (the benchmark moves them to the device).

The generators and loaders are cupy_csrattn.datasets'; this module fixes the seeds, makes
every graph square (one node set for destinations and sources, as the byte counts assume)
and parses the graph specs given on the command line.
"""

import os
import pathlib
import re

import numpy as np

from cupy_csrattn import datasets
from cupy_csrattn.datasets.base import check_count, check_product
from cupy_csrattn.datasets.generators import check_rmat_memory, check_uniform_memory
from cupy_csrattn.graph import CSRGraph

#: Suffixes stripped from a graph file's name to name the graph.
FILE_SUFFIXES = (".gz", ".mtx", ".npz", ".txt", ".csv", ".tsv", ".el", ".edges")


def small_graph(offset, modulus):
    """384 rows of degree ``max(1, 18 + d % modulus - offset)``: a launch-overhead case."""
    n = 384
    rng = np.random.default_rng(modulus)
    degrees = np.maximum(1, 18 + (np.arange(n) % modulus) - offset)
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int32)
    indices = rng.integers(0, n, indptr[-1]).astype(np.int32)
    return CSRGraph(indptr, indices, n)


def uniform_graph(num_nodes, degree, seed=1):
    """Every row has ``degree`` uniformly random sources (:func:`datasets.uniform_graph`)."""
    return datasets.uniform_graph(num_nodes, degree, seed=seed)


def rmat_graph(scale, edge_factor, seed=2):
    """R-MAT with the Graph500 parameters (:func:`datasets.rmat_graph`): power-law in-degrees."""
    return datasets.rmat_graph(scale, edge_factor, seed=seed)


def dense_graph(num_nodes, degree, seed=3):
    """Few long rows: a uniform graph of large degree."""
    return uniform_graph(num_nodes, degree, seed)


def square(graph):
    """The graph padded with empty rows (or unused sources) to ``n x n``, ``n = max(shape)``.

    The benchmark uses one node set for destinations and sources (values of ``num_dst``
    rows), as the byte counts assume.
    """
    n = max(graph.shape)
    if graph.shape == (n, n):
        return graph
    indptr = graph.indptr
    if graph.num_dst < n:
        indptr = np.concatenate([indptr, np.full(n - graph.num_dst, indptr[-1], dtype=indptr.dtype)])
    return CSRGraph(indptr, graph.indices, n, check="none")


def mtx_graph(path):
    """A Matrix Market file as a square graph (row i = destination i, as scipy reads it)."""
    return square(datasets.load_mtx(path))


def file_graph(path, max_nodes=None):
    """A graph file (.mtx, .npz or an edge list; see :func:`datasets.load`) as a square graph;
    ``max_nodes`` as the loaders take it."""
    return square(datasets.load(path, max_nodes=max_nodes))


def is_generated(spec):
    """Whether ``spec`` names a generated graph (``rmat:...`` or ``uniform:...``), not a file."""
    kind, colon, _ = spec.partition(":")
    return bool(colon) and kind in ("rmat", "uniform")


def _check_generator_sizes(spec, kind, numbers):
    """A ValueError naming ``spec`` for sizes the generator refuses (a count or the edge count
    past 2**62), or the generator's MemoryError for a graph beyond this machine's memory, found
    as the spec is read: the generator, called only when the graph's turn comes, would fail
    after the graphs before it were timed."""
    if not numbers or len(numbers) > 2:
        return  # malformed: graph_from_spec says what it expects
    try:
        if kind == "rmat" and numbers[0] <= 34:  # a larger SCALE: graph_from_spec gives its range
            edge_factor = check_count("edge_factor", numbers[1]) if len(numbers) == 2 else 16
            check_product("edge_factor * 2**scale", edge_factor, 1 << numbers[0])
            check_rmat_memory(numbers[0], edge_factor)  # a MemoryError naming the generator's sizes
        elif kind == "uniform" and len(numbers) == 2:
            num_nodes, degree = check_count("num_nodes", numbers[0]), check_count("degree", numbers[1])
            check_product("num_nodes * degree", num_nodes, degree)
            check_uniform_memory(num_nodes, degree, num_nodes)
    except ValueError as error:
        raise ValueError(f"bad graph spec {spec!r}: {error}") from None


def graph_from_spec(spec, max_nodes=None):
    """Name and builder of a graph given on the command line.

    Parameters
    ----------
    spec : str
        ``rmat:SCALE`` or ``rmat:SCALE,EDGE_FACTOR`` (R-MAT, Graph500 parameters, edge factor
        16 by default), ``uniform:N,DEG`` (N rows of DEG random sources), or the path of a
        graph file (.mtx, .npz or an edge list).
    max_nodes : int, optional
        The loaders' ``max_nodes`` for a graph file (unused for a generated graph).

    Returns
    -------
    name : str
    build : callable
        Returns a host CSRGraph.

    Raises
    ------
    ValueError
        A malformed ``rmat:``/``uniform:`` spec, one of sizes the generator refuses, or a
        path that is not a file.
    FileNotFoundError
        A file spec that does not exist.
    """
    kind, _, rest = spec.partition(":")
    if is_generated(spec):
        parts = rest.split(",")
        numbers = [int(part) for part in parts] if all(re.fullmatch(r"[0-9]+", part) for part in parts) else None
        _check_generator_sizes(spec, kind, numbers)
        if (
            kind == "rmat"
            and numbers
            and len(numbers) in (1, 2)
            and 0 <= numbers[0] <= 34
            and all(v >= 0 for v in numbers)
        ):
            scale, edge_factor = numbers[0], (numbers[1] if len(numbers) == 2 else 16)
            return f"rmat-{scale}" + (f"x{edge_factor}" if edge_factor != 16 else ""), lambda: rmat_graph(
                scale, edge_factor
            )
        if kind == "uniform" and numbers and len(numbers) == 2 and min(numbers) >= 0:
            num_nodes, degree = numbers
            return f"uniform-{num_nodes}x{degree}", lambda: uniform_graph(num_nodes, degree)
        usage = "rmat:SCALE[,EDGE_FACTOR] with 0 <= SCALE <= 34" if kind == "rmat" else "uniform:N,DEG"
        raise ValueError(f"bad graph spec {spec!r}: expected {usage}")
    if not os.path.exists(spec):
        raise FileNotFoundError(2, "No such graph file (expected a file, rmat:SCALE or uniform:N,DEG)", spec)
    if not os.path.isfile(spec):
        raise ValueError(f"{spec!r} is not a file (a directory?): expected a graph file, rmat:SCALE or uniform:N,DEG")
    stem = pathlib.Path(spec).name
    for suffix in FILE_SUFFIXES:
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    return stem, lambda: file_graph(spec, max_nodes)

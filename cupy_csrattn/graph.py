"""CSRGraph: a destination-major sparse graph (row d lists the source neighbours of d)."""

import numpy as np
import scipy.sparse

from cupy_csrattn import backend
from cupy_csrattn.index_arrays import check_row_count, count_of_ids, index_array, index_input, node_count, uint64_fits

_CHECK_MODES = ("full", "fast", "none")
_INT32_MAX = np.iinfo(np.int32).max


def _read_only(array):
    """A NumPy array the graph owns, made read-only (CuPy has no such flag): what a graph hands
    out (its arrays, transpose, row_of_edge) cannot change under its cached plans by mistake."""
    if isinstance(array, np.ndarray):
        array.flags.writeable = False
    return array


class CSRGraph:
    """A graph in CSR form: row ``d`` holds the source neighbours of destination ``d``.

    Parameters
    ----------
    indptr : (num_dst + 1,) integer array
        Row pointers; row ``d`` owns edges ``indptr[d]:indptr[d + 1]``.
    indices : (E,) integer array
        Source node of each edge. Duplicates are distinct edges; columns need not be sorted.
    num_src : int, optional
        Number of source nodes. Defaults to ``max(indices) + 1`` (a device sync on the GPU).
    check : {"full", "fast", "none"}
        "full" verifies the structure: indptr starts at 0, never decreases and ends at E;
        0 <= indices < num_src. "fast" checks shapes, dtypes and every bound (indptr starts at
        0, ends at E and stays within [0, E]; 0 <= indices < num_src) but not that indptr never
        decreases. Each is one pass over the arrays with one host sync on the GPU. "none"
        checks shapes and dtypes only and trusts the caller: malformed input (an index out of
        range, a bad indptr) is then undefined behaviour, up to reading outside the arrays.
    copy : bool
        True (the default): the graph keeps its own copy of the index arrays (one copy of
        E + num_dst + 1 integers), so later changes to the caller's arrays cannot reach it.
        False: the graph keeps the caller's int32/int64 arrays as they are; the caller must
        then not modify them for as long as the graph is used, since the graph caches data
        derived from them (work plans, transpose, device copies).

    int32 and int64 indices keep their dtype; narrower or unsigned integers are converted,
    and strided views (``a[::2]``, ``a[::-1]``) made C-contiguous (a new array, whatever
    ``copy`` says). NumPy arrays give a CPU graph, CuPy arrays a GPU graph (``device``). The
    graph's arrays must not be modified in place.
    """

    def __init__(self, indptr, indices, num_src=None, *, check="full", copy=True):
        check_mode(check)
        copy = backend.flag("copy", copy)
        given_indptr, given_indices = index_input("indptr", indptr), index_input("indices", indices)
        on_gpu = backend.is_cupy_array(given_indptr) or backend.is_cupy_array(given_indices)
        indptr = index_array("indptr", given_indptr, on_gpu)
        indices = index_array("indices", given_indices, on_gpu)
        if len(indptr) == 0:
            raise ValueError("indptr must have num_dst + 1 >= 1 entries, got an empty array")
        xp = backend.array_module(on_gpu)
        if num_src is not None:
            num_src = node_count("num_src", num_src)
        unsigned64 = [name for name, a in (("indptr", indptr), ("indices", indices)) if a.dtype == np.uint64]
        if check == "full" or (unsigned64 and check == "fast" and not on_gpu):
            for name, array in (("indptr", indptr), ("indices", indices)):
                uint64_fits(name, array)  # host sync
        indptr = indptr.astype(np.int64) if indptr.dtype == np.uint64 else indptr
        indices = indices.astype(np.int64) if indices.dtype == np.uint64 else indices
        if check != "none":
            num_src = self._check_structure(xp, indptr, indices, num_src, full=check == "full")
        elif num_src is None:
            num_src = count_of_ids("indices", int(indices.max())) if len(indices) else 0  # host sync
        if copy:  # arrays converted above are new already
            indptr = _read_only(indptr.copy() if indptr is given_indptr else indptr)
            indices = _read_only(indices.copy() if indices is given_indices else indices)
        self.indptr = indptr
        self.indices = indices
        self.num_src = num_src
        self.num_dst = len(indptr) - 1
        self._cache = {}

    @staticmethod
    def _check_structure(xp, indptr, indices, num_src, full):
        """Check indptr and indices (one host sync); returns num_src (max(indices) + 1 if None).

        full: also that indptr never decreases; otherwise only that its values lie in [0, E].
        """
        num_edges = len(indices)
        parts = [indptr[0], indptr[-1], indptr.min(), indptr.max()]
        if full:
            parts.append((indptr[1:] < indptr[:-1]).any() if len(indptr) > 1 else xp.zeros((), bool))
        if num_edges:
            parts += [indices.min(), indices.max()]
        values = [int(v) for v in xp.stack([xp.asarray(p).astype(np.int64) for p in parts]).tolist()]  # host sync
        first, last, low, high = values[:4]
        if first != 0:
            raise ValueError(f"indptr must start at 0, got indptr[0] = {first}")
        if last != num_edges:
            raise ValueError(f"indptr must end at len(indices) = {num_edges}, got indptr[-1] = {last}")
        if full and values[4]:
            raise ValueError("indptr must be non-decreasing")
        if low < 0 or high > num_edges:
            raise ValueError(f"indptr values must lie in [0, len(indices) = {num_edges}], got {low} to {high}")
        if num_edges:
            low, high = values[-2:]
            if low < 0:
                raise ValueError(f"indices must be >= 0, got {low}")
            if num_src is None:
                num_src = count_of_ids("indices", high)
            if high >= num_src:
                raise ValueError(f"indices must be < num_src = {num_src}, got {high}")
        return 0 if num_src is None else num_src

    # -- construction ---------------------------------------------------------------
    @classmethod
    def from_scipy(cls, matrix, *, check="full", copy=True):
        """Graph of a scipy.sparse or cupyx.scipy.sparse matrix (CSR, CSC or COO), row i = destination i.

        Duplicate entries stay distinct edges. For CSC and COO the graph's edges are the
        matrix's stored entries sorted stably by row (``from_edge_index``'s order); ops given
        the matrix itself take and return edge arrays in the matrix's stored order. ``check`` and
        ``copy`` as for CSRGraph (with copy=False a CSR matrix's indptr and indices are
        shared, and the matrix's structure must not change afterwards); CSC and COO
        structures are always checked and converted into new arrays.
        """
        return graph_and_edge_order(matrix, check, copy=copy)[0]

    @classmethod
    def from_edge_index(cls, src, dst, num_dst=None, num_src=None):
        """Graph of an edge list, edges sorted stably by destination.

        Parameters
        ----------
        src, dst : (E,) integer arrays
            Source and destination node of each edge.
        num_dst, num_src : int, optional
            Node counts; default to the largest id + 1. Ids are checked against them (one
            device sync on the GPU). The graph's indptr has num_dst + 1 entries, so a
            num_dst left out may be at most max(2**20, 16 * E), as the loaders allow: one
            stray large id is a ValueError, not an allocation; a larger count must be given.

        Returns
        -------
        graph : CSRGraph
            Indices in the dtype of ``src`` as CSRGraph converts it (int32 or int64); indptr
            too, unless E exceeds the int32 range (then int64). Its arrays are new (never
            the caller's).
        perm : (E,) int64 array
            Graph edge ``e`` is input edge ``perm[e]``.
        """
        return edges_to_graph(cls, src, dst, num_dst, num_src)

    # -- attributes -----------------------------------------------------------------
    @property
    def num_edges(self):
        return len(self.indices)

    @property
    def shape(self):
        return (self.num_dst, self.num_src)

    @property
    def index_dtype(self):
        return self.indices.dtype

    @property
    def device(self):
        return "gpu" if backend.is_cupy_array(self.indices) else "cpu"

    @property
    def xp(self):
        """The array module of this graph's arrays (numpy or cupy)."""
        return backend.array_module(self.device == "gpu")

    def __repr__(self):
        return (
            f"CSRGraph(num_dst={self.num_dst}, num_src={self.num_src}, num_edges={self.num_edges}, "
            f"index_dtype={self.index_dtype}, device={self.device!r})"
        )

    def degrees(self):
        """(num_dst,) in-degree of each destination node, on the graph's device."""
        return self.xp.diff(self.indptr)

    def cached(self, key, build):
        """Value cached on this graph under ``key``, built once by ``build()``.

        Holds derived data (plans, expansions, the transpose); a graph's arrays must not be
        modified in place after it is built.
        """
        try:
            return self._cache[key]
        except KeyError:
            value = self._cache[key] = build()
            return value

    def __getstate__(self):
        """Copies and pickles carry the arrays, not the caches: rebuilt on use, possibly larger
        than the graph, and possibly being filled by another thread's op."""
        return {key: value for key, value in self.__dict__.items() if key != "_cache"}

    def __copy__(self):
        """The same arrays as they are (__setstate__ would make a copy=False graph's, the
        caller's, read-only), none of the caches."""
        twin = type(self).__new__(type(self))
        twin.__dict__.update(self.__getstate__(), _cache={})
        return twin

    def __setstate__(self, state):
        self.__dict__.update(state, _cache={})
        self.indptr, self.indices = _read_only(self.indptr), _read_only(self.indices)  # its own arrays now

    # -- device moves ---------------------------------------------------------------
    def to_gpu(self):
        """The same graph with CuPy arrays (this graph if already there; cached, so plans are reused)."""
        if self.device == "gpu":
            return self
        usable, reason = backend.gpu_status()
        if not usable:
            raise RuntimeError(f"to_gpu needs CuPy and a usable CUDA device: {reason}")
        device_id = backend.cupy.cuda.Device().id

        def build():
            indptr, indices = (backend.cupy.asarray(a) for a in (self.indptr, self.indices))
            return _with_twin(CSRGraph(indptr, indices, self.num_src, check="none", copy=False), self)

        return self.cached(("to_gpu", device_id), build)

    def to_cpu(self):
        """The same graph with NumPy arrays (this graph if already there)."""
        if self.device == "cpu":
            return self

        def build():
            indptr, indices = (_read_only(a.get()) for a in (self.indptr, self.indices))
            return _with_twin(CSRGraph(indptr, indices, self.num_src, check="none", copy=False), self)

        return self.cached("to_cpu", build)

    # -- transpose ------------------------------------------------------------------
    def row_of_edge(self):
        """(E,) destination row of each edge (cached)."""

        def build():
            xp = self.xp
            edges = xp.arange(self.num_edges, dtype=self.indptr.dtype)
            rows = xp.searchsorted(self.indptr, edges, side="right") - 1
            dtype = self.index_dtype if self.num_dst <= np.iinfo(self.index_dtype).max + 1 else np.int64
            return _read_only(rows.astype(dtype))

        return self.cached("row_of_edge", build)

    def transpose(self):
        """The source-major graph and its edge permutation (cached).

        Returns
        -------
        graph_T : CSRGraph
            Shape (num_src, num_dst): row s lists the destinations that s points to.
        perm : (E,) int64 array
            Edge ``e`` of ``graph_T`` is edge ``perm[e]`` of this graph. Within a row of
            ``graph_T`` edges keep this graph's order (the sort is stable).
        """

        def build():
            xp = self.xp
            # its indptr and the counts it sums, one entry per source node each
            nbytes = (self.num_src + 1) * self.indptr.dtype.itemsize + self.num_src * 8
            backend.check_memory(f"the transpose of a graph of num_src={self.num_src}", nbytes, on_gpu=xp is not np)
            if xp is np:
                perm = np.argsort(self.indices, kind="stable")
            else:
                perm = xp.argsort(self.indices)  # CuPy's sort is stable
            perm = perm.astype(np.int64, copy=False)
            indptr = xp.zeros(self.num_src + 1, dtype=self.indptr.dtype)
            if self.num_edges:
                # host sync on the GPU (cupy.bincount reads the largest index)
                xp.cumsum(xp.bincount(self.indices, minlength=self.num_src), out=indptr[1:])
            dst_dtype = self.index_dtype if self.num_dst <= np.iinfo(self.index_dtype).max + 1 else np.int64
            indices = self.row_of_edge()[perm].astype(dst_dtype, copy=False)
            graph_t = CSRGraph(_read_only(indptr), _read_only(indices), self.num_dst, check="none", copy=False)
            return graph_t, _read_only(perm)

        return self.cached("transpose", build)


def _with_twin(twin, original):
    """Let a device copy find its way back without another transfer."""
    twin._cache["to_cpu" if original.device == "cpu" else ("to_gpu", backend.cupy.cuda.Device().id)] = original
    return twin


def edges_to_graph(cls, src, dst, num_dst, num_src, names=("src", "dst"), count_names=("num_dst", "num_src")):
    """CSRGraph.from_edge_index, its errors naming the arrays ``names`` (src, dst) and the
    counts ``count_names`` (num_dst, num_src): a matrix's own where they are its entries."""
    src_name, dst_name = names
    num_dst = None if num_dst is None else node_count(count_names[0], num_dst)
    num_src = None if num_src is None else node_count(count_names[1], num_src)
    src, dst = index_input(src_name, src), index_input(dst_name, dst)
    on_gpu = backend.is_cupy_array(src) or backend.is_cupy_array(dst)
    src = index_array(src_name, src, on_gpu)
    dst = index_array(dst_name, dst, on_gpu)
    if src.dtype == np.uint64 or dst.dtype == np.uint64:
        uint64_fits(src_name, src)  # host sync
        uint64_fits(dst_name, dst)
        src, dst = src.astype(np.int64), dst.astype(np.int64)
    if len(src) != len(dst):
        raise ValueError(f"{src_name} has {len(src)} entries but {dst_name} has {len(dst)}")
    xp = backend.array_module(on_gpu)
    num_edges = len(dst)
    high_dst = high_src = -1
    if num_edges:
        bounds = xp.stack([a.astype(np.int64) for a in (dst.min(), dst.max(), src.min(), src.max())])
        low_dst, high_dst, low_src, high_src = (int(v) for v in bounds.tolist())  # host sync
        for name, low in ((dst_name, low_dst), (src_name, low_src)):
            if low < 0:
                raise ValueError(f"{name} must be >= 0, got {low}")
    dst_inferred = num_dst is None
    num_dst = count_of_ids(dst_name, high_dst) if dst_inferred else num_dst
    num_src = count_of_ids(src_name, high_src) if num_src is None else num_src
    for name, high, count_name, count in (
        (dst_name, high_dst, count_names[0], num_dst),
        (src_name, high_src, count_names[1], num_src),
    ):
        if high >= count:
            raise ValueError(f"{name} must be < {count_name} = {count}, got {high}")
    check_row_count(dst_name, high_dst, count_names[0], num_dst, num_edges, inferred=dst_inferred)
    indptr_dtype = np.dtype(np.int64 if num_edges > _INT32_MAX else src.dtype)
    # the indptr and bincount's int64 counts, one entry per destination node each
    nbytes = (num_dst + 1) * indptr_dtype.itemsize + num_dst * 8
    backend.check_memory(f"a graph of {count_names[0]}={num_dst}", nbytes, on_gpu=on_gpu)
    if xp is np and num_edges < (1 << 32) and num_dst <= _INT32_MAX:
        # One sort of distinct 64-bit keys (destination << 32 | input position): the order of a
        # stable argsort by destination, several times faster on large graphs.
        perm = dst.astype(np.int64) << 32
        perm |= np.arange(num_edges, dtype=np.int64)
        perm.sort()
        perm &= 0xFFFFFFFF
    else:
        perm = xp.argsort(dst, kind="stable") if xp is np else xp.argsort(dst)  # CuPy's sort is stable
    counts = xp.bincount(dst, minlength=num_dst) if num_edges else xp.zeros(num_dst, np.int64)  # host sync (GPU)
    indptr = xp.zeros(num_dst + 1, dtype=indptr_dtype)
    xp.cumsum(counts, out=indptr[1:])
    # Valid by construction: every id was checked above.
    graph = cls(_read_only(indptr), _read_only(src[perm]), num_src, check="none", copy=False)
    return graph, perm


def _stored_columns_of_csc(matrix, xp):
    """Column of each stored entry of a CSC matrix."""
    edges = xp.arange(len(matrix.indices), dtype=matrix.indptr.dtype)
    return xp.searchsorted(matrix.indptr, edges, side="right") - 1


def graph_and_edge_order(matrix, check, name="matrix", copy=True):
    """(graph, perm): perm is None for CSR, else graph edge e is the matrix's stored entry perm[e].

    copy=False shares a CSR matrix's structure arrays (for a graph that lives no longer than
    one op call); CSC and COO always give new arrays.
    """
    check_mode(check)
    copy = backend.flag("copy", copy)
    is_scipy = scipy.sparse.issparse(matrix)
    if not is_scipy and not backend.is_cupyx_sparse(matrix):
        raise TypeError(f"{name} must be a scipy.sparse or cupyx.scipy.sparse matrix, got {type(matrix).__name__}")
    fmt = matrix.format
    if getattr(matrix, "ndim", 2) != 2:
        raise ValueError(f"{name} must be a 2-D sparse matrix, got {matrix.ndim} dimension(s)")
    num_dst, num_src = matrix.shape
    if fmt in ("csr", "csc") and len(matrix.indptr) != (num_dst if fmt == "csr" else num_src) + 1:
        raise ValueError(f"{name} has shape {matrix.shape}, but its indptr has {len(matrix.indptr)} entries")
    if fmt == "csr":
        try:
            return CSRGraph(matrix.indptr, matrix.indices, num_src, check=check, copy=copy), None
        except (TypeError, ValueError) as error:  # check and copy are known good: the arrays are not
            raise type(error)(f"{name} is not a valid CSR matrix: {error}") from None
    xp = np if is_scipy else backend.cupy
    if fmt == "coo":
        dst, src, names = matrix.row, matrix.col, (f"{name}.col", f"{name}.row")
    elif fmt == "csc":  # its indptr must be sound before it numbers the columns (rows: from_edge_index)
        try:
            CSRGraph(matrix.indptr, matrix.indices, check="full", copy=False)
        except ValueError as error:
            raise ValueError(f"{name} is not a valid CSC matrix: {error}") from None
        dst, src = matrix.indices, _stored_columns_of_csc(matrix, xp)
        names = (f"the columns of {name}", f"{name}.indices")
    else:
        raise TypeError(f"{name} is a sparse matrix in format {fmt!r}; only CSR, CSC and COO are supported")
    counts = (f"{name}.shape[0]", f"{name}.shape[1]")
    return edges_to_graph(CSRGraph, src, dst, num_dst, num_src, names, counts)


def check_mode(check):
    """TypeError or ValueError naming ``check`` unless it is one of _CHECK_MODES."""
    if not isinstance(check, str):
        raise TypeError(f"check must be one of {_CHECK_MODES}, got {type(check).__name__}")
    if check not in _CHECK_MODES:
        raise ValueError(f"check must be one of {_CHECK_MODES}, got {check!r}")

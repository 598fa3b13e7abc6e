"""The ``csrattn`` command: ``info``, ``check`` and ``bench``.

Installed as a console script (``csrattn``); also ``python -m cupy_csrattn.cli``. Every
subcommand runs without a GPU, on the CPU backend, and says so. Errors are one line on
stderr: exit status 2 for a usage error, 1 for a failure (set ``CSRATTN_DEBUG=1`` for the
traceback).
"""
import argparse
import json
import os
import platform
import shutil
import sys
import time

import numpy as np

__all__ = ["main", "Progress"]

PROG = "csrattn"


class UsageError(Exception):
    """A bad command line: exit status 2."""


class CommandError(Exception):
    """A failure while running a command: exit status 1."""


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# ---------------------------------------------------------------------------------------
# Progress bar

class Progress:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal.

    Parameters
    ----------
    total : int
        Number of steps.
    label : str
        Text before the bar.
    enabled : bool, optional
        Draw or not; by default only when ``stream`` is a TTY.
    stream : file, optional
        ``sys.stderr`` by default.
    """

    def __init__(self, total, label, enabled=None, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.total = max(int(total), 0)
        self.label = label
        self.done = 0
        self.started = time.perf_counter()
        self._drawn_at = 0.0
        self._width = 0
        self._note = ""
        self._draw(force=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def advance(self, steps=1, note=""):
        """Count ``steps`` more steps done; ``note`` is shown after the bar."""
        self.done = min(self.total, self.done + steps)
        self._note = note
        self._draw(force=self.done == self.total)

    def write(self, text):
        """Print ``text`` on stdout without tearing the bar."""
        self._clear()
        print(text, flush=True)
        self._draw(force=True)

    def close(self):
        """Remove the bar from the terminal."""
        self._clear()
        self.enabled = False

    def _clear(self):
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def _draw(self, force=False):
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self._drawn_at < 0.1:
            return
        self._drawn_at = now
        columns = shutil.get_terminal_size((80, 24)).columns - 1
        fraction = self.done / self.total if self.total else 1.0
        bar_width = 24
        filled = int(round(bar_width * fraction))
        elapsed = now - self.started
        eta = ""
        if 0 < self.done < self.total:
            eta = f" eta {elapsed / self.done * (self.total - self.done):.0f}s"
        line = (f"{self.label} [{'#' * filled}{'.' * (bar_width - filled)}] {self.done}/{self.total} "
                f"{elapsed:.0f}s{eta} {self._note}")[:columns]
        self.stream.write("\r" + line + " " * max(0, self._width - len(line)))
        self.stream.flush()
        self._width = len(line)


# ---------------------------------------------------------------------------------------
# info

def _cupy_or_none():
    from cupy_csrattn import _dispatch
    return _dispatch.cupy


def _cuda_version(number):
    return f"{number // 1000}.{number % 1000 // 10}"


def _kernel_cache_dir():
    return os.environ.get("CUPY_CACHE_DIR") or os.path.expanduser(os.path.join("~", ".cupy", "kernel_cache"))


def _scan_kernel_cache(cache_dir, entry_points):
    """Files in CuPy's kernel cache, and how many of them hold each kernel family.

    A family is recognised by its extern "C" entry-point names in the compiled binary. The
    dtype and index type of a cached specialization cannot be read back from the file
    (CuPy names it by a hash of the source and options, and the entry points are the same
    in every specialization).
    """
    result = {"dir": cache_dir, "exists": os.path.isdir(cache_dir), "files": 0, "families": {}}
    if not result["exists"]:
        return result
    families = {family: 0 for family in entry_points}
    for entry in os.scandir(cache_dir):
        if not entry.is_file():
            continue
        result["files"] += 1
        try:
            if entry.stat().st_size > (256 << 20):
                continue
            with open(entry.path, "rb") as file:
                data = file.read()
        except OSError:
            continue
        for family, names in entry_points.items():
            if any(name.encode() in data for name in names):
                families[family] += 1
    result["families"] = families
    return result


def gather_info():
    """Everything ``csrattn info`` reports, as a dict."""
    import scipy

    import cupy_csrattn
    from cupy_csrattn import _kernels, benchmark

    info = {
        "cupy_csrattn": {"version": cupy_csrattn.__version__,
                         "path": os.path.dirname(os.path.abspath(cupy_csrattn.__file__))},
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "platform": platform.platform(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
    }
    try:
        import matplotlib
        info["matplotlib"] = matplotlib.__version__
    except Exception:
        info["matplotlib"] = None
    cupy = _cupy_or_none()
    info["cupy"] = None if cupy is None else cupy.__version__
    cuda = {}
    gpus = []
    if cupy is not None:
        for key, getter in (("runtime", lambda: cupy.cuda.runtime.runtimeGetVersion()),
                            ("driver", lambda: cupy.cuda.runtime.driverGetVersion())):
            try:
                version = getter()
                cuda[key] = _cuda_version(version) if version else None
                if not version:
                    cuda[key + "_error"] = "none found"
            except Exception as error:
                cuda[key] = None
                cuda[key + "_error"] = _first_line(error)
        try:
            from cupy_backends.cuda.libs import nvrtc
            cuda["nvrtc"] = ".".join(str(v) for v in nvrtc.getVersion())
        except Exception as error:
            cuda["nvrtc"] = None
            cuda["nvrtc_error"] = _first_line(error)
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception:
            count = 0
        for device_id in range(count):
            try:
                props = cupy.cuda.runtime.getDeviceProperties(device_id)
                gpus.append({"id": device_id, "name": props["name"].decode(),
                             "compute_capability": f"{props['major']}.{props['minor']}",
                             "memory_gib": round(props["totalGlobalMem"] / 2**30, 1),
                             "multiprocessors": props["multiProcessorCount"],
                             "l2_cache_mib": round(props.get("l2CacheSize", 0) / 2**20, 1)})
            except Exception as error:
                gpus.append({"id": device_id, "error": _first_line(error)})
    info["cuda"] = cuda
    info["gpus"] = gpus
    usable, reason = benchmark.gpu_usable()
    info["gpu_usable"] = usable
    info["gpu_reason"] = reason
    info["kernels"] = {
        "source_dir": None if _kernels.KERNEL_DIR is None else str(_kernels.KERNEL_DIR),
        "families": {family: len(names) for family, names in _kernels.ENTRY_POINTS.items()},
        "specializations": len(_kernels.specializations()),
        "dtypes": [d.name for d in _kernels.DTYPE_CODES],
        "index_dtypes": [d.name for d in _kernels.INDEX_TYPES],
    }
    cache = _scan_kernel_cache(_kernel_cache_dir(), _kernels.ENTRY_POINTS)
    cache["in_memory_only"] = os.environ.get("CUPY_CACHE_IN_MEMORY", "0") not in ("", "0")
    info["kernel_cache"] = cache
    return info


def cmd_info(args):
    info = gather_info()
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    pkg = info["cupy_csrattn"]
    print(f"cupy_csrattn {pkg['version']}  ({pkg['path']})")
    py = info["python"]
    print(f"Python       {py['version']} ({py['implementation']}), {info['platform']}")
    print(f"NumPy        {info['numpy']}")
    print(f"SciPy        {info['scipy']}")
    print(f"matplotlib   {info['matplotlib'] or 'not installed (csrattn bench makes no plots)'}")
    if info["cupy"] is None:
        print("CuPy         not installed: every op runs on the CPU backend "
              "(pip install 'cupy_csrattn[cuda13]' or '[cuda12]' for the GPU)")
    else:
        print(f"CuPy         {info['cupy']}")
        cuda = info["cuda"]
        runtime = cuda.get("runtime") or f"unavailable ({cuda.get('runtime_error')})"
        driver = cuda.get("driver") or f"unavailable ({cuda.get('driver_error')})"
        nvrtc = cuda.get("nvrtc") or f"unavailable ({cuda.get('nvrtc_error')})"
        if len(nvrtc) > 100:
            nvrtc = nvrtc[:97] + "..."
        print(f"CUDA         runtime {runtime}, driver {driver}, NVRTC {nvrtc}")
    if info["gpus"]:
        for gpu in info["gpus"]:
            if "error" in gpu:
                print(f"GPU {gpu['id']}        unreadable: {gpu['error']}")
            else:
                print(f"GPU {gpu['id']}        {gpu['name']}, compute capability {gpu['compute_capability']}, "
                      f"{gpu['memory_gib']} GiB, {gpu['multiprocessors']} SMs, L2 {gpu['l2_cache_mib']} MiB")
    if info["gpu_usable"]:
        print("Backend      CuPy arrays run on the GPU; NumPy arrays on the CPU backend")
    else:
        print(f"Backend      no usable GPU ({info['gpu_reason']}): the CPU backend is used")
    kernels = info["kernels"]
    families = ", ".join(f"{family} ({count} entry points)" for family, count in kernels["families"].items())
    print(f"Kernels      {kernels['source_dir'] or 'sources NOT FOUND (reinstall the package)'}")
    print(f"             {families}")
    print(f"             {kernels['specializations']} specializations: each family x "
          f"{'/'.join(kernels['dtypes'])} x {'/'.join(kernels['index_dtypes'])} indices")
    cache = info["kernel_cache"]
    if cache["in_memory_only"]:
        print("Kernel cache CUPY_CACHE_IN_MEMORY is set: compiled kernels are not kept on disk")
    elif not cache["exists"]:
        print(f"Kernel cache {cache['dir']} does not exist yet: no kernel has been compiled on this machine")
    else:
        held = ", ".join(f"{family} {count}" for family, count in cache["families"].items())
        print(f"Kernel cache {cache['dir']}: {cache['files']} files; holding cupy_csrattn kernels: {held}")
        print("             (one file per specialization, GPU architecture and source version; which dtype and "
              "index type a file holds cannot be read back from it)")
    return 0


# ---------------------------------------------------------------------------------------
# check: a naive float64 reference, one loop iteration per row

def _ref_softmax(indptr, scores):
    probs = np.zeros_like(scores)
    lse = np.full((len(indptr) - 1, scores.shape[1]), -np.inf)
    for d in range(len(indptr) - 1):
        a, b = indptr[d], indptr[d + 1]
        if a == b:
            continue
        row_max = scores[a:b].max(axis=0)
        exp = np.exp(scores[a:b] - row_max)
        total = exp.sum(axis=0)
        probs[a:b] = exp / total
        lse[d] = row_max + np.log(total)
    return probs, lse


def _ref_softmax_backward(indptr, probs, grad_probs):
    grad = np.zeros_like(probs)
    for d in range(len(indptr) - 1):
        a, b = indptr[d], indptr[d + 1]
        p, g = probs[a:b], grad_probs[a:b]
        grad[a:b] = p * (g - (p * g).sum(axis=0))
    return grad


def _ref_spmm(indptr, indices, weights, values):
    out = np.zeros((len(indptr) - 1,) + values.shape[1:])
    for d in range(len(indptr) - 1):
        a, b = indptr[d], indptr[d + 1]
        out[d] = np.einsum("eh,ehf->hf", weights[a:b], values[indices[a:b]])
    return out


def _ref_spmm_backward(indptr, indices, weights, values, grad_out):
    grad_weights = np.zeros_like(weights)
    grad_values = np.zeros_like(values)
    for d in range(len(indptr) - 1):
        a, b = indptr[d], indptr[d + 1]
        cols = indices[a:b]
        grad_weights[a:b] = np.einsum("hf,ehf->eh", grad_out[d], values[cols])
        np.add.at(grad_values, cols, weights[a:b, :, None] * grad_out[d][None])
    return grad_weights, grad_values


def _ref_dot(indptr, indices, q, k, scale):
    scores = np.zeros((len(indices), q.shape[1]))
    for d in range(len(indptr) - 1):
        a, b = indptr[d], indptr[d + 1]
        scores[a:b] = scale * np.einsum("hd,ehd->eh", q[d], k[indices[a:b]])
    return scores


def _ref_dot_backward(indptr, indices, q, k, grad_scores, scale):
    grad_q, grad_k = np.zeros_like(q), np.zeros_like(k)
    for d in range(len(indptr) - 1):
        a, b = indptr[d], indptr[d + 1]
        cols = indices[a:b]
        grad_q[d] = scale * np.einsum("eh,ehd->hd", grad_scores[a:b], k[cols])
        np.add.at(grad_k, cols, scale * grad_scores[a:b, :, None] * q[d][None])
    return grad_q, grad_k


def _ref_add(indptr, indices, a_dst, a_src):
    scores = np.zeros((len(indices), a_dst.shape[1]))
    for d in range(len(indptr) - 1):
        a, b = indptr[d], indptr[d + 1]
        scores[a:b] = a_dst[d] + a_src[indices[a:b]]
    return scores


def _ref_add_backward(indptr, indices, grad_scores, num_src):
    grad_dst = np.zeros((len(indptr) - 1, grad_scores.shape[1]))
    grad_src = np.zeros((num_src, grad_scores.shape[1]))
    for d in range(len(indptr) - 1):
        a, b = indptr[d], indptr[d + 1]
        grad_dst[d] = grad_scores[a:b].sum(axis=0)
        np.add.at(grad_src, indices[a:b], grad_scores[a:b])
    return grad_dst, grad_src


def _ref_aggregate(indptr, indices, scores, values):
    probs, lse = _ref_softmax(indptr, scores)
    return _ref_spmm(indptr, indices, probs, values), lse


def _ref_aggregate_backward(indptr, indices, scores, values, grad_out):
    probs, _ = _ref_softmax(indptr, scores)
    grad_probs, grad_values = _ref_spmm_backward(indptr, indices, probs, values, grad_out)
    return _ref_softmax_backward(indptr, probs, grad_probs), grad_values


def _leaky(z, slope):
    return np.where(z > 0, z, slope * z)


SLOPE = 0.2
DOT_SCALE = 0.5


class _CheckCase:
    """Inputs of one op on one graph, dtype and head layout, and the reference of its results."""

    def __init__(self, op, graph, dtype, heads, features, rng):
        self.op, self.graph, self.dtype, self.heads, self.features = op, graph, np.dtype(dtype), heads, features
        self.rng = rng
        self.indptr = graph.indptr.astype(np.int64)
        self.indices = graph.indices.astype(np.int64)
        H = heads or 1
        self.H = H
        E, Nd, Ns, F = graph.num_edges, graph.num_dst, graph.num_src, features
        self.edge, self.dst_nodes, self.src_nodes = (E, H), (Nd, H, F), (Ns, H, F)
        self.dst_scalar, self.src_scalar = (Nd, H), (Ns, H)

    def random(self, shape):
        """Canonical-shaped random data, rounded to the case's dtype, held as float64."""
        return self.rng.standard_normal(shape).astype(self.dtype).astype(np.float64)

    def public(self, x, dtype=None):
        """Canonical (E, H) / (N, H, F) / (N, H) array in the op's public layout and dtype."""
        x = x.astype(dtype or self.dtype)
        if self.heads is None:
            x = x[:, 0]
        return x

    def lse_dtype(self):
        return np.float32 if self.dtype == np.float16 else self.dtype

    def build(self):
        """(call(graph, *arrays) -> tuple of results, public arrays, reference()).

        ``reference()`` computes the expected results with the naive float64 loops; it is
        only called when checking the CPU backend. Inputs that must come from a forward
        pass (probabilities, out, lse) are made by the CPU backend in float64: the
        reference of a backward recomputes everything from q, k, v or the scores.
        """
        import cupy_csrattn as ca
        ip, ix, op, public = self.indptr, self.indices, self.op, self.public
        if op == "edge_softmax":
            s = self.random(self.edge)
            return (lambda g, s: (ca.edge_softmax(g, s),)), [public(s)], lambda: (_ref_softmax(ip, s)[0],)
        if op == "edge_softmax_backward":
            p = ca.edge_softmax(self.graph, self.random(self.edge)).astype(self.dtype).astype(np.float64)
            gp = self.random(self.edge)
            return ((lambda g, p, gp: (ca.edge_softmax_backward(g, p, gp),)), [public(p), public(gp)],
                    lambda: (_ref_softmax_backward(ip, p, gp),))
        if op == "spmm":
            w, v = self.random(self.edge), self.random(self.src_nodes)
            return ((lambda g, w, v: (ca.spmm(g, w, v),)), [public(w), public(v)],
                    lambda: (_ref_spmm(ip, ix, w, v),))
        if op == "spmm(weights=None)":
            v = self.random(self.src_nodes)
            return ((lambda g, v: (ca.spmm(g, None, v),)), [public(v)],
                    lambda: (_ref_spmm(ip, ix, np.ones(self.edge), v),))
        if op == "spmm_backward":
            w, v, go = self.random(self.edge), self.random(self.src_nodes), self.random(self.dst_nodes)
            return ((lambda g, w, v, go: ca.spmm_backward(g, w, v, go)), [public(w), public(v), public(go)],
                    lambda: _ref_spmm_backward(ip, ix, w, v, go))
        if op == "sddmm(dot)":
            q, k = self.random(self.dst_nodes), self.random(self.src_nodes)
            return ((lambda g, q, k: (ca.sddmm(g, q, k, op="dot", scale=DOT_SCALE),)), [public(q), public(k)],
                    lambda: (_ref_dot(ip, ix, q, k, DOT_SCALE),))
        if op == "sddmm(add)":
            a, b = self.random(self.dst_scalar), self.random(self.src_scalar)
            return ((lambda g, a, b: (ca.sddmm(g, a, b, op="add"),)), [public(a), public(b)],
                    lambda: (_ref_add(ip, ix, a, b),))
        if op == "sddmm_backward(dot)":
            q, k, gs = self.random(self.dst_nodes), self.random(self.src_nodes), self.random(self.edge)
            return ((lambda g, q, k, gs: ca.sddmm_backward(g, q, k, gs, op="dot", scale=DOT_SCALE)),
                    [public(q), public(k), public(gs)], lambda: _ref_dot_backward(ip, ix, q, k, gs, DOT_SCALE))
        if op == "sddmm_backward(add)":
            a, b, gs = self.random(self.dst_scalar), self.random(self.src_scalar), self.random(self.edge)
            return ((lambda g, a, b, gs: ca.sddmm_backward(g, a, b, gs, op="add")),
                    [public(a), public(b), public(gs)], lambda: _ref_add_backward(ip, ix, gs, self.graph.num_src))
        if op == "attention_aggregate":
            s, v = self.random(self.edge), self.random(self.src_nodes)
            return ((lambda g, s, v: ca.attention_aggregate(g, s, v, return_lse=True)), [public(s), public(v)],
                    lambda: _ref_aggregate(ip, ix, s, v))
        if op == "attention_aggregate_backward":
            s, v, go = self.random(self.edge), self.random(self.src_nodes), self.random(self.dst_nodes)
            return ((lambda g, s, v, go: ca.attention_aggregate_backward(g, s, v, go)),
                    [public(s), public(v), public(go)], lambda: _ref_aggregate_backward(ip, ix, s, v, go))
        if op in ("graph_attention", "graph_attention_backward"):
            q, k, v = self.random(self.dst_nodes), self.random(self.src_nodes), self.random(self.src_nodes)
            scale = 1.0 / np.sqrt(self.features)

            def forward():
                return _ref_aggregate(ip, ix, _ref_dot(ip, ix, q, k, scale), v)
            if op == "graph_attention":
                return ((lambda g, q, k, v: ca.graph_attention(g, q, k, v, return_lse=True)),
                        [public(q), public(k), public(v)], forward)
            out, lse = ca.graph_attention(self.graph, q, k, v, scale=scale, return_lse=True)
            go = self.random(self.dst_nodes)

            def backward():
                scores = _ref_dot(ip, ix, q, k, scale)
                grad_scores, grad_v = _ref_aggregate_backward(ip, ix, scores, v, go)
                return _ref_dot_backward(ip, ix, q, k, grad_scores, scale) + (grad_v,)
            return ((lambda g, q, k, v, out, go, lse: ca.graph_attention_backward(g, q, k, v, out, go, lse)),
                    [public(q), public(k), public(v), public(out), public(go), public(lse, self.lse_dtype())],
                    backward)
        if op in ("gat_attention", "gat_attention_backward"):
            a, b, v = self.random(self.dst_scalar), self.random(self.src_scalar), self.random(self.src_nodes)

            def forward():
                return _ref_aggregate(ip, ix, _leaky(_ref_add(ip, ix, a, b), SLOPE), v)
            if op == "gat_attention":
                return ((lambda g, a, b, v: ca.gat_attention(g, a, b, v, negative_slope=SLOPE, return_lse=True)),
                        [public(a), public(b), public(v)], forward)
            out, lse = ca.gat_attention(self.graph, a, b, v, negative_slope=SLOPE, return_lse=True)
            go = self.random(self.dst_nodes)

            def backward():
                z = _ref_add(ip, ix, a, b)
                grad_scores, grad_v = _ref_aggregate_backward(ip, ix, _leaky(z, SLOPE), v, go)
                grad_a, grad_b = _ref_add_backward(ip, ix, grad_scores * np.where(z > 0, 1.0, SLOPE),
                                                   self.graph.num_src)
                return grad_a, grad_b, grad_v
            return ((lambda g, a, b, v, out, go, lse: ca.gat_attention_backward(g, a, b, v, out, go, lse,
                                                                              negative_slope=SLOPE)),
                    [public(a), public(b), public(v), public(out), public(go), public(lse, self.lse_dtype())],
                    backward)
        raise ValueError(f"unknown op {op!r}")


#: The op variants ``csrattn check`` runs; those marked True take a feature width.
CHECK_OPS = {
    "edge_softmax": False, "edge_softmax_backward": False, "spmm": True, "spmm(weights=None)": True,
    "spmm_backward": True, "sddmm(dot)": True, "sddmm(add)": False, "sddmm_backward(dot)": True,
    "sddmm_backward(add)": False, "attention_aggregate": True, "attention_aggregate_backward": True,
    "graph_attention": True, "graph_attention_backward": True, "gat_attention": True,
    "gat_attention_backward": True,
}
TOLERANCE = {np.dtype(np.float64): 1e-10, np.dtype(np.float32): 1e-5, np.dtype(np.float16): 2e-3}


def _compare(actual, expected, rtol):
    """None when ``actual`` matches ``expected``, else a short description of the worst element.

    Elements may differ by ``rtol * (|expected| + max|expected|)``, the scale floored at
    1; NaN never matches, and infinities must agree exactly.
    """
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.size != expected.size:
        return f"shape {actual.shape}, expected {expected.size} elements"
    expected = expected.reshape(actual.shape)
    if np.isnan(actual).any():
        return f"NaN at {np.argwhere(np.isnan(actual))[0].tolist()}"
    inf = np.isinf(expected)
    if (np.isinf(actual) != inf).any() or (actual[inf] != expected[inf]).any():
        where = np.argwhere((np.isinf(actual) != inf) | (inf & (actual != expected)))[0].tolist()
        return f"infinity mismatch at {where}"
    finite = ~inf
    if not finite.any():
        return None
    scale = max(1.0, float(np.abs(expected[finite]).max()))
    actual, expected = np.where(finite, actual, 0.0), np.where(finite, expected, 0.0)
    error = np.abs(actual - expected)
    allowed = rtol * (np.abs(expected) + scale)
    ratio = error / allowed
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    if ratio[worst] <= 1.0:
        return None
    return (f"max error {error[worst]:.3g} at {list(int(i) for i in worst)} (got {actual[worst]:.6g}, "
            f"expected {expected[worst]:.6g}; tolerance {allowed[worst]:.3g})")


def _check_graphs(rng, gpu, quick):
    """Random graphs with empty rows and one hub row, an int64 one, and one without edges."""
    import cupy_csrattn as ca

    def build(num_dst, num_src, hub, dtype):
        degrees = rng.integers(0, 12, num_dst)
        degrees[rng.random(num_dst) < 0.15] = 0
        degrees[num_dst // 3] = hub
        indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(dtype)
        indices = rng.integers(0, num_src, int(indptr[-1])).astype(dtype)
        return ca.CSRGraph(indptr, indices, num_src)

    if gpu:
        mixed = build(1500, 1300, 20_003, np.int32) if quick else build(6000, 5000, 100_003, np.int32)
        wide = build(300, 250, 5_001, np.int64)
    else:
        mixed = build(120, 100, 700, np.int32) if quick else build(400, 350, 3_001, np.int32)
        wide = build(40, 33, 150, np.int64)
    no_edges = ca.CSRGraph(np.zeros(8, np.int32), np.zeros(0, np.int32), 5)
    return [("random+hub", mixed), ("int64", wide), ("no-edges", no_edges)]


def _specializations(quick):
    """Every kernel specialization; with ``quick`` one per family (float32 data, int32 indices)."""
    from cupy_csrattn import _kernels
    specs = _kernels.specializations()
    if quick:
        specs = [s for s in specs if s[1] == np.float32 and s[2] == np.int32]
    return specs


def _nvrtc_version():
    """NVRTC's version as text; raises when CuPy's NVRTC bindings or libnvrtc are missing."""
    from cupy_backends.cuda.libs import nvrtc
    return ".".join(str(v) for v in nvrtc.getVersion())


def _check_compile_on_device(quick, progress_enabled):
    """Compile (or load from the disk cache) the kernel specializations on the current GPU."""
    from cupy_csrattn import _kernels
    specs = _specializations(quick)
    failures = []
    started = time.perf_counter()
    with Progress(len(specs), "compiling kernels", enabled=progress_enabled) as progress:
        for family, dtype, index_dtype in specs:
            try:
                for name in _kernels.ENTRY_POINTS[family]:
                    _kernels.kernel(family, name, dtype, index_dtype)
            except Exception as error:
                failures.append(f"{family}.cu [{dtype.name}, {index_dtype.name}]: {_first_line(error)}")
                progress.write(f"FAILED to compile {failures[-1]}")
            progress.advance(note=f"{family} {dtype.name} {index_dtype.name}")
    print(f"compiled {len(specs) - len(failures)} of {len(specs)} kernel specializations "
          f"in {time.perf_counter() - started:.1f} s")
    return failures


def _check_compile_nvrtc(arch, quick, progress_enabled):
    """Compile the specializations through NVRTC for ``arch`` without a GPU; None if NVRTC is missing."""
    from cupy_csrattn import _kernels
    try:
        version = _nvrtc_version()
    except Exception as error:
        print(f"kernel compilation not checked: NVRTC is not available ({type(error).__name__}: "
              f"{_first_line(error)}); install CuPy with its ctk extra, e.g. pip install 'cupy-cuda13x[ctk]'")
        return None
    if _kernels.KERNEL_DIR is None:
        return ["the CUDA kernel sources were not found; reinstall the package"]
    specs = _specializations(quick)
    failures = []
    started = time.perf_counter()
    with Progress(len(specs), f"NVRTC {arch}", enabled=progress_enabled) as progress:
        for family, dtype, index_dtype in specs:
            label = f"{family}.cu [{dtype.name}, {index_dtype.name}]"
            try:
                _, cubin = _kernels.compile_for_arch(family, dtype, index_dtype, arch)
                missing = [n for n in _kernels.ENTRY_POINTS[family] if b"\0" + n.encode() + b"\0" not in cubin]
                if missing:
                    failures.append(f"{label}: entry points missing from the binary: {', '.join(missing)}")
            except Exception as error:
                failures.append(f"{label}: {_first_line(error)}")
            if failures and failures[-1].startswith(label):
                progress.write(f"FAILED {failures[-1]}")
            progress.advance(note=label)
    print(f"NVRTC {version}: {len(specs) - len(failures)} of {len(specs)} kernel specializations compile for "
          f"{arch} ({time.perf_counter() - started:.1f} s)")
    return failures


def _check_ops(gpu, quick, seed, progress_enabled):
    """Every op on random graphs: GPU against the CPU backend, or the CPU backend against the reference.

    Returns (results per op, failure lines).
    """
    rng = np.random.default_rng(seed)
    graphs = _check_graphs(rng, gpu, quick)
    if gpu:
        dtypes = [np.float32, np.float64] + ([] if quick else [np.float16])
        feature_sizes = [7, 32]
    else:
        dtypes = [np.float32, np.float64]
        feature_sizes = [5]
    head_layouts = [None, 3]
    cases = []
    for op, takes_features in CHECK_OPS.items():
        for graph_name, graph in graphs:
            for dtype in dtypes:
                for heads in head_layouts:
                    for features in (feature_sizes if takes_features else [4]):
                        cases.append((op, graph_name, graph, dtype, heads, features))
    if gpu:
        import cupy
    summary = {op: {"cases": 0, "ok": 0, "mismatch": 0, "no_kernel": 0} for op in CHECK_OPS}
    failures = []
    label = "GPU vs CPU" if gpu else "CPU vs reference"
    with Progress(len(cases), label, enabled=progress_enabled) as progress:
        for op, graph_name, graph, dtype, heads, features in cases:
            counts = summary[op]
            counts["cases"] += 1
            case = _CheckCase(op, graph, dtype, heads, features, rng)
            where = (f"{op} on {graph_name}, {np.dtype(dtype).name}, "
                     f"{'single head' if heads is None else f'H={heads}'}"
                     f"{f', F={features}' if CHECK_OPS[op] else ''}")
            try:
                call, arrays, reference = case.build()
                if gpu:
                    expected = call(graph, *arrays)
                    try:
                        got = call(graph.to_gpu(), *[cupy.asarray(a) for a in arrays])
                    except NotImplementedError:
                        counts["no_kernel"] += 1
                        progress.advance(note=op)
                        continue
                    got = [cupy.asnumpy(x) for x in got]
                else:
                    expected = reference()
                    got = call(graph, *arrays)
                problem = None
                if len(got) != len(expected):
                    problem = f"returned {len(got)} arrays, expected {len(expected)}"
                for i, (a, e) in enumerate(zip(got, expected)):
                    if problem is None:
                        mismatch = _compare(a, e, TOLERANCE[np.dtype(dtype)])
                        if mismatch is not None:
                            problem = f"result {i}: {mismatch}"
            except Exception as error:
                problem = f"raised {type(error).__name__}: {_first_line(error)}"
            if problem is None:
                counts["ok"] += 1
            else:
                counts["mismatch"] += 1
                failures.append(f"{where}: {problem}")
                progress.write(f"MISMATCH {failures[-1]}")
            progress.advance(note=op)
    return summary, failures


def cmd_check(args):
    from cupy_csrattn import benchmark
    progress_enabled = not args.quiet and sys.stderr.isatty()
    usable, reason = benchmark.gpu_usable()
    if args.cpu:
        usable, reason = False, "--cpu given"
    failures = []
    if usable:
        cupy = _cupy_or_none()
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        print(f"GPU {props['name'].decode()} (compute capability {props['major']}.{props['minor']}): compiling "
              f"every kernel specialization, then running each op on the GPU against the CPU backend")
        if args.no_compile:
            print("kernel compilation not checked (--no-compile); kernels compile on first use")
        else:
            failures += _check_compile_on_device(args.quick, progress_enabled)
    else:
        print(f"No usable GPU ({reason}): the CPU backend is used. Checking that the kernels compile "
              f"through NVRTC for {args.arch}, then the CPU backend against a naive float64 reference.")
        if args.no_compile:
            print("kernel compilation not checked (--no-compile)")
        else:
            failures += _check_compile_nvrtc(args.arch, args.quick, progress_enabled) or []
    summary, op_failures = _check_ops(usable, args.quick, args.seed, progress_enabled)
    failures += op_failures
    print(f"\n{'op':<30} {'cases':>5}  result")
    for op, counts in summary.items():
        if counts["mismatch"]:
            result = f"{counts['mismatch']} FAILED, {counts['ok']} ok"
        elif counts["no_kernel"] and not counts["ok"]:
            result = "no GPU kernel yet"
        elif counts["no_kernel"]:
            result = f"{counts['ok']} ok, {counts['no_kernel']} without a GPU kernel yet"
        else:
            result = "ok"
        print(f"{op:<30} {counts['cases']:>5}  {result}")
    total = sum(c["cases"] for c in summary.values())
    no_kernel = sum(c["no_kernel"] for c in summary.values())
    if failures:
        print(f"\ncheck FAILED: {len(failures)} problem(s):")
        for line in failures:
            print(f"  {line}")
        return 1
    against = "the CPU backend" if usable else "the reference"
    print(f"\ncheck passed: {total - no_kernel} op cases agree with {against}"
          + (f"; {no_kernel} cases have no GPU kernel yet" if no_kernel else ""))
    return 0


# ---------------------------------------------------------------------------------------
# bench

DEFAULT_GRAPHS = {"gpu": ["rmat:20", "uniform:1048576,16"], "cpu": ["rmat:14", "uniform:16384,16"]}


def cmd_bench(args):
    from cupy_csrattn import _kernels, benchmark as bm
    import cupy_csrattn

    usable, reason = bm.gpu_usable()
    if args.device == "gpu" and not usable:
        raise CommandError(f"--device gpu: {reason}")
    on_gpu = usable and args.device != "cpu"
    specs = args.graph or DEFAULT_GRAPHS["gpu" if on_gpu else "cpu"]
    graphs = []
    for spec in specs:
        try:
            graphs.append(bm.graph_from_spec(spec))
        except FileNotFoundError as error:
            raise UsageError(f"{PROG} bench: error: --graph {spec}: {error.strerror}") from None
        except ValueError as error:
            raise UsageError(f"{PROG} bench: error: --graph: {error}") from None
    names = [name for name, _ in graphs]
    if len(set(names)) != len(names):
        raise UsageError(f"{PROG} bench: error: --graph names a graph twice ({', '.join(names)})")
    ops = args.ops or list(bm.OPS)
    cases = bm.make_cases(ops, args.dtype, args.heads, args.features)
    repeat = args.repeat or (20 if on_gpu else 5)
    if on_gpu:
        device = bm.GpuDevice(repeat)
        print(f"GPU {device.name}: timing the ops against CuPy compositions, cuSPARSE and PyG (when installed)")
        started = time.perf_counter()
        _kernels.warmup(dtypes=args.dtype)
        print(f"kernels ready in {time.perf_counter() - started:.1f} s (compiled once, then loaded from CuPy's cache)")
    else:
        why = reason if args.device == "auto" else "--device cpu given"
        device = bm.CpuDevice(repeat)
        print(f"No GPU used ({why}): timing the CPU backend on {device.name}, "
              f"against NumPy/SciPy compositions")
    bandwidth = device.copy_bandwidth()
    print(f"copy bandwidth {bandwidth / 1e9:.1f} GB/s (read + write): the roofline")
    pyg = bm.load_pyg() if on_gpu else (None, None)
    progress_enabled = not args.quiet and sys.stderr.isatty()
    with Progress(len(graphs) * len(cases), "bench", enabled=progress_enabled) as progress:
        def on_graph(name, graph):
            degrees = np.diff(graph.indptr)
            progress.write(f"{name}: {graph.num_dst} rows, {graph.num_edges} edges, "
                           f"max degree {int(degrees.max()) if len(degrees) else 0}")

        def on_case(name, case):
            progress.advance(note=f"{name} {case.op} {case.dtype} H={case.H}")
        records, skipped = bm.run_cases(graphs, cases, device, bandwidth, pyg, on_graph=on_graph, on_case=on_case)
    print()
    print(bm.format_table(records, skipped))
    if not args.out:
        print("\nno --out given: results not written (--out DIR writes JSON and plots)")
        return 0
    date = time.strftime("%Y-%m-%d")
    document = dict(device=device.kind, device_name=device.name, copy_bandwidth_bytes_per_s=bandwidth,
                    date=date, python=platform.python_version(), cupy_csrattn=cupy_csrattn.__version__,
                    versions=device.versions(), pyg=pyg[0] is not None,
                    settings=dict(graphs=specs, ops=ops, dtypes=args.dtype, heads=args.heads,
                                  features=args.features, repeat=repeat),
                    records=records, skipped=skipped)
    path = bm.write_json(os.path.join(args.out, f"bench_{device.kind}_{bm.file_stem(device.name)}.json"), document)
    print(f"\nwrote {path}")
    if args.no_plot:
        print("plots not made (--no-plot)")
    elif not records:
        print("plots not made: nothing was timed")
    elif bm.matplotlib_available():
        for png in bm.plot_results(records, args.out, title=f"{device.name}, {date}"):
            print(f"wrote {png}")
    else:
        print("plots skipped: matplotlib is not installed (pip install matplotlib, or the package's 'plot' extra)")
    return 0


# ---------------------------------------------------------------------------------------
# The parser

class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (exit 2) instead of usage + message."""

    def error(self, message):
        raise UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def build_parser():
    """The argparse parser of the csrattn command."""
    from cupy_csrattn import __version__
    from cupy_csrattn.benchmark import OPS

    parser = _Parser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Attention over sparse graphs in CSR form: environment report, self-check and benchmark.",
        epilog="Every command also runs without a GPU, on the CPU backend, and says so.\n"
               "Run 'csrattn COMMAND --help' for a command's options.")
    parser.add_argument("--version", action="version", version=f"%(prog)s (cupy_csrattn) {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    info = commands.add_parser(
        "info", help="versions, GPU, CUDA and the kernel cache",
        description="Print the versions of the package, Python, NumPy, SciPy and CuPy; whether a GPU is usable "
                    "and which; the CUDA runtime, driver and NVRTC versions; the kernel families and how many "
                    "compiled kernels CuPy's on-disk cache holds.")
    info.add_argument("--json", action="store_true", help="print the report as JSON")
    info.set_defaults(func=cmd_info)

    check = commands.add_parser(
        "check", help="compile every kernel and check every op on this machine",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="With a GPU: compile every kernel specialization, then run each op on random graphs\n"
                    "(with empty rows and a hub row) on the GPU and compare with the CPU backend.\n"
                    "Without one: compile every kernel through NVRTC for --arch (skipped, with a message,\n"
                    "when NVRTC is missing), then compare the CPU backend with a naive float64 reference.\n"
                    "Exits with status 1 on any compile failure or mismatch; an op without a GPU kernel\n"
                    "is reported as such, not as a failure.")
    check.add_argument("--quick", action="store_true",
                       help="smaller graphs, fewer dtypes, and one kernel specialization per family "
                            "(float32 data, int32 indices) compiled")
    check.add_argument("--no-compile", action="store_true", help="skip the kernel compilation step")
    check.add_argument("--cpu", action="store_true", help="check the CPU backend even when a GPU is present")
    check.add_argument("--arch", default="sm_90", help="architecture for the NVRTC compile without a GPU "
                                                       "(default: %(default)s)")
    check.add_argument("--seed", type=int, default=0, help="seed of the random graphs and data (default: 0)")
    check.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    check.set_defaults(func=cmd_check)

    bench = commands.add_parser(
        "bench", help="time the ops against baselines and the memory roofline",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Time each op (median of device-synchronized calls after warm-up, fresh random data) against\n"
                    "baselines and the memory roofline (a copy measured in the same run). On a GPU the baselines\n"
                    "are plain CuPy compositions, cuSPARSE (through cupyx) and PyG when installed; without a GPU\n"
                    "the CPU backend is timed against NumPy/SciPy compositions.\n"
                    "Prints a table; with --out, writes JSON and one PNG per graph (when matplotlib is installed).",
        epilog="examples:\n"
               "  csrattn bench --graph rmat:16 uniform:100000,16 --ops edge_softmax attention_aggregate\n"
               "  csrattn bench --graph web-Google.mtx --dtype float32 float16 --heads 1 8 --out results/")
    bench.add_argument("--graph", nargs="+", metavar="SPEC",
                       help="graphs: rmat:SCALE[,EDGE_FACTOR], uniform:N,DEG, or a file (.mtx, .npz or an edge "
                            "list 'src dst' per line); default: rmat:20 and uniform:1048576,16 on a GPU, "
                            "rmat:14 and uniform:16384,16 on the CPU")
    bench.add_argument("--ops", nargs="+", choices=OPS, metavar="OP",
                       help=f"ops to time (default: all): {', '.join(OPS)}")
    bench.add_argument("--dtype", nargs="+", choices=["float16", "float32", "float64"], default=["float32"],
                       help="data types (default: float32)")
    bench.add_argument("--heads", nargs="+", type=_positive_int, default=[8], metavar="H",
                       help="numbers of heads (default: 8)")
    bench.add_argument("--features", nargs="+", type=_positive_int, default=[16], metavar="F",
                       help="feature widths per head (default: 16)")
    bench.add_argument("--repeat", type=_positive_int, metavar="N",
                       help="timed calls per case (default: 20 on a GPU, 5 on the CPU)")
    bench.add_argument("--device", choices=["auto", "gpu", "cpu"], default="auto",
                       help="where to run (default: the GPU when one is usable)")
    bench.add_argument("--out", metavar="DIR", help="write the results here: bench_<device>_<name>.json and bench_<graph>.png")
    bench.add_argument("--no-plot", action="store_true", help="write no PNG plots")
    bench.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv=None):
    """Run the csrattn command; returns the exit status.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name; ``sys.argv[1:]`` by default.

    Returns
    -------
    int
        0 on success, 1 on a failure, 2 on a usage error, 130 when interrupted.
    """
    command = None
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        command = args.command
        if command is None:
            raise UsageError(f"{PROG}: error: choose a command: info, check or bench (see {PROG} --help)")
        return int(args.func(args) or 0)
    except SystemExit as exit_:  # --help, --version
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except UsageError as error:
        print(str(error), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a command that stopped reading (| head)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as error:
        if os.environ.get("CSRATTN_DEBUG", "") not in ("", "0"):
            raise
        where = f"{PROG} {command}" if command else PROG
        kind = "" if isinstance(error, CommandError) else f"{type(error).__name__}: "
        print(f"{where}: error: {kind}{_first_line(error)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""Loading the kernels in cuda/*.cu through cupy.RawModule.

Each specialization (kernel family x data type x index type) is the family's source behind
a small #define preamble, with common.cuh and its own headers inlined, so CuPy's on-disk
cache (keyed by the source text and options) is reused across processes and invalidated by
any header edit.
Entry points are extern "C": no name_expressions, which would recompile in every process.
"""
import functools
import pathlib
import re

import numpy as np

from cupy_csrattn import _dispatch

_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
# Installed wheels carry the kernels in the package; a source checkout has them beside it.
_KERNEL_DIRS = [d for d in (_PACKAGE_DIR / "cuda", _PACKAGE_DIR.parent / "cuda") if (d / "common.cuh").exists()]
KERNEL_DIR = _KERNEL_DIRS[0] if _KERNEL_DIRS else None


def _kernel_dir():
    if KERNEL_DIR is None:
        raise RuntimeError(f"the CUDA kernel sources were not found in {_PACKAGE_DIR / 'cuda'}; reinstall the package")
    return KERNEL_DIR

# The extern "C" entry points of each family, for warmup() and the compile tests.
_ROW_KERNELS = ("v1", "v2", "v4", "wide")  # one weight functor's kernels, see aggregate.cuh
ENTRY_POINTS = {
    "softmax": tuple(f"softmax_{stage}_{mode}" for mode in ("forward", "lse", "grad_probs", "grad_scores")
                     for stage in ("groups", "rows", "merge", "write")),
    "aggregate": tuple(f"aggregate_{mode}_{variant}"
                       for mode in ("ones", "weights", "weights_perm", "softmax", "probs_perm")
                       for variant in _ROW_KERNELS) + ("aggregate_merge_sum", "aggregate_merge_softmax"),
    "sddmm": ("sddmm_dot_v1", "sddmm_dot_v2", "sddmm_dot_v4", "sddmm_add"),
    "attention": tuple(f"attention_{score}_{stage}_{variant}" for score in ("dot", "gat")
                       for stage in ("forward", "probs_t", "grad", "grad_t")
                       for variant in _ROW_KERNELS) + ("attention_row_dot",),
}

DTYPE_CODES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.float16): 2}
INDEX_TYPES = {np.dtype(np.int32): "int", np.dtype(np.int64): "long long"}
COMPILE_OPTIONS = ("-std=c++14",)


class KernelCompileError(RuntimeError):
    """A kernel specialization failed to compile; the message names it and holds the log."""


def specializations():
    """Every (family, dtype, index dtype) that the GPU backend may load."""
    return [(family, dtype, index_dtype) for family in ENTRY_POINTS for dtype in DTYPE_CODES
            for index_dtype in INDEX_TYPES]


_INCLUDE = re.compile(r'^#include "([\w.]+\.cuh)"$', re.MULTILINE)


@functools.lru_cache(maxsize=None)
def source(family, dtype, index_dtype):
    """The full source text of one specialization: preamble, common.cuh, the family's file
    with its ``#include "*.cuh"`` lines replaced by those headers from cuda/."""
    dtype, index_dtype = np.dtype(dtype), np.dtype(index_dtype)
    preamble = (f"#define CSR_DTYPE {DTYPE_CODES[dtype]}\n"
                f"#define CSR_IDX {INDEX_TYPES[index_dtype]}\n")
    common = (_kernel_dir() / "common.cuh").read_text()
    body = _INCLUDE.sub(lambda m: f"// ---- {m.group(1)} ----\n" + (_kernel_dir() / m.group(1)).read_text(),
                        (_kernel_dir() / f"{family}.cu").read_text())
    return preamble + common + f"\n// ---- {family}.cu ----\n" + body


@functools.lru_cache(maxsize=None)
def _module(family, dtype, index_dtype, device_id):
    cupy = _dispatch.cupy
    name = f"{family}.cu [{np.dtype(dtype).name}, {np.dtype(index_dtype).name}]"
    try:
        module = cupy.RawModule(code=source(family, dtype, index_dtype), options=COMPILE_OPTIONS)
        module.compile()
    except cupy.cuda.compiler.CompileException as error:
        raise KernelCompileError(f"compiling {name} failed:\n{error.get_message()}") from None
    return module


def kernel(family, name, dtype, index_dtype):
    """The RawKernel `name` of a family's specialization, compiled once per device."""
    return _function(family, name, np.dtype(dtype), np.dtype(index_dtype), _dispatch.cupy.cuda.runtime.getDevice())


@functools.lru_cache(maxsize=None)
def _function(family, name, dtype, index_dtype, device_id):
    return _module(family, dtype, index_dtype, device_id).get_function(name)


def warmup(dtypes=None, index_dtypes=None):
    """Compile (or load from CuPy's disk cache) every kernel for the current device.

    Parameters
    ----------
    dtypes : iterable of dtypes, optional
        Data types to prepare; all supported (float16, float32, float64) by default.
    index_dtypes : iterable of dtypes, optional
        Index types to prepare; int32 and int64 by default.
    """
    if not _dispatch.gpu_available():
        raise RuntimeError("warmup needs CuPy and a usable CUDA device")
    dtypes = DTYPE_CODES if dtypes is None else [np.dtype(d) for d in dtypes]
    index_dtypes = INDEX_TYPES if index_dtypes is None else [np.dtype(d) for d in index_dtypes]
    for family, names in ENTRY_POINTS.items():
        for dtype in dtypes:
            for index_dtype in index_dtypes:
                for name in names:
                    kernel(family, name, dtype, index_dtype)


def compile_for_arch(family, dtype, index_dtype, arch):
    """Compile one specialization to machine code for ``arch`` (e.g. "sm_90") with NVRTC, no GPU needed.

    Returns (log, cubin bytes); raises KernelCompileError on an error.
    """
    from cupy_backends.cuda.libs import nvrtc

    name = f"{family}.cu [{np.dtype(dtype).name}, {np.dtype(index_dtype).name}]"
    program = nvrtc.createProgram(source(family, dtype, index_dtype), f"{family}.cu", [], [])
    options = [f"-arch={arch}", *COMPILE_OPTIONS]
    try:
        nvrtc.compileProgram(program, options)
        return nvrtc.getProgramLog(program), nvrtc.getCUBIN(program)
    except nvrtc.NVRTCError:
        raise KernelCompileError(f"compiling {name} for {arch} failed:\n{nvrtc.getProgramLog(program)}") from None
    finally:
        nvrtc.destroyProgram(program)

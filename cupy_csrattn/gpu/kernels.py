"""Loading and launching the kernels in cuda/*.cu through cupy.RawModule.

Each specialization (kernel family x data type x index type) is the family's source behind
a small generated preamble (the data and index types, and the launch constants below), with
common.cuh and its own headers inlined, so CuPy's on-disk cache (keyed by the source text
and options) is reused across processes and invalidated by any header edit. Entry points
are extern "C" (no name_expressions, which would recompile in every process); the source
ends with a compile-time check of each against its declaration in gpu/signatures.py.
"""

import functools
import pathlib
import re

import numpy as np

from cupy_csrattn import backend
from cupy_csrattn.gpu import recording
from cupy_csrattn.gpu.signatures import SIGNATURES, families

# Launch constants, defined here only; the preamble hands BLOCK_WARPS to the .cu files.
WARP = 32
BLOCK_WARPS = 8  # warps per block of every kernel
BLOCK_THREADS = BLOCK_WARPS * WARP
MAX_BATCHED_HEADS = WARP  # the batched row and softmax-group kernels hold up to one head per lane
RUN_STAGE_BYTES = 4096  # shared memory per warp of softmax_runs: the staged edge data of its run
MAX_RUN_ROWS = 64  # rows per run of softmax_runs
MAX_BLOCK_ROWS = 16  # rows per pack of softmax_block_rows
CACHED = 8  # elements per lane the softmax kernels hold in registers for a whole row

NULL = np.uint64(0)  # a null pointer argument

DTYPE_CODES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.float16): 2}
INDEX_TYPES = {np.dtype(np.int32): "int", np.dtype(np.int64): "long long"}
COMPILE_OPTIONS = ("-std=c++14",)

_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent.parent
# Installed wheels carry the kernels in the package; a source checkout has them beside it.
_KERNEL_DIRS = [d for d in (_PACKAGE_DIR / "cuda", _PACKAGE_DIR.parent / "cuda") if (d / "common.cuh").exists()]
KERNEL_DIR = _KERNEL_DIRS[0] if _KERNEL_DIRS else None

FAMILIES = families()  # family -> entry point names


class KernelCompileError(RuntimeError):
    """A kernel specialization failed to compile; the message names it and holds the log."""


def _kernel_dir():
    if KERNEL_DIR is None:
        raise RuntimeError(f"the CUDA kernel sources were not found in {_PACKAGE_DIR / 'cuda'}; reinstall the package")
    return KERNEL_DIR


def specializations(families=None):
    """Every (family, dtype, index dtype) that the GPU backend may load (of ``families``)."""
    families = FAMILIES if families is None else families
    return [(family, dtype, index_dtype) for family in families for dtype in DTYPE_CODES for index_dtype in INDEX_TYPES]


def label(family, dtype, index_dtype):
    return f"{family}.cu [{np.dtype(dtype).name}, {np.dtype(index_dtype).name}]"


_INCLUDE = re.compile(r'^#include "([\w.]+\.cuh)"$', re.MULTILINE)


def _signature_checks(family):
    """One static_assert per declared entry point of ``family``: its type must be the declared one."""
    lines = [
        "// ---- declared signatures (gpu/signatures.py) ----",
        "template <class A, class B> struct csrattn_same_type { static constexpr bool value = false; };",
        "template <class A> struct csrattn_same_type<A, A> { static constexpr bool value = true; };",
    ]
    for name in FAMILIES[family]:
        params = ", ".join(param.ctype for param in SIGNATURES[name].params)
        lines.append(
            f"static_assert(csrattn_same_type<decltype({name}), void({params})>::value, "
            f'"{name}: parameters differ from its declaration in gpu/signatures.py");'
        )
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=None)
def source(family, dtype, index_dtype):
    """The full source text of one specialization: preamble, common.cuh, the family's file
    with its ``#include "*.cuh"`` lines replaced by those headers from cuda/, and the
    signature checks."""
    dtype, index_dtype = np.dtype(dtype), np.dtype(index_dtype)
    preamble = (
        f"#define CSR_DTYPE {DTYPE_CODES[dtype]}\n#define CSR_IDX {INDEX_TYPES[index_dtype]}\n"
        f"#define BLOCK_WARPS {BLOCK_WARPS}\n#define RUN_STAGE_BYTES {RUN_STAGE_BYTES}\n"
        f"#define MAX_RUN_ROWS {MAX_RUN_ROWS}\n#define MAX_BLOCK_ROWS {MAX_BLOCK_ROWS}\n#define CACHED {CACHED}\n"
    )
    common = (_kernel_dir() / "common.cuh").read_text()
    body = _INCLUDE.sub(
        lambda m: f"// ---- {m.group(1)} ----\n" + (_kernel_dir() / m.group(1)).read_text(),
        (_kernel_dir() / f"{family}.cu").read_text(),
    )
    return preamble + common + f"\n// ---- {family}.cu ----\n" + body + "\n" + _signature_checks(family)


@functools.lru_cache(maxsize=None)
def _module(family, dtype, index_dtype, device_id):
    cupy = backend.cupy
    try:
        module = cupy.RawModule(code=source(family, dtype, index_dtype), options=COMPILE_OPTIONS)
        module.compile()
    except cupy.cuda.compiler.CompileException as error:
        raise KernelCompileError(
            f"compiling {label(family, dtype, index_dtype)} failed:\n{error.get_message()}"
        ) from None
    return module


@functools.lru_cache(maxsize=None)
def _function(name, dtype, index_dtype, device_id):
    return _module(SIGNATURES[name].family, dtype, index_dtype, device_id).get_function(name)


def kernel(name, dtype, index_dtype):
    """The RawKernel ``name`` of its family's specialization, compiled once per device."""
    return _function(name, np.dtype(dtype), np.dtype(index_dtype), backend.cupy.cuda.runtime.getDevice())


# When set (the test suite does), every launch also checks each array argument's dtype
# against its declared C type; off, a launch does no per-argument work in Python.
CHECK_ARGUMENT_DTYPES = False

# Keyed by dtype and by scalar type: launchers pass array dtypes, callers may pass np.float32.
_ACCUMULATION_TYPES = {key: backend.accumulation_dtype(d).type for d in DTYPE_CODES for key in (d, d.type)}
_SCALAR_TYPES = {"i64": "_int64", "acc_t": "_acc"}  # int parameters: _int32, range-checked
_INT32 = np.iinfo(np.int32)


def _int32(value, name):
    """An int parameter's value as int32; a ValueError naming it past int32's range (NumPy 2's
    np.int32 raises OverflowError there, NumPy 1's wraps the value round)."""
    if not _INT32.min <= value <= _INT32.max:
        raise ValueError(
            f"the GPU kernels take {name} as a 32-bit int, got {value}: more than 2**31 - 1 heads or features"
        )
    return np.int32(value)


def _packer(signature):
    """A function of the kernel's parameters, by keyword, returning them in declared order with
    scalars converted to their C types and omitted optional pointers as null.

    Generated from the declaration (as dataclasses generate __init__): Python's own call
    binding then rejects an unknown or missing name, naming the kernel, at the cost of one
    call per launch rather than Python work per argument.
    """
    params, values = ["_acc"], []
    for param in signature.params:
        if param.is_pointer and param.optional:
            params.append(f"{param.name}=None")
            values.append(f"_NULL if {param.name} is None else {param.name}")
        else:
            params.append(param.name)
            if param.is_pointer:
                values.append(param.name)
            elif param.ctype == "int":
                values.append(f"_int32({param.name}, {param.name!r})")
            else:
                values.append(f"{_SCALAR_TYPES[param.ctype]}({param.name})")
    code = f"def {signature.name}(*, {', '.join(params)}):\n    return ({', '.join(values)},)\n"
    namespace = {"_int64": np.int64, "_int32": _int32, "_NULL": NULL}
    exec(compile(code, f"<arguments of {signature.name}>", "exec"), namespace)
    return namespace[signature.name]


_PACKERS = {name: _packer(signature) for name, signature in SIGNATURES.items()}


def pack_arguments(name, dtype, **arguments):
    """The argument tuple of kernel ``name`` for data type ``dtype`` from its arguments by name."""
    return _PACKERS[name](_acc=_ACCUMULATION_TYPES[np.dtype(dtype)], **arguments)


def _expected_dtype(ctype, dtype, index_dtype):
    base = ctype.replace("const ", "").rstrip("*").strip()
    accumulate = backend.accumulation_dtype(dtype)
    return {
        "scalar_t": np.dtype(dtype),
        "acc_t": accumulate,
        "lse_t": accumulate,
        "SoftmaxState": accumulate,
        "idx_t": np.dtype(index_dtype),
        "i64": np.dtype(np.int64),
        "int": np.dtype(np.int32),
    }[base]


def check_argument_dtypes(name, args, dtype, index_dtype):
    """TypeError unless every array in ``args`` has the dtype its declared C type implies."""
    for param, value in zip(SIGNATURES[name].params, args):
        if not param.is_pointer:
            continue
        if value is None:
            raise TypeError(f"internal: kernel {name} needs array {param.name}, got None")
        if value is not NULL and value.dtype != _expected_dtype(param.ctype, dtype, index_dtype):
            raise TypeError(f"internal: kernel {name} takes {param.name} as {param.ctype}, got dtype {value.dtype}")


def launch(name, dtype, index_dtype, grid, **arguments):
    """Launch kernel ``name`` with blocks of BLOCK_THREADS on CuPy's current stream, its
    arguments given by their declared names (optional pointers may be left out); nothing is
    launched when the grid is empty."""
    if grid[0] == 0:
        return
    args = _PACKERS[name](_acc=_ACCUMULATION_TYPES[dtype], **arguments)
    if CHECK_ARGUMENT_DTYPES:
        check_argument_dtypes(name, args, dtype, index_dtype)
    function = kernel(name, dtype, index_dtype)
    function(grid, (BLOCK_THREADS,), args)
    if recording.recording():
        recording.note_launch(function, grid, (BLOCK_THREADS,), args)


def warp_grid(num_warps):
    """Grid of BLOCK_WARPS-warp blocks covering num_warps warps."""
    return ((num_warps + BLOCK_WARPS - 1) // BLOCK_WARPS,)


def thread_grid(num_threads):
    """Grid of BLOCK_THREADS-thread blocks covering num_threads threads."""
    return ((num_threads + BLOCK_THREADS - 1) // BLOCK_THREADS,)


def compile_family(family, dtypes=None, index_dtypes=None):
    """Compile (or load from CuPy's disk cache) one family's specializations on the current device."""
    dtypes = DTYPE_CODES if dtypes is None else [np.dtype(d) for d in dtypes]
    index_dtypes = INDEX_TYPES if index_dtypes is None else [np.dtype(d) for d in index_dtypes]
    for dtype in dtypes:
        for index_dtype in index_dtypes:
            for name in FAMILIES[family]:
                kernel(name, dtype, index_dtype)


def compile_for_arch(family, dtype, index_dtype, arch, extra_options=()):
    """Compile one specialization to machine code for ``arch`` (e.g. "sm_90") with NVRTC, no GPU needed.

    ``extra_options``: NVRTC options added to the library's own (e.g. "-Xptxas=-v", whose
    report of each kernel's registers and spills then fills the log).
    Returns (log, cubin bytes); raises KernelCompileError on an error, RuntimeError when
    NVRTC cannot be loaded.
    """
    nvrtc = _nvrtc()
    check_arch(arch)
    program = nvrtc.createProgram(source(family, dtype, index_dtype), f"{family}.cu", [], [])
    options = [f"-arch={arch}", *COMPILE_OPTIONS, *extra_options]
    try:
        nvrtc.compileProgram(program, options)
        return nvrtc.getProgramLog(program), nvrtc.getCUBIN(program)
    except nvrtc.NVRTCError:
        raise KernelCompileError(
            f"compiling {label(family, dtype, index_dtype)} for {arch} failed:\n{nvrtc.getProgramLog(program)}"
        ) from None
    finally:
        nvrtc.destroyProgram(program)


def check_arch(arch):
    """ValueError unless ``arch`` is an architecture NVRTC compiles machine code for:
    ``"sm_"``, a number that NVRTC supports, and optionally ``"a"`` or ``"f"`` where NVRTC
    has that variant (``"sm_90a"``, not ``"sm_80a"``: an empty kernel compiled for it says).
    RuntimeError when NVRTC cannot be loaded."""
    nvrtc = _nvrtc()
    supported = tuple(nvrtc.getSupportedArchs())
    match = re.fullmatch(r"sm_([1-9]\d*)([af]?)", arch) if isinstance(arch, str) else None
    if match is None or int(match[1]) not in supported:
        names = ", ".join(f"sm_{n}" for n in supported)
        raise ValueError(f"arch must be one of {names} (what NVRTC {_version()} compiles for), got {arch!r}")
    if match[2]:
        program = nvrtc.createProgram('extern "C" __global__ void probe() {}', "probe.cu", [], [])
        try:
            nvrtc.compileProgram(program, [f"-arch={arch}"])
        except nvrtc.NVRTCError:
            variant = f"no {match[2]!r} variant of sm_{match[1]}"
            raise ValueError(f"arch {arch!r}: NVRTC {_version()} has {variant}") from None
        finally:
            nvrtc.destroyProgram(program)


def _version():
    """NVRTC's version as text ("13.5")."""
    return ".".join(str(v) for v in nvrtc_version())


def nvrtc_version():
    """(major, minor) of the NVRTC that compile_for_arch uses; RuntimeError when it cannot be loaded."""
    return tuple(_nvrtc().getVersion())


def _nvrtc():
    if backend.cupy is None:
        raise RuntimeError(f"compiling kernels needs CuPy's NVRTC bindings ({backend.cupy_missing()})")
    try:
        # Imported here, not at the top: only this offline compile needs CuPy's NVRTC bindings.
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as error:
        raise RuntimeError(f"NVRTC is not usable: {type(error).__name__}: {backend.first_line(error)}") from None
    return nvrtc


def scratch(shape, dtype):
    """An uninitialized device array for a kernel's intermediate results."""
    array = backend.cupy.empty(shape, dtype)
    if recording.recording():
        recording.note_allocation(array)
    return array


def vector_width(features, *arrays):
    """Elements per vector load (4, 2 or 1) for rows of ``features`` elements of these arrays:
    the widest that divides the row and keeps every row start aligned for its load size."""
    for width in (4, 2):
        if features % width == 0 and all(a.data.ptr % min(16, width * a.dtype.itemsize) == 0 for a in arrays):
            return width
    return 1

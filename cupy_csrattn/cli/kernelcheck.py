"""The compile step of ``csrattn check``: every kernel specialization compiles.

With a GPU each specialization is compiled (or loaded from CuPy's disk cache) on the
device, every entry point loaded; without one NVRTC compiles each for an architecture
given on the command line and the binary must hold every declared entry point.

Each step returns a :class:`CompileCheck`: the failure lines, what was compiled (for the
final line of ``csrattn check``), or why nothing was.
"""

import time
from collections import namedtuple

import numpy as np

from cupy_csrattn import backend
from cupy_csrattn.cli.common import Progress
from cupy_csrattn.gpu import kernels

NVRTC_HINT = (
    "to compile them, install NVRTC through CuPy's ctk extra: pip install 'cupy-cuda13x[ctk]' "
    "(the package's nvrtc extra), or 'cupy-cuda12x[ctk]' next to CuPy for CUDA 12"
)

#: The outcome of the compile step: ``failures`` (lines), ``compiled`` (what compiled, in
#: words, e.g. "12 of 12 kernel specializations compile for sm_90"; None when skipped) and
#: ``skipped`` (why nothing was compiled; None when it was).
CompileCheck = namedtuple("CompileCheck", ["failures", "compiled", "skipped"])


def specializations(quick):
    """Every kernel specialization; with ``quick`` one per family (float32 data, int32 indices)."""
    specs = kernels.specializations()
    if quick:
        specs = [s for s in specs if s[1] == np.float32 and s[2] == np.int32]
    return specs


def compile_on_device(quick, progress_enabled):
    """Compile (or load from the disk cache) the kernel specializations on the current GPU.

    Returns a CompileCheck.
    """
    specs = specializations(quick)
    failures = []
    started = time.perf_counter()
    with Progress(len(specs), "compiling kernels", enabled=progress_enabled) as progress:
        for family, dtype, index_dtype in specs:
            label = kernels.label(family, dtype, index_dtype)
            try:
                kernels.compile_family(family, [dtype], [index_dtype])
            except Exception as error:
                failures.append(f"{label}: {backend.first_line(error)}")
                progress.write(f"FAILED to compile {failures[-1]}")
            progress.advance(note=label)
    compiled = f"{len(specs) - len(failures)} of {len(specs)} kernel specializations compile on this GPU"
    print(f"{compiled} ({time.perf_counter() - started:.1f} s)")
    return CompileCheck(failures, compiled, None)


def compile_with_nvrtc(arch, quick, progress_enabled):
    """Compile the specializations through NVRTC for ``arch`` without a GPU.

    Returns a CompileCheck; when NVRTC is missing, no failure and the reason in ``skipped``
    (printed with a hint).
    """
    try:
        version = ".".join(str(v) for v in kernels.nvrtc_version())
    except Exception as error:
        skipped = f"NVRTC is not available ({type(error).__name__}: {backend.first_line(error)})"
        print(f"kernel compilation not checked: {skipped}; {NVRTC_HINT}")
        return CompileCheck([], None, skipped)
    if kernels.KERNEL_DIR is None:
        return CompileCheck(["the CUDA kernel sources were not found; reinstall the package"], None, None)
    specs = specializations(quick)
    failures = []
    started = time.perf_counter()
    with Progress(len(specs), f"NVRTC {arch}", enabled=progress_enabled) as progress:
        for family, dtype, index_dtype in specs:
            label = kernels.label(family, dtype, index_dtype)
            problem = None
            try:
                _, cubin = kernels.compile_for_arch(family, dtype, index_dtype, arch)
                missing = [n for n in kernels.FAMILIES[family] if b"\0" + n.encode() + b"\0" not in cubin]
                if missing:
                    problem = f"entry points missing from the binary: {', '.join(missing)}"
            except Exception as error:
                problem = backend.first_line(error)
            if problem is not None:
                failures.append(f"{label}: {problem}")
                progress.write(f"FAILED {failures[-1]}")
            progress.advance(note=label)
    compiled = f"{len(specs) - len(failures)} of {len(specs)} kernel specializations compile for {arch}"
    print(f"NVRTC {version}: {compiled} ({time.perf_counter() - started:.1f} s)")
    return CompileCheck(failures, compiled, None)

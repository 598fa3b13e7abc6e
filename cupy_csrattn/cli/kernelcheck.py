"""The compile step of ``csrattn check``: every kernel specialization compiles.

With a GPU each specialization is compiled (or loaded from CuPy's disk cache) on the
device, every entry point loaded; without one NVRTC compiles each for an architecture
given on the command line and the binary must hold every declared entry point.
"""

import time

import numpy as np

from cupy_csrattn import backend
from cupy_csrattn.cli.common import Progress
from cupy_csrattn.gpu import kernels

NVRTC_HINT = "install CuPy with its ctk extra, e.g. pip install 'cupy-cuda13x[ctk]'"


def specializations(quick):
    """Every kernel specialization; with ``quick`` one per family (float32 data, int32 indices)."""
    specs = kernels.specializations()
    if quick:
        specs = [s for s in specs if s[1] == np.float32 and s[2] == np.int32]
    return specs


def compile_on_device(quick, progress_enabled):
    """Compile (or load from the disk cache) the kernel specializations on the current GPU.

    Returns the failure lines.
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
    print(
        f"compiled {len(specs) - len(failures)} of {len(specs)} kernel specializations "
        f"in {time.perf_counter() - started:.1f} s"
    )
    return failures


def compile_with_nvrtc(arch, quick, progress_enabled):
    """Compile the specializations through NVRTC for ``arch`` without a GPU.

    Returns the failure lines; none (with a message) when NVRTC is missing.
    """
    try:
        version = ".".join(str(v) for v in kernels.nvrtc_version())
    except Exception as error:
        print(
            f"kernel compilation not checked: NVRTC is not available ({type(error).__name__}: "
            f"{backend.first_line(error)}); {NVRTC_HINT}"
        )
        return []
    if kernels.KERNEL_DIR is None:
        return ["the CUDA kernel sources were not found; reinstall the package"]
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
    print(
        f"NVRTC {version}: {len(specs) - len(failures)} of {len(specs)} kernel specializations compile for "
        f"{arch} ({time.perf_counter() - started:.1f} s)"
    )
    return failures

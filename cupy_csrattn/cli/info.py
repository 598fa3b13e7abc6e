"""``csrattn info``: versions, the GPU, CUDA, the kernel families and CuPy's kernel cache."""

import importlib.metadata
import json
import os
import platform
import sys

import numpy as np
import scipy

import cupy_csrattn
from cupy_csrattn import backend
from cupy_csrattn.gpu import kernels


def add_parser(commands):
    """The ``info`` subcommand's parser, added to ``commands``."""
    info = commands.add_parser(
        "info",
        help="versions, GPU, CUDA and the kernel cache",
        description="Print the versions of the package, Python, NumPy, SciPy and CuPy; whether a GPU is usable "
        "and which; the CUDA runtime, driver and NVRTC versions; the kernel families and how many "
        "compiled kernels CuPy's on-disk cache holds.",
    )
    info.add_argument("--json", action="store_true", help="print the report as JSON")
    info.set_defaults(func=cmd_info)
    return info


def cuda_version(number):
    """CUDA's version number (12040) as text ("12.4")."""
    return f"{number // 1000}.{number % 1000 // 10}"


def kernel_cache_dir():
    """Where CuPy keeps compiled kernels on disk."""
    return os.environ.get("CUPY_CACHE_DIR") or os.path.expanduser(os.path.join("~", ".cupy", "kernel_cache"))


def scan_kernel_cache(cache_dir, entry_points):
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


def _distribution_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cuda_info(cupy):
    """CUDA runtime, driver and NVRTC versions (with why not, where one is unavailable)."""
    cuda = {}
    for key, getter in (
        ("runtime", cupy.cuda.runtime.runtimeGetVersion),
        ("driver", cupy.cuda.runtime.driverGetVersion),
    ):
        try:
            version = getter()
            cuda[key] = cuda_version(version) if version else None
            if not version:
                cuda[key + "_error"] = "none found"
        except Exception as error:
            cuda[key] = None
            cuda[key + "_error"] = backend.first_line(error)
    try:
        cuda["nvrtc"] = ".".join(str(v) for v in kernels.nvrtc_version())
    except Exception as error:
        cuda["nvrtc"] = None
        cuda["nvrtc_error"] = backend.first_line(error)
    return cuda


def _gpus(cupy):
    """One dict per CUDA device: its properties, or the error reading them."""
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:
        count = 0
    gpus = []
    for device_id in range(count):
        try:
            props = cupy.cuda.runtime.getDeviceProperties(device_id)
            gpus.append(
                {
                    "id": device_id,
                    "name": props["name"].decode(),
                    "compute_capability": f"{props['major']}.{props['minor']}",
                    "memory_gib": round(props["totalGlobalMem"] / 2**30, 1),
                    "multiprocessors": props["multiProcessorCount"],
                    "l2_cache_mib": round(props.get("l2CacheSize", 0) / 2**20, 1),
                }
            )
        except Exception as error:
            gpus.append({"id": device_id, "error": backend.first_line(error)})
    return gpus


def gather_info():
    """Everything ``csrattn info`` reports, as a dict."""
    cupy = backend.cupy
    usable, reason = backend.gpu_status()
    cache = scan_kernel_cache(kernel_cache_dir(), kernels.FAMILIES)
    cache["in_memory_only"] = os.environ.get("CUPY_CACHE_IN_MEMORY", "0") not in ("", "0")
    return {
        "cupy_csrattn": {
            "version": cupy_csrattn.__version__,
            "path": os.path.dirname(os.path.abspath(cupy_csrattn.__file__)),
        },
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "platform": platform.platform(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "matplotlib": _distribution_version("matplotlib"),
        "cupy": None if cupy is None else cupy.__version__,
        "cuda": {} if cupy is None else _cuda_info(cupy),
        "gpus": [] if cupy is None else _gpus(cupy),
        "gpu_usable": usable,
        "gpu_reason": reason,
        "kernels": {
            "source_dir": None if kernels.KERNEL_DIR is None else str(kernels.KERNEL_DIR),
            "families": {family: len(names) for family, names in kernels.FAMILIES.items()},
            "specializations": len(kernels.specializations()),
            "dtypes": [d.name for d in kernels.DTYPE_CODES],
            "index_dtypes": [d.name for d in kernels.INDEX_TYPES],
        },
        "kernel_cache": cache,
    }


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
        print(
            "CuPy         not installed: every op runs on the CPU backend "
            "(pip install 'cupy_csrattn[cuda13]' or '[cuda12]' for the GPU)"
        )
    else:
        print(f"CuPy         {info['cupy']}")
        cuda = info["cuda"]
        runtime = cuda.get("runtime") or f"unavailable ({cuda.get('runtime_error')})"
        driver = cuda.get("driver") or f"unavailable ({cuda.get('driver_error')})"
        nvrtc = cuda.get("nvrtc") or f"unavailable ({cuda.get('nvrtc_error')})"
        if len(nvrtc) > 100:
            nvrtc = nvrtc[:97] + "..."
        print(f"CUDA         runtime {runtime}, driver {driver}, NVRTC {nvrtc}")
    for gpu in info["gpus"]:
        if "error" in gpu:
            print(f"GPU {gpu['id']}        unreadable: {gpu['error']}")
        else:
            print(
                f"GPU {gpu['id']}        {gpu['name']}, compute capability {gpu['compute_capability']}, "
                f"{gpu['memory_gib']} GiB, {gpu['multiprocessors']} SMs, L2 {gpu['l2_cache_mib']} MiB"
            )
    if info["gpu_usable"]:
        print("Backend      CuPy arrays run on the GPU; NumPy arrays on the CPU backend")
    else:
        print(f"Backend      the CPU backend ({info['gpu_reason']})")
    _print_kernels(info["kernels"], info["kernel_cache"])
    return 0


def _print_kernels(kernel_info, cache):
    families = ", ".join(f"{family} ({count} entry points)" for family, count in kernel_info["families"].items())
    print(f"Kernels      {kernel_info['source_dir'] or 'sources NOT FOUND (reinstall the package)'}")
    print(f"             {families}")
    print(
        f"             {kernel_info['specializations']} specializations: each family x "
        f"{'/'.join(kernel_info['dtypes'])} x {'/'.join(kernel_info['index_dtypes'])} indices"
    )
    if cache["in_memory_only"]:
        print("Kernel cache CUPY_CACHE_IN_MEMORY is set: compiled kernels are not kept on disk")
    elif not cache["exists"]:
        print(f"Kernel cache {cache['dir']} does not exist yet: no kernel has been compiled on this machine")
    else:
        held = ", ".join(f"{family} {count}" for family, count in cache["families"].items())
        print(f"Kernel cache {cache['dir']}: {cache['files']} files; holding cupy_csrattn kernels: {held}")
        print(
            "             (one file per specialization, GPU architecture and source version; which dtype and "
            "index type a file holds cannot be read back from it)"
        )

"""``csrattn check``: compile every kernel, then check every op on this machine."""

import argparse

from cupy_csrattn import backend
from cupy_csrattn.cli import kernelcheck, opcheck
from cupy_csrattn.cli.common import progress_wanted


def add_parser(commands):
    """The ``check`` subcommand's parser, added to ``commands``."""
    check = commands.add_parser(
        "check",
        help="compile every kernel and check every op on this machine",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="With a GPU: compile every kernel specialization, then run each op on random graphs\n"
        "(with empty rows and a hub row) on the GPU and compare with the CPU backend.\n"
        "Without one: compile every kernel through NVRTC for --arch (skipped, with a message,\n"
        "when NVRTC is missing), then compare the CPU backend with a naive float64 reference.\n"
        "Exits with status 1 on any compile failure or mismatch.",
    )
    check.add_argument(
        "--quick",
        action="store_true",
        help="smaller graphs, fewer dtypes, and one kernel specialization per family "
        "(float32 data, int32 indices) compiled",
    )
    check.add_argument("--no-compile", action="store_true", help="skip the kernel compilation step")
    check.add_argument("--cpu", action="store_true", help="check the CPU backend even when a GPU is present")
    check.add_argument(
        "--arch", default="sm_90", help="architecture for the NVRTC compile without a GPU (default: %(default)s)"
    )
    check.add_argument("--seed", type=int, default=0, help="seed of the random graphs and data (default: 0)")
    check.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    check.set_defaults(func=cmd_check)
    return check


def cmd_check(args):
    progress_enabled = progress_wanted(args)
    usable, reason = backend.gpu_status()
    if args.cpu:
        usable, reason = False, "--cpu given"
    failures = []
    if usable:
        cupy = backend.cupy
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        print(
            f"GPU {props['name'].decode()} (compute capability {props['major']}.{props['minor']}): compiling "
            f"every kernel specialization, then running each op on the GPU against the CPU backend"
        )
        if args.no_compile:
            print("kernel compilation not checked (--no-compile); kernels compile on first use")
        else:
            failures += kernelcheck.compile_on_device(args.quick, progress_enabled)
    else:
        print(
            f"No usable GPU ({reason}): the CPU backend is used. Checking that the kernels compile "
            f"through NVRTC for {args.arch}, then the CPU backend against a naive float64 reference."
        )
        if args.no_compile:
            print("kernel compilation not checked (--no-compile)")
        else:
            failures += kernelcheck.compile_with_nvrtc(args.arch, args.quick, progress_enabled)
    summary, op_failures = opcheck.check_ops(backend.cupy if usable else None, args.quick, args.seed, progress_enabled)
    failures += op_failures
    print_summary(summary)
    if failures:
        print(f"\ncheck FAILED: {len(failures)} problem(s):")
        for line in failures:
            print(f"  {line}")
        return 1
    total = sum(counts["cases"] for counts in summary.values())
    print(f"\ncheck passed: {total} op cases agree with {'the CPU backend' if usable else 'the reference'}")
    return 0


def print_summary(summary):
    """One line per case: how many runs, and how many failed."""
    width = max([30] + [len(name) for name in summary])
    print(f"\n{'op':<{width}} {'cases':>5}  result")
    for name, counts in summary.items():
        result = f"{counts['mismatch']} FAILED, {counts['ok']} ok" if counts["mismatch"] else "ok"
        print(f"{name:<{width}} {counts['cases']:>5}  {result}")

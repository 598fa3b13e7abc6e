"""``csrattn check``: compile every kernel, then check every op on this machine."""

import argparse

from cupy_csrattn import backend
from cupy_csrattn.cli import kernelcheck, opcheck
from cupy_csrattn.cli.common import PROG, UsageError, nonnegative_int, progress_wanted
from cupy_csrattn.gpu import kernels

DEFAULT_ARCH = "sm_90"


def add_parser(commands):
    """The ``check`` subcommand's parser, added to ``commands``."""
    check = commands.add_parser(
        "check",
        help="compile every kernel and check every op on this machine",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="With a GPU: compile every kernel specialization, then run each op on random graphs\n"
        "(with empty rows and a hub row) on the GPU and compare with the CPU backend.\n"
        "Without one: compile every kernel through NVRTC for --arch, then compare the CPU backend\n"
        "with a naive float64 reference. Without NVRTC the kernels are not compiled: the last line\n"
        "then says 'ops checked, kernels NOT compiled' and why, instead of 'check passed'.\n"
        "Exits with status 1 on any compile failure or mismatch, else 0.",
    )
    check.add_argument(
        "--quick",
        action="store_true",
        help="smaller graphs, no float16 on a GPU (the CPU backend checks float32 and float64 either way), "
        "and one kernel specialization per family (float32 data, int32 indices) compiled",
    )
    check.add_argument("--no-compile", action="store_true", help="skip the kernel compilation step")
    check.add_argument("--cpu", action="store_true", help="check the CPU backend even when a GPU is present")
    check.add_argument(
        "--arch",
        help=f"architecture for the NVRTC compile without a GPU or with --cpu (default: {DEFAULT_ARCH}); "
        "refused where nothing compiles for it (--no-compile, or a GPU without --cpu)",
    )
    check.add_argument(
        "--seed", type=nonnegative_int, default=0, help="seed of the random graphs and data, >= 0 (default: 0)"
    )
    check.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    check.set_defaults(func=cmd_check)
    return check


def cmd_check(args):
    progress_enabled = progress_wanted(args)
    usable, reason = backend.gpu_status()
    if args.cpu:
        usable, reason = False, "--cpu given"
    _check_arch_wanted(args, usable)
    arch = args.arch if args.arch is not None else DEFAULT_ARCH
    failures = []
    compile_check = kernelcheck.CompileCheck([], None, "--no-compile")
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
            compile_check = kernelcheck.compile_on_device(args.quick, progress_enabled)
    else:
        if not args.no_compile:
            _check_arch(arch)
        compiled = "" if args.no_compile else f"that the kernels compile through NVRTC for {arch}, then "
        print(f"The CPU backend ({reason}). Checking {compiled}the CPU backend against a naive float64 reference.")
        if args.no_compile:
            print("kernel compilation not checked (--no-compile)")
        else:
            compile_check = kernelcheck.compile_with_nvrtc(arch, args.quick, progress_enabled)
    failures += compile_check.failures
    summary, op_failures = opcheck.check_ops(backend.cupy if usable else None, args.quick, args.seed, progress_enabled)
    failures += op_failures
    print_summary(summary)
    if failures:
        print(f"\ncheck FAILED: {len(failures)} problem(s):")
        for line in failures:
            print(f"  {line}")
        return 1
    print("\n" + final_line(summary, usable, compile_check))
    return 0


def _check_arch_wanted(args, on_gpu):
    """A usage error for an --arch that nothing would compile for (it was ignored): with
    --no-compile, or on a GPU without --cpu, where the kernels compile for that GPU."""
    if args.arch is None:
        return
    if args.no_compile:
        raise UsageError(f"{PROG} check: error: --arch: nothing is compiled with --no-compile")
    if on_gpu:
        raise UsageError(
            f"{PROG} check: error: --arch: the kernels compile for this GPU; "
            "add --cpu to compile them through NVRTC for --arch instead"
        )


def _check_arch(arch):
    """A usage error for an --arch that NVRTC does not compile for (found before any work is
    done); without NVRTC the compile step says why it is skipped instead."""
    try:
        kernels.check_arch(arch)
    except ValueError as error:
        raise UsageError(f"{PROG} check: error: --arch: {error}") from None
    except RuntimeError:
        pass


def final_line(summary, on_gpu, compile_check):
    """The last line of a check without failures: what was checked, and what was not.

    "check passed" only when the kernels were compiled or --no-compile said not to; without
    NVRTC it says "ops checked, kernels NOT compiled" and why (the exit status stays 0).
    """
    total = sum(counts["cases"] for counts in summary.values())
    ops = f"{total} op cases agree with {'the CPU backend' if on_gpu else 'the reference'}"
    if compile_check.skipped is None:
        return f"check passed: {compile_check.compiled}; {ops}"
    if compile_check.skipped == "--no-compile":
        return f"check passed: {ops}; kernels not compiled (--no-compile)"
    return f"ops checked, kernels NOT compiled: {ops}; {compile_check.skipped}"


def print_summary(summary):
    """One line per case: how many runs, and how many failed."""
    width = max([30] + [len(name) for name in summary])
    print(f"\n{'op':<{width}} {'cases':>5}  result")
    for name, counts in summary.items():
        result = f"{counts['mismatch']} FAILED, {counts['ok']} ok" if counts["mismatch"] else "ok"
        print(f"{name:<{width}} {counts['cases']:>5}  {result}")

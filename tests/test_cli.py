"""The csrattn command (info, check, bench) on the CPU backend, and the benchmark machinery
it shares with benchmarks/bench_gpu.py."""

import dataclasses
import functools
import io
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
import scipy
from helpers import load_benchmark

import cupy_csrattn as ca
from cupy_csrattn import backend, cli, datasets
from cupy_csrattn import bench as bm
from cupy_csrattn.bench import baselines, report
from cupy_csrattn.cli import opcheck
from cupy_csrattn.cpu import edge_dots
from cupy_csrattn.gpu import kernels
from cupy_csrattn.ops.registry import OPS

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_module(*args, env=None):
    """python -m cupy_csrattn.cli ARGS in a fresh process (stderr is a pipe: no progress bar)."""
    environment = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "cupy_csrattn.cli", *args],
        capture_output=True,
        text=True,
        env=environment,
        cwd=ROOT,
        timeout=120,
    )


def run_main(capsys, *args):
    """cli.main(args) in this process: (exit status, stdout, stderr)."""
    status = cli.main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def one_line(text):
    lines = text.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {lines}"
    return lines[0]


# ---------------------------------------------------------------------------------------
# The command line itself


def test_help_in_a_fresh_process():
    result = run_module("--help")
    assert result.returncode == 0
    for command in ("info", "check", "bench"):
        assert command in result.stdout
    assert result.stderr == ""


@pytest.mark.parametrize("command", ["info", "check", "bench"])
def test_subcommand_help(capsys, command):
    status, out, err = run_main(capsys, command, "--help")
    assert status == 0
    assert f"usage: csrattn {command}" in out
    assert err == ""


def test_check_quick_help_says_which_dtypes_it_drops(capsys, monkeypatch):
    """--quick said "fewer dtypes", but only a GPU drops one (float16): the CPU backend is
    checked in float32 and float64 either way."""
    _, out, _ = run_main(capsys, "check", "--help")
    assert "fewer dtypes" not in out
    assert "no float16 on a GPU (the CPU backend checks float32 and float64 either way)" in " ".join(out.split())
    dtypes = {True: set(), False: set()}
    for quick, seen in dtypes.items():
        monkeypatch.setattr(opcheck, "run_case", lambda case, graph, xp, dtype, *args, seen=seen: seen.add(dtype.name))
        opcheck.check_ops(None, quick, 0, False)
    assert dtypes[True] == dtypes[False] == {"float32", "float64"}


def test_version(capsys):
    status, out, _ = run_main(capsys, "--version")
    assert status == 0 and ca.__version__ in out


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["bench", "--heads", "0"], "--heads"),
        (["bench", "--dtype", "float8"], "invalid choice"),
        (["bench", "--ops", "softmax"], "--ops"),
        (["check", "--bogus"], "unrecognized arguments"),
        (["frobnicate"], "invalid choice"),
        ([], "choose a command"),
        (["bench", "--graph", "rmat:x"], "bad graph spec"),
        (["bench", "--graph", "uniform:10"], "uniform:N,DEG"),
        (["bench", "--graph", "/no/such/graph.mtx"], "/no/such/graph.mtx"),
        (["bench", "--graph", "rmat:3_0"], "bad graph spec 'rmat:3_0'"),  # was int("3_0"): scale 30
        (["bench", "--graph", "uniform:+5,2"], "bad graph spec"),
        (["bench", "--graph", os.path.dirname(__file__)], "is not a file (a directory?)"),  # was IsADirectoryError
        (["bench", "--graph", "uniform:10,2", "--out", ""], "--out: an empty path"),  # was taken as no --out
    ],
)
def test_usage_errors_exit_2_with_one_line(capsys, args, fragment):
    status, _, err = run_main(capsys, *args)
    assert status == 2
    line = one_line(err)
    assert fragment in line
    assert "Traceback" not in err


def test_usage_error_in_a_fresh_process():
    result = run_module("bench", "--repeat", "zero")
    assert result.returncode == 2
    assert "--repeat" in one_line(result.stderr)


@pytest.mark.parametrize("seed", ["-1", "-100"])
def test_check_negative_seed_is_a_usage_error_before_anything_runs(capsys, monkeypatch, seed):
    """Issue 13 item 8: --seed -1 was accepted and failed at run time (after the kernels were
    compiled) with a ValueError from NumPy; it is now refused as it is parsed."""

    def must_not_run(*args, **kwargs):
        raise AssertionError("check ran with a bad --seed")

    from cupy_csrattn.cli import kernelcheck

    monkeypatch.setattr(opcheck, "check_ops", must_not_run)
    monkeypatch.setattr(kernelcheck, "compile_with_nvrtc", must_not_run)
    monkeypatch.setattr(kernelcheck, "compile_on_device", must_not_run)
    status, out, err = run_main(capsys, "check", "--quick", "--seed", seed)
    assert status == 2, err
    line = one_line(err)
    assert line == f"csrattn check: error: argument --seed: '{seed}' must be at least 0 (see csrattn check --help)"
    assert out == ""


# ---------------------------------------------------------------------------------------
# info


def test_info_reports_versions_and_backend(capsys, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "0123abcd.cubin").write_bytes(b"\0ELF..\0softmax_groups_forward\0more")
    (cache / "other.cubin").write_bytes(b"unrelated kernel")
    monkeypatch.setenv("CUPY_CACHE_DIR", str(cache))
    status, out, err = run_main(capsys, "info")
    assert status == 0 and err == ""
    for fragment in (
        f"cupy_csrattn {ca.__version__}",
        "NumPy",
        np.__version__,
        "SciPy",
        "CuPy",
        "Kernels",
        "softmax",
        "aggregate",
        "sddmm",
        str(cache),
        "2 files",
        "softmax 1",
    ):
        assert fragment in out, fragment
    if not backend.gpu_status()[0]:
        assert "no usable GPU" in out and "CPU backend" in out


def test_info_with_a_cupy_that_raises_on_import(tmp_path):
    """backend.py serves the CPU backend when an installed CuPy raises on import (a broken
    install, or CUPY_CACHE_DIR naming a file); csrattn itself died with a traceback then,
    importing cupyx in cupy_csrattn.testing, before any command (--help and info too) ran."""
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text("raise RuntimeError('this CuPy is broken')\n")
    (tmp_path / "cupyx").mkdir()
    (tmp_path / "cupyx" / "__init__.py").write_text("import cupy\n")
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = run_module("info", env=env)
    assert result.returncode == 0, result.stderr
    assert "importing CuPy raised RuntimeError: this CuPy is broken" in result.stdout
    assert result.stderr == ""
    assert run_module("--help", env=env).returncode == 0


def test_what_needs_cupy_says_why_it_is_missing(monkeypatch):
    """With a CuPy that raised on import, what needs it names that error, not a missing install."""
    monkeypatch.setattr(backend, "cupy", None)
    monkeypatch.setattr(backend, "_cupy_import_error", RuntimeError("this CuPy is broken"))
    with pytest.raises(RuntimeError, match=r"NVRTC bindings \(importing CuPy raised RuntimeError: this CuPy is broken"):
        kernels.nvrtc_version()

    class OnDevice:
        __cuda_array_interface__ = {}

    with pytest.raises(TypeError, match=r"^x lives on a CUDA device, which needs CuPy \(importing CuPy raised"):
        backend.as_array("x", OnDevice())
    monkeypatch.setattr(backend, "_cupy_import_error", None)
    with pytest.raises(TypeError, match=r"needs CuPy \(CuPy is not installed\)$"):
        backend.as_array("x", OnDevice())


def test_info_json(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "missing"))
    status, out, _ = run_main(capsys, "info", "--json")
    assert status == 0
    info = json.loads(out)
    assert info["cupy_csrattn"]["version"] == ca.__version__
    assert info["numpy"] == np.__version__
    assert info["kernel_cache"]["exists"] is False
    assert info["kernels"]["specializations"] == len(info["kernels"]["families"]) * 6
    assert isinstance(info["gpu_usable"], bool)


# ---------------------------------------------------------------------------------------
# check


def test_check_quick_on_the_cpu_backend_in_a_fresh_process():
    result = run_module("check", "--quick", "--cpu", "--no-compile")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "CPU backend" in result.stdout
    assert "check passed" in result.stdout
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("check passed: ") and last.endswith("kernels not compiled (--no-compile)"), last
    for op in ("edge_softmax", "spmm_backward", "graph_attention_backward", "gat_attention_backward"):
        assert op in result.stdout
    assert result.stderr == ""  # no progress bar when stderr is not a terminal


def test_check_reports_a_mismatch_and_exits_1(capsys, monkeypatch):
    entry = OPS["edge_softmax"]
    original = entry.cpu

    def wrong(graph, scores, norm_by, out):
        original(graph, scores, norm_by, out)
        if out.size:
            out.reshape(-1)[-1] += 0.5

    # the ops run the CPU function their registry entry holds
    patched = dataclasses.replace(entry, cpu=wrong)
    monkeypatch.setitem(OPS, "edge_softmax", patched)
    monkeypatch.setattr(ca.edge_softmax, "op", patched)
    status, out, _ = run_main(capsys, "check", "--quick", "--cpu", "--no-compile")
    assert status == 1
    assert "check FAILED" in out
    assert "edge_softmax on random+hub" in out
    assert "max error" in out


def test_check_compiles_through_real_nvrtc_when_present(capsys):
    try:
        kernels.nvrtc_version()
    except Exception as error:
        pytest.skip(f"NVRTC is not usable here ({error}); the nvrtc extra installs it")
    status, out, _ = run_main(capsys, "check", "--quick", "--cpu")
    assert status == 0, out
    count = len(kernels.FAMILIES)
    assert f"{count} of {count} kernel specializations compile for sm_90" in out
    assert out.strip().splitlines()[-1].startswith(f"check passed: {count} of {count} kernel specializations")


def test_check_without_nvrtc_says_plainly_what_was_not_checked(capsys, monkeypatch):
    """Without NVRTC the ops are checked and the kernels are not: the last line says so, and
    never "check passed"; the exit status stays 0 (nothing that was checked failed)."""

    def missing():
        raise ImportError("No module named 'cupy_backends'")

    monkeypatch.setattr(kernels, "nvrtc_version", missing)
    status, out, _ = run_main(capsys, "check", "--quick", "--cpu")
    assert status == 0
    assert "kernel compilation not checked: NVRTC is not available" in out
    assert "nvrtc extra" in out  # how to get it
    assert "check passed" not in out
    last = out.strip().splitlines()[-1]
    assert last.startswith("ops checked, kernels NOT compiled: "), last
    assert "op cases agree with the reference" in last
    assert "NVRTC is not available (ImportError: No module named 'cupy_backends')" in last


def fake_compile(fail_family=None, drop_entry=None):
    calls = []

    def compile_for_arch(family, dtype, index_dtype, arch):
        calls.append((family, np.dtype(dtype).name, np.dtype(index_dtype).name, arch))
        if family == fail_family:
            raise kernels.KernelCompileError(
                f"compiling {family}.cu [{np.dtype(dtype).name}, "
                f"{np.dtype(index_dtype).name}] for {arch} failed:\nerror: x"
            )
        names = [n for n in kernels.FAMILIES[family] if n != drop_entry]
        return "", b"\0" + b"\0".join(n.encode() for n in names) + b"\0"

    return compile_for_arch, calls


@pytest.mark.parametrize("quick", [True, False])
def test_check_compiles_every_specialization_through_nvrtc(capsys, monkeypatch, quick):
    # --quick: one specialization per family (float32, int32); else all of them
    count = len(kernels.FAMILIES) if quick else len(kernels.specializations())
    compile_for_arch, calls = fake_compile()
    monkeypatch.setattr(kernels, "nvrtc_version", lambda: (12, 9))
    monkeypatch.setattr(kernels, "compile_for_arch", compile_for_arch)
    monkeypatch.setattr(opcheck, "check_ops", lambda *args: ({}, []))  # the compile step only
    args = ["check", "--cpu", "--arch", "sm_80"] + (["--quick"] if quick else [])
    status, out, _ = run_main(capsys, *args)
    assert status == 0, out
    assert f"{count} of {count} kernel specializations compile for sm_80" in out
    assert len(calls) == count and all(arch == "sm_80" for *_, arch in calls)
    assert len(calls) == len(set(calls))


class FakeNvrtc:
    """What kernels.check_arch asks of NVRTC: its architectures, and whether a program
    compiles for one (the variants it has: sm_90a, sm_100a, sm_100f)."""

    VARIANTS = ("sm_90a", "sm_100a", "sm_100f")

    class NVRTCError(Exception):
        pass

    @staticmethod
    def getSupportedArchs():
        return (75, 80, 90, 100)

    @staticmethod
    def getVersion():
        return (12, 9)

    @staticmethod
    def createProgram(source, name, headers, include_names):
        return object()

    @classmethod
    def compileProgram(cls, program, options):
        arch = options[0].removeprefix("-arch=")
        if arch[-1] in "af" and arch not in cls.VARIANTS:
            raise cls.NVRTCError("NVRTC_ERROR_COMPILATION (6)")

    @staticmethod
    def destroyProgram(program):
        pass


@pytest.mark.parametrize("arch", ["sm_1", "sm_91", "90", "compute_90", "sm_90b", "SM_90", "", "sm_090"])
def test_check_refuses_an_arch_nvrtc_does_not_compile_for(capsys, monkeypatch, arch):
    """A usage error (exit 2) naming --arch and what NVRTC supports, before any work."""
    monkeypatch.setattr(kernels, "_nvrtc", lambda: FakeNvrtc)
    monkeypatch.setattr(kernels, "compile_for_arch", fake_compile()[0])
    checked = []
    monkeypatch.setattr(opcheck, "check_ops", lambda *args: checked.append(args) or ({}, []))
    status, out, err = run_main(capsys, "check", "--cpu", "--quick", "--arch", arch)
    assert status == 2 and out == "" and not checked
    supported = "sm_75, sm_80, sm_90, sm_100 (what NVRTC 12.9 compiles for)"
    assert f"--arch: arch must be one of {supported}, got {arch!r}" in err


@pytest.mark.parametrize("arch", ["sm_80a", "sm_80f", "sm_90f"])
def test_check_refuses_a_variant_nvrtc_does_not_have(capsys, monkeypatch, arch):
    """sm_80 exists, sm_80a does not: found by compiling an empty kernel for it, before any work
    (every kernel was compiled and reported as failed)."""
    monkeypatch.setattr(kernels, "_nvrtc", lambda: FakeNvrtc)
    compiled = []
    monkeypatch.setattr(kernels, "compile_for_arch", lambda *args: compiled.append(args))
    status, out, err = run_main(capsys, "check", "--cpu", "--quick", "--arch", arch)
    assert status == 2 and out == "" and not compiled
    assert f"--arch: arch {arch!r}: NVRTC 12.9 has no {arch[-1]!r} variant of {arch[:-1]}" in err


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100f"])
def test_check_arch_takes_supported_architectures(monkeypatch, arch):
    monkeypatch.setattr(kernels, "_nvrtc", lambda: FakeNvrtc)
    kernels.check_arch(arch)
    with pytest.raises(ValueError, match="arch must be one of"):
        kernels.check_arch(90)


@pytest.mark.parametrize("on_gpu", [False, True])
def test_check_refuses_an_arch_nothing_compiles_for(capsys, monkeypatch, on_gpu):
    """--arch was ignored with --no-compile (even --arch bogus passed), and on a GPU without
    --cpu (the kernels compile for the GPU): a usage error naming --arch, before any work."""
    monkeypatch.setattr(kernels, "_nvrtc", lambda: FakeNvrtc)
    monkeypatch.setattr(backend, "gpu_status", lambda: (on_gpu, None if on_gpu else "no GPU here"))
    ran = []
    monkeypatch.setattr(opcheck, "check_ops", lambda *args: ran.append(args) or ({}, []))
    compile_for_arch, compiled = fake_compile()
    monkeypatch.setattr(kernels, "compile_for_arch", compile_for_arch)
    from cupy_csrattn.cli import kernelcheck

    monkeypatch.setattr(kernelcheck, "compile_on_device", lambda *args: ran.append(args))
    monkeypatch.setattr(backend, "cupy", None)  # the GPU branch must not be reached
    if not on_gpu:
        status, out, err = run_main(capsys, "check", "--no-compile", "--arch", "sm_80")
        assert status == 2 and out == "" and not ran and not compiled
        assert one_line(err) == "csrattn check: error: --arch: nothing is compiled with --no-compile"
    status, out, err = run_main(capsys, "check", "--quick", "--arch", "sm_80")
    if on_gpu:
        assert status == 2 and out == "" and not ran and not compiled
        assert one_line(err).startswith("csrattn check: error: --arch: the kernels compile for this GPU; add --cpu")
    else:
        assert status == 0, err
        assert "through NVRTC for sm_80" in out
    status, out, err = run_main(capsys, "check", "--quick", "--cpu", "--arch", "sm_80")
    assert status == 0, err
    assert "through NVRTC for sm_80" in out


def test_check_reports_compile_failures(capsys, monkeypatch):
    monkeypatch.setattr(kernels, "nvrtc_version", lambda: (12, 9))
    monkeypatch.setattr(opcheck, "check_ops", lambda *args: ({}, []))
    monkeypatch.setattr(kernels, "compile_for_arch", fake_compile(fail_family="sddmm")[0])
    status, out, _ = run_main(capsys, "check", "--cpu", "--quick")
    assert status == 1
    assert "check FAILED" in out and "sddmm.cu [float32, int32]" in out
    dropped = kernels.FAMILIES["softmax"][-1]
    monkeypatch.setattr(kernels, "compile_for_arch", fake_compile(drop_entry=dropped)[0])
    status, out, _ = run_main(capsys, "check", "--cpu", "--quick")
    assert status == 1
    assert f"entry points missing from the binary: {dropped}" in out


def test_check_gpu_path_with_a_fake_device(monkeypatch):
    """The GPU branch of the op check, with NumPy standing in for CuPy (every op has a GPU
    kernel now: there is no "no GPU kernel" count): results that agree pass, and results
    that differ from the CPU backend's fail."""
    small_graphs = opcheck.check_graphs
    monkeypatch.setattr(opcheck, "check_graphs", lambda seed, on_gpu, quick: small_graphs(seed, False, True))
    summary, failures = opcheck.check_ops(np, True, 0, False)
    assert failures == []
    for op in ("spmm", "graph_attention", "graph_attention_backward", "edge_softmax"):
        assert summary[op]["ok"] == summary[op]["cases"] > 0
    real_to_xp = opcheck.to_xp

    def shifted(xp, a):  # the "device" gets other inputs than the CPU backend: its results differ
        a = real_to_xp(xp, a)
        if not isinstance(a, tuple):
            return a
        a = tuple(x.copy() if isinstance(x, np.ndarray) else x for x in a)
        first = next((x for x in a if isinstance(x, np.ndarray) and x.size), None)
        if first is not None:
            first.reshape(-1)[0] += 0.5
        return a

    monkeypatch.setattr(opcheck, "to_xp", shifted)
    summary, failures = opcheck.check_ops(np, True, 0, False)
    assert summary["edge_softmax"]["mismatch"] > 0
    assert any(line.startswith("edge_softmax on random+hub") and "max error" in line for line in failures)


def test_check_compare_rules():
    # float32: testing.compare's tolerance 1e-5
    assert opcheck.compare_arrays(np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-7]), np.float32) is None
    assert "max error" in opcheck.compare_arrays(np.array([1.0, 2.0]), np.array([1.0, 2.1]), np.float32)
    assert "NaN" in opcheck.compare_arrays(np.array([np.nan]), np.array([np.nan]), np.float32)
    assert opcheck.compare_arrays(np.array([-np.inf, 0.0]), np.array([-np.inf, 0.0]), np.float32) is None
    assert "infinity" in opcheck.compare_arrays(np.array([0.0]), np.array([-np.inf]), np.float32)


# ---------------------------------------------------------------------------------------
# bench


def test_bench_tiny_graph_writes_json(capsys, tmp_path):
    status, out, err = run_main(
        capsys,
        "bench",
        "--graph",
        "uniform:300,4",
        "rmat:6",
        "--ops",
        "edge_softmax",
        "spmm",
        "attention_aggregate",
        "--heads",
        "1",
        "2",
        "--features",
        "8",
        "--repeat",
        "1",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--no-plot",
    )
    assert status == 0, err
    assert "CPU backend" in out
    assert "uniform-300x4" in out and "rmat-6" in out
    assert "csrattn" in out and "numpy" in out and "scipy" in out
    files = list(tmp_path.glob("bench_cpu_*.json"))
    assert len(files) == 1
    document = json.loads(files[0].read_text())
    assert document["device"] == "cpu"
    records = document["records"]
    cases = {(r["graph"], r["op"], r["H"], r["F"]) for r in records if r["method"] == "csrattn"}
    assert len(cases) == 2 * 3 * 2
    for record in records:
        assert record["ms"] > 0 and record["bytes"] > 0
        assert record["roofline_fraction"] == pytest.approx(record["roofline_ms"] / record["ms"])
    assert {r["method"] for r in records} >= {"csrattn", "numpy", "scipy", "numpy+scipy"}
    assert document["settings"]["heads"] == [1, 2]


def test_bench_plots_or_says_why_not(capsys, tmp_path):
    status, out, _ = run_main(
        capsys,
        "bench",
        "--graph",
        "uniform:100,3",
        "--ops",
        "edge_softmax",
        "--repeat",
        "1",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
    )
    assert status == 0
    if bm.matplotlib_available():
        assert (tmp_path / "bench_uniform-100x3.png").stat().st_size > 0
    else:
        assert "plots skipped: matplotlib is not installed" in out
        assert not list(tmp_path.glob("*.png"))


def test_bench_graph_file_and_malformed_file(capsys, tmp_path):
    good = tmp_path / "tiny.txt"
    good.write_text("0 1\n1 2\n2 0\n3 1\n")
    status, out, err = run_main(
        capsys,
        "bench",
        "--graph",
        str(good),
        "--ops",
        "spmm",
        "--repeat",
        "1",
        "--device",
        "cpu",
        "--heads",
        "1",
        "--features",
        "4",
    )
    assert status == 0, err
    assert "tiny: 4 rows, 4 edges" in out
    assert "results not written" in out
    bad = tmp_path / "bad.txt"
    bad.write_text("0 1\n1 two\n")
    status, _, err = run_main(capsys, "bench", "--graph", str(bad), "--ops", "spmm", "--repeat", "1", "--device", "cpu")
    assert status == 2
    assert one_line(err).startswith(f"csrattn bench: error: --graph: {bad}:2:")


def test_bench_device_gpu_without_gpu(capsys):
    if backend.gpu_status()[0]:
        pytest.skip("a GPU is usable here")
    status, _, err = run_main(capsys, "bench", "--device", "gpu", "--graph", "uniform:10,2")
    assert status == 1
    assert "--device gpu" in one_line(err)


def forbid_timing(monkeypatch):
    """Make every step that times (or readies the kernels) fail the test when it runs."""

    def must_not_run(*args, **kwargs):
        raise AssertionError("bench started timing before checking --out")

    for name in ("CpuDevice", "GpuDevice", "run_cases", "load_pyg"):
        monkeypatch.setattr(bm, name, must_not_run)
    monkeypatch.setattr(ca, "warmup", must_not_run)


def bad_out_dirs(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory\n")
    cases = {
        "a_file": (a_file, "exists and is not a directory"),
        "under_a_file": (a_file / "sub", "cannot create the directory"),
    }
    if os.path.isdir("/proc/self"):  # Linux: /proc takes no new directories
        cases["proc"] = (pathlib.Path("/proc/x"), "cannot create the directory")
    return cases


@pytest.mark.parametrize("case", ["a_file", "under_a_file", "proc"])
def test_bench_out_that_cannot_be_made_fails_before_timing(capsys, monkeypatch, tmp_path, case):
    """Issue 13 item 8: --out /proc/x failed only after the whole benchmark ran."""
    cases = bad_out_dirs(tmp_path)
    if case not in cases:
        pytest.skip("no /proc here")
    out_dir, reason = cases[case]
    forbid_timing(monkeypatch)
    status, out, err = run_main(capsys, "bench", "--graph", "uniform:50,2", "--device", "cpu", "--out", str(out_dir))
    assert status == 2, err
    assert one_line(err).startswith(f"csrattn bench: error: --out {out_dir}: {reason}")
    assert out == ""


def test_bench_out_that_cannot_be_written_fails_before_timing(capsys, monkeypatch, tmp_path):
    """A directory that can be made but not written (read-only, full, ...): the same usage
    error, and the directory it made is removed again."""
    import tempfile

    def not_writable(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    forbid_timing(monkeypatch)
    monkeypatch.setattr(tempfile, "NamedTemporaryFile", not_writable)
    out_dir = tmp_path / "results"
    status, _, err = run_main(capsys, "bench", "--graph", "uniform:50,2", "--device", "cpu", "--out", str(out_dir))
    assert status == 2
    assert one_line(err) == f"csrattn bench: error: --out {out_dir}: cannot write a file there (Permission denied)"
    assert not out_dir.exists()


def test_bench_results_file_name_taken_by_a_directory_fails_before_timing(capsys, monkeypatch, tmp_path):
    """A directory named as the results file: the write failed after the whole benchmark."""
    taken = tmp_path / f"bench_cpu_{bm.file_stem(bm.CpuDevice().name)}.json"
    taken.mkdir()

    def must_not_run(*args, **kwargs):
        raise AssertionError("bench started timing before checking where its results go")

    monkeypatch.setattr(bm, "run_cases", must_not_run)
    monkeypatch.setattr(bm.CpuDevice, "copy_bandwidth", must_not_run)
    status, out, err = run_main(capsys, "bench", "--graph", "uniform:50,2", "--device", "cpu", "--out", str(tmp_path))
    assert status == 2 and out == ""
    assert one_line(err) == (
        f"csrattn bench: error: --out {tmp_path}: {taken} is a directory, where the results are written"
    )


def test_bench_out_is_created_before_timing_and_left_with_the_results_only(capsys, tmp_path):
    out_dir = tmp_path / "new" / "results"
    status, _, err = run_main(
        capsys,
        "bench",
        "--graph",
        "uniform:50,2",
        "--ops",
        "edge_softmax",
        "--repeat",
        "1",
        "--heads",
        "1",
        "--device",
        "cpu",
        "--out",
        str(out_dir),
        "--no-plot",
    )
    assert status == 0, err
    assert [path.name for path in out_dir.iterdir()] == [f"bench_cpu_{bm.file_stem(bm.CpuDevice(1).name)}.json"]


@pytest.mark.parametrize(
    "spec,fragment",
    [
        ("uniform:10,100000000000000000000", "degree must be at most 2**62"),
        ("uniform:100000000000000000000,0", "num_nodes must be at most 2**62"),
        ("rmat:4,100000000000000000000000", "edge_factor must be at most 2**62"),
        ("rmat:34,999999999999", "edge_factor * 2**scale = "),
    ],
)
def test_bench_graph_spec_beyond_the_generators_is_a_usage_error(capsys, monkeypatch, spec, fragment):
    """A size the generator refuses was found only when the graph was built, after the graphs
    before it were timed: exit 1 with the generator's ValueError. It is a usage error now."""
    forbid_timing(monkeypatch)
    status, out, err = run_main(capsys, "bench", "--graph", "uniform:10,2", spec, "--device", "cpu")
    assert status == 2, err
    assert one_line(err).startswith(f"csrattn bench: error: --graph: bad graph spec '{spec}': {fragment}")
    assert out == ""


@pytest.mark.parametrize(
    "spec,call",
    [
        ("uniform:1000000000000,0", "uniform_graph(num_nodes=1000000000000, degree=0)"),
        ("rmat:34,1", "rmat_graph(scale=34, edge_factor=1)"),
    ],
)
def test_bench_generated_graph_beyond_host_memory_fails_before_timing(capsys, monkeypatch, spec, call):
    """A generated graph was built only when its turn came: one too large for this machine's
    memory failed after the graphs before it were timed, and their results were lost."""
    forbid_timing(monkeypatch)
    monkeypatch.setattr(backend, "host_memory_bytes", lambda: 2**30)
    status, out, err = run_main(capsys, "bench", "--graph", "uniform:10,2", spec, "--device", "cpu")
    assert status == 1, err
    assert re.fullmatch(
        rf"csrattn bench: error: MemoryError: {re.escape(call)} needs at least .* GiB of host memory.*", one_line(err)
    )
    assert out == ""


def test_bench_case_beyond_memory_is_skipped_with_its_reason(capsys, monkeypatch, tmp_path):
    """--heads 10**8 on a graph of 8000 edges drew its (E, H) inputs before any check: NumPy's
    MemoryError ended the run (results of the cases before it lost), or an allocation the
    system granted was written until the process was killed. Now the case is skipped with its
    reason, before anything is drawn, and the cases that fit are timed."""
    monkeypatch.setattr(backend, "host_memory_bytes", lambda: 2**30)
    args = ("bench", "--graph", "uniform:1000,8", "--ops", "edge_softmax", "--device", "cpu", "--repeat", "1")
    status, out, err = run_main(capsys, *args, "--heads", "1", "100000000", "--out", str(tmp_path), "--no-plot")
    assert status == 0, err
    document = json.loads(next(tmp_path.glob("bench_cpu_*.json")).read_text())
    assert {r["H"] for r in document["records"]} == {1}
    (skip,) = [s for s in document["skipped"] if s["H"] == 100000000]
    assert skip["method"] == "csrattn" and re.fullmatch(
        r"MemoryError: edge_softmax with H=100000000, F=0 on uniform-1000x8 needs at least .* GiB of host memory; "
        r"this machine has 1.0 GiB \(no method timed\)",
        skip["reason"],
    )
    assert "no method timed" in out


def test_bench_case_whose_bytes_moved_exceed_memory_is_timed(capsys, monkeypatch, tmp_path):
    """The check before a case summed the op's byte model, the bytes it moves (a gathered node
    row once per edge), as if they were held: on a GPU of 140 GiB the fused backward on a graph
    of 50M edges, whose arrays take under 1 GiB, was skipped as needing 192 GiB. The check sums
    the case's arrays: a case that moves more bytes than memory holds, but whose arrays fit, is
    timed."""
    op, H, F, sets = "graph_attention_backward", 1, 16, 8  # 8000 edges: inputs rotate between 8 sets
    graph = datasets.uniform_graph(1000, 8)
    moved = OPS[op].bytes(graph, np.float32, H, F) * sets
    held = bm.runner.held_bytes(graph, op, "float32", H, F) * sets
    limit = 16 << 20
    assert held < limit < moved  # the case this test needs
    monkeypatch.setattr(backend, "host_memory_bytes", lambda: limit)
    args = ("bench", "--graph", "uniform:1000,8", "--ops", op, "--device", "cpu", "--repeat", "1")
    status, out, err = run_main(
        capsys, *args, "--heads", str(H), "--features", str(F), "--out", str(tmp_path), "--no-plot"
    )
    assert status == 0, err
    document = json.loads(next(tmp_path.glob("bench_cpu_*.json")).read_text())
    assert [(r["op"], r["method"]) for r in document["records"]][:1] == [(op, "csrattn")]
    assert not [s for s in document["skipped"] if s["method"] == "csrattn"]


def test_bench_held_arrays_name_every_timed_op():
    assert set(bm.runner.HELD_ARRAYS) == set(bm.runner.TIMERS)


@pytest.mark.parametrize(
    "option,values",
    [
        ("--heads", ["8", "1000000000000"]),
        ("--heads", ["2147483648"]),
        ("--features", ["16", "100000000000000000000"]),
    ],
)
def test_bench_heads_and_features_past_int32_are_usage_errors(capsys, monkeypatch, option, values):
    """--heads 10**12 was taken: the command measured the copy bandwidth and built the graph,
    then failed (exit 1) with NumPy's MemoryError for an (E, 10**12) array; 10**20 with
    "Maximum allowed dimension exceeded". The kernels take H and F as 32-bit ints."""
    forbid_timing(monkeypatch)
    status, out, err = run_main(capsys, "bench", "--graph", "uniform:10,2", "--device", "cpu", option, *values)
    assert status == 2, err
    assert one_line(err) == (
        f"csrattn bench: error: argument {option}: '{values[-1]}' must be at most 2147483647 "
        "(the kernels take it as a 32-bit int) (see csrattn bench --help)"
    )
    assert out == ""
    args = cli.command.build_parser().parse_args(["bench", "--heads", "2147483647", "--features", "2147483647"])
    assert (args.heads, args.features) == ([2**31 - 1], [2**31 - 1])


@pytest.mark.parametrize(
    "name,text,fragment",
    [
        ("bad.txt", "0 1\n1 two\n", ":2: column 2: 'two' is not an integer"),
        ("short.mtx", "%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n", ":3: the file ends"),
        ("junk.npz", "not a zip\n", ": not a readable .npz file"),
    ],
)
def test_bench_malformed_graph_file_is_reported_before_anything_is_timed(
    capsys, monkeypatch, tmp_path, name, text, fragment
):
    """A graph file was read only when its turn came: the graphs before it were timed, then
    the command failed (exit 1) and their results were lost, --out made and left empty."""
    path = tmp_path / name
    path.write_text(text)
    out_dir = tmp_path / "results"
    forbid_timing(monkeypatch)
    status, out, err = run_main(
        capsys, "bench", "--graph", "uniform:10,2", str(path), "--device", "cpu", "--out", str(out_dir)
    )
    assert status == 2, err
    assert one_line(err).startswith(f"csrattn bench: error: --graph: {path}{fragment}")
    assert out == ""
    assert not out_dir.exists()


def write_graph_of_many_nodes(tmp_path, kind):
    """A graph file of one edge that declares (or implies) 4000000 nodes, past the loaders' limit."""
    path = tmp_path / f"big.{kind}"
    if kind == "mtx":
        path.write_text("%%MatrixMarket matrix coordinate pattern general\n4000000 4000000 1\n1 2\n")
    elif kind == "txt":
        path.write_text("0 3999999\n")
    else:
        np.savez(path, edge_index=np.array([[0], [1]]), num_nodes=4000000)
    return path


@pytest.mark.parametrize("kind", ["mtx", "txt", "npz"])
def test_bench_graph_file_of_too_many_nodes_names_max_nodes_option(capsys, monkeypatch, tmp_path, kind):
    """The loaders' message told a command-line user to "pass max_nodes=4000000" (or
    num_nodes= for an edge list), arguments of the Python loaders that csrattn bench did not
    have: it names --max-nodes now, which the command passes to the loaders as max_nodes."""
    path = write_graph_of_many_nodes(tmp_path, kind)
    forbid_timing(monkeypatch)
    status, out, err = run_main(capsys, "bench", "--graph", str(path), "--device", "cpu")
    assert status == 2 and out == ""
    line = one_line(err)
    assert line.startswith(f"csrattn bench: error: --graph: {path}")
    assert line.endswith(
        "4000000 nodes, more than the 1048576 allowed for 1 edge without --max-nodes (max(1048576, 16 per edge)); "
        "pass --max-nodes 4000000 if the graph really has that many nodes, or renumber them"
    )
    assert "max_nodes" not in line and "num_nodes=" not in line
    status, _, err = run_main(capsys, "bench", "--graph", str(path), "--device", "cpu", "--max-nodes", "1000")
    assert status == 2 and one_line(err).endswith("4000000 nodes, more than --max-nodes 1000")
    [(name, build)] = cli.bench.parse_graphs([str(path)], max_nodes=4000000)
    assert (name, build().shape) == ("big", (4000000, 4000000))
    fix = "num_nodes" if kind == "txt" else "max_nodes"
    with pytest.raises(ValueError, match=f"without an explicit argument .*; pass {fix}=4000000 if"):
        datasets.load(path)  # the Python loaders name their own arguments


@pytest.mark.parametrize("value", ["-1", "4611686018427387905"])
def test_bench_max_nodes_out_of_the_loaders_range_is_a_usage_error(capsys, value):
    status, _, err = run_main(capsys, "bench", "--graph", "uniform:10,2", "--max-nodes", value)
    assert status == 2
    assert "argument --max-nodes" in one_line(err)


def test_bench_graphs_plotted_to_one_file_are_a_usage_error(capsys, monkeypatch, tmp_path):
    """Graphs "a b" and "a_b" were both plotted to bench_a_b.png, the second replacing the first
    (and every name in another script to bench_bench.png)."""
    for name in ("a b.txt", "a_b.txt", "ü.txt", "ö.txt"):
        (tmp_path / name).write_text("0 1\n1 0\n")
    out_dir = tmp_path / "results"
    forbid_timing(monkeypatch)
    graphs = [str(tmp_path / "a b.txt"), str(tmp_path / "a_b.txt")]
    status, out, err = run_main(capsys, "bench", "--graph", *graphs, "--device", "cpu", "--out", str(out_dir))
    assert status == 2, err
    assert one_line(err) == (
        "csrattn bench: error: --graph: graphs 'a b' and 'a_b' would be plotted to one file, bench_a_b.png "
        "(rename a file)"
    )
    assert out == "" and not out_dir.exists()
    assert bm.file_stem("ü") != bm.file_stem("ö")
    parse = cli.bench.parse_graphs
    assert [name for name, _ in parse([str(tmp_path / "ü.txt"), str(tmp_path / "ö.txt")], plots=True)] == ["ü", "ö"]
    assert [name for name, _ in parse(graphs, plots=False)] == ["a b", "a_b"]  # no plots: no clash


def test_bench_bad_graph_is_reported_before_out_is_made(capsys, tmp_path):
    out_dir = tmp_path / "results"
    status, _, err = run_main(capsys, "bench", "--graph", "rmat:x", "--out", str(out_dir))
    assert status == 2 and "--graph" in one_line(err)
    assert not out_dir.exists()


# ---------------------------------------------------------------------------------------
# Progress bar


def test_progress_bar_draws_only_when_enabled():
    stream = io.StringIO()
    with cli.Progress(4, "work", enabled=True, stream=stream) as progress:
        for _ in range(4):
            progress.advance(note="step")
    text = stream.getvalue()
    assert "work [" in text and "4/4" in text
    assert text.endswith("\r")  # the bar is cleared at the end
    quiet = io.StringIO()
    with cli.Progress(4, "work", stream=quiet) as progress:  # StringIO is not a TTY
        progress.advance()
    assert quiet.getvalue() == ""


# ---------------------------------------------------------------------------------------
# Benchmark machinery (CPU parts)


def test_graph_specs():
    name, build = bm.graph_from_spec("rmat:8")
    assert name == "rmat-8" and build().shape == (256, 256)
    name, build = bm.graph_from_spec("rmat:8,4")
    assert name == "rmat-8x4" and build().num_edges == 1024
    name, build = bm.graph_from_spec("uniform:50,3")
    assert name == "uniform-50x3" and build().num_edges == 150
    with pytest.raises(ValueError, match="uniform:N,DEG"):
        bm.graph_from_spec("uniform:5")
    with pytest.raises(FileNotFoundError):
        bm.graph_from_spec("missing.mtx")


def test_file_graphs_are_made_square(tmp_path):
    path = tmp_path / "rect.mtx"
    path.write_text("%%MatrixMarket matrix coordinate pattern general\n2 5 2\n1 5\n2 1\n")
    name, build = bm.graph_from_spec(str(path))
    graph = build()
    assert name == "rect" and graph.shape == (5, 5)
    assert graph.indptr.tolist() == [0, 1, 2, 2, 2, 2]


def test_make_cases_skips_features_for_edge_only_ops():
    cases = bm.make_cases(["edge_softmax", "spmm"], ["float32"], [1, 8], [16, 64])
    assert [c for c in cases if c.op == "edge_softmax"] == [
        bm.Case("edge_softmax", "float32", 1, 0),
        bm.Case("edge_softmax", "float32", 8, 0),
    ]
    assert len([c for c in cases if c.op == "spmm"]) == 4
    with pytest.raises(ValueError, match="unknown op"):
        bm.make_cases(["nope"], ["float32"], [1], [1])


def test_byte_counts_are_the_gpu_benchmark_formulas():
    graph = datasets.uniform_graph(1000, 7, seed=0)
    E, N, idx = graph.num_edges, graph.num_dst, graph.indices.itemsize
    for dtype, H, F in (("float32", 8, 16), ("float16", 1, 64)):
        isz = np.dtype(dtype).itemsize
        gather = E * (idx + H * isz + H * F * isz) + N * H * F * isz
        backward = E * (2 * idx + 8 + 2 * H * isz + 2 * H * F * isz) + 2 * N * H * F * isz + E * H * isz
        assert OPS["edge_softmax"].bytes(graph, dtype, H, 0) == 2 * E * H * isz + graph.indptr.nbytes
        assert OPS["edge_softmax_backward"].bytes(graph, dtype, H, 0) == 3 * E * H * isz + graph.indptr.nbytes
        assert OPS["attention_aggregate"].bytes(graph, dtype, H, F) == gather
        assert OPS["spmm"].bytes(graph, dtype, H, F) == gather
        assert OPS["attention_aggregate_backward"].bytes(graph, dtype, H, F) == backward
        assert OPS["spmm_backward"].bytes(graph, dtype, H, F) == backward


def test_byte_counts_of_the_edge_terms():
    """The fused ops' edge arrays: read once by the forward; by the forward and each of the three
    backward passes, their gradient written once, in a forward + backward count."""
    graph = datasets.uniform_graph(1000, 7, seed=0)
    E = graph.num_edges
    for dtype, H, F in (("float32", 8, 16), ("float16", 1, 64)):
        isz = np.dtype(dtype).itemsize
        for op, edge_array in (("graph_attention", E * H * F * isz), ("gat_attention", E * H * isz)):
            for name, reads_and_writes in ((op, 1), (op + "_backward", 5)):
                without = OPS[name].bytes(graph, dtype, H, F)
                assert OPS[name].bytes(graph, dtype, H, F, edge_terms=True) == without + reads_and_writes * edge_array


def test_gather_floor_by_hand():
    """The gather floor of cupy_csrattn.bench.fused on a 3 x 4 graph of 5 edges, int32 indices
    (4 bytes), H = 2 heads, F = D = 3, worked out term by term."""
    graph = ca.CSRGraph(np.array([0, 2, 2, 5], np.int32), np.array([1, 3, 0, 3, 2], np.int32), 4)
    E, num_dst, num_src = 5, 3, 4
    # graph_attention, float32: per edge the index and k[src], v[src] (6 + 6 elements); per
    # destination q read and out written (6 + 6); lse (2 float32 per destination) when written.
    forward = E * (4 + 12 * 4) + num_dst * 12 * 4
    assert forward == 404
    assert bm.gather_floor_bytes(graph, "graph_attention", "float32", 2, 3) == forward
    assert bm.gather_floor_bytes(graph, "graph_attention", "float32", 2, 3, lse=True) == forward + num_dst * 2 * 4
    # backward: per edge two indices, k, v (row pass), q, grad_out (transposed pass): 24 elements;
    # per destination q, out, grad_out read, grad_q written (24) and lse read; per source k, v
    # read (12) and grad_k, grad_v written (12).
    backward = E * (2 * 4 + 24 * 4) + num_dst * (24 * 4 + 2 * 4) + num_src * 24 * 4
    assert backward == 1216
    assert bm.gather_floor_bytes(graph, "graph_attention_backward", "float32", 2, 3) == 428 + backward == 1644
    # gat_attention, float16 (lse float32): per edge the index, a_src and values (2 + 6);
    # per destination a_dst read and out written (2 + 6).
    assert bm.gather_floor_bytes(graph, "gat_attention", "float16", 2, 3) == E * (4 + 8 * 2) + num_dst * 8 * 2 == 148
    # backward: per edge two indices, a_src, values, a_dst, grad_out (16 elements); per
    # destination a_dst, out, grad_out, grad_a_dst (16) and lse; per source 2 * (2 + 6).
    backward = E * (2 * 4 + 16 * 2) + num_dst * (16 * 2 + 2 * 4) + num_src * 16 * 2
    assert bm.gather_floor_bytes(graph, "gat_attention_backward", "float16", 2, 3) == 148 + 24 + backward == 620
    # gatv2_attention, float32: per edge the index and x_src (6); per destination x_dst, out (6 + 6);
    # att (6) once. Backward: per edge two indices, x_src, x_dst, grad_out (18); per destination
    # x_dst, out, grad_out, grad_x_dst (24) and lse; per source x_src, grad_x_src (12); att read
    # and grad_att written (12).
    forward = E * (4 + 6 * 4) + num_dst * 12 * 4 + 6 * 4
    backward = E * (2 * 4 + 18 * 4) + num_dst * (24 * 4 + 2 * 4) + num_src * 12 * 4 + 12 * 4
    assert bm.gather_floor_bytes(graph, "gatv2_attention", "float32", 2, 3) == forward == 308
    assert bm.gather_floor_bytes(graph, "gatv2_attention_backward", "float32", 2, 3) == forward + 24 + backward == 1284
    with pytest.raises(ValueError, match="no gather floor"):
        bm.gather_floor_bytes(graph, "spmm", "float32", 2, 3)


def test_gather_floor_of_a_forward_is_its_byte_model_on_a_square_graph():
    """Without lse, the forward floor counts what the registry's byte model counts; the forward
    + backward floor is below that model (which counts a gather per edge for each kernel pass)."""
    graph = datasets.uniform_graph(300, 5, seed=0)
    for op in ("graph_attention", "gat_attention", "gatv2_attention"):
        for dtype, H, F in (("float32", 8, 16), ("float16", 4, 64)):
            assert bm.gather_floor_bytes(graph, op, dtype, H, F) == OPS[op].bytes(graph, np.dtype(dtype), H, F)
            backward = op + "_backward"
            assert bm.gather_floor_bytes(graph, backward, dtype, H, F) < OPS[backward].bytes(
                graph, np.dtype(dtype), H, F
            )


def test_bench_records_the_gather_floor_and_the_backward_alone(capsys, tmp_path):
    ops = "spmm gat_attention gat_attention_backward gatv2_attention_backward"
    options = f"--graph uniform:120,4 --ops {ops} --heads 2 --features 4 --repeat 1 --device cpu --no-plot"
    status, out, err = run_main(capsys, "bench", *options.split(), "--out", str(tmp_path))
    assert status == 0, err
    assert "% of gather floor" in out and "x forward" in out
    document = json.loads(next(tmp_path.glob("bench_cpu_*.json")).read_text())
    bandwidth = document["copy_bandwidth_bytes_per_s"]
    records = {(r["op"], r["method"]): r for r in document["records"]}
    assert "gather_floor_bytes" not in records["spmm", "csrattn"]
    graph = datasets.uniform_graph(120, 4)
    for (op, method), record in records.items():
        if op == "spmm":
            continue
        assert record["gather_floor_bytes"] == bm.gather_floor_bytes(graph, op, "float32", 2, 4)
        assert record["gather_floor_ms"] == pytest.approx(record["gather_floor_bytes"] / bandwidth * 1e3)
        assert record["gather_floor_fraction"] == pytest.approx(record["gather_floor_ms"] / record["ms"])
        forward = records.get(("gat_attention", method)) if op == "gat_attention_backward" else None
        if forward is None:  # a forward, or a backward case whose forward was not run
            assert "backward_ms" not in record
            continue
        assert record["forward_ms"] == forward["ms"]
        assert record["backward_ms"] == pytest.approx(record["ms"] - forward["ms"])
        assert record["backward_over_forward"] == pytest.approx(record["backward_ms"] / forward["ms"])
    assert ("gat_attention_backward", "csrattn") in records and "backward_ms" in records[
        "gat_attention_backward", "csrattn"
    ]


def test_cpu_baselines_compute_the_same_thing():
    rng = np.random.default_rng(0)
    degrees = rng.integers(0, 6, 50)
    degrees[::9] = 0
    indptr = np.concatenate([[0], np.cumsum(degrees)])
    graph = ca.CSRGraph(indptr, rng.integers(0, 50, indptr[-1]), 50)
    rows = graph.row_of_edge()
    scores = rng.standard_normal((graph.num_edges, 3))
    grads = rng.standard_normal((graph.num_edges, 3))
    values = rng.standard_normal((50, 3, 4))
    probs = ca.edge_softmax(graph, scores)
    assert np.allclose(baselines.numpy_softmax(graph, rows, scores), probs)
    assert np.allclose(
        baselines.numpy_softmax_backward(graph, rows, probs, grads), ca.edge_softmax_backward(graph, probs, grads)
    )
    assert np.allclose(baselines.scipy_spmm(graph, scores, values), ca.spmm(graph, scores, values))
    assert np.allclose(
        baselines.numpy_scipy_aggregate(graph, rows, scores, values), ca.attention_aggregate(graph, scores, values)
    )
    assert np.allclose(
        baselines.composed_edge_dot(graph, rows, values, values, 0.5), ca.sddmm(graph, values, values, scale=0.5)
    )
    dst = rng.standard_normal((50, 3, 4))
    for got, want in zip(
        baselines.scipy_edge_dot_backward(graph, dst, values, grads, 0.5),
        ca.sddmm_backward(graph, dst, values, grads, scale=0.5),
    ):
        assert np.allclose(got, want)


def test_gpu_sddmm_backward_baseline_with_numpy_standing_in(monkeypatch):
    """The CuPy composition (gather, multiply, scatter-add) computes sddmm_backward: run with
    NumPy as CuPy and np.add.at as cupyx.scatter_add."""
    graph = datasets.uniform_graph(40, 5, seed=1)
    rng = np.random.default_rng(1)
    dst, src = rng.standard_normal((40, 2, 3)), rng.standard_normal((40, 2, 3))
    grads = rng.standard_normal((graph.num_edges, 2))
    expected = ca.sddmm_backward(graph, dst, src, grads, scale=0.25)
    fake_cupyx = type(sys)("cupyx")
    fake_cupyx.scatter_add = np.add.at
    monkeypatch.setitem(sys.modules, "cupyx", fake_cupyx)
    monkeypatch.setattr(backend, "cupy", np)
    got = baselines.cupy_edge_dot_backward(graph, graph.row_of_edge(), dst, src, grads, 0.25)
    assert len(got) == 2
    for g, want in zip(got, expected):
        assert np.allclose(g, want)


def test_bench_times_every_registered_op():
    assert set(bm.BENCH_OPS) == set(OPS)
    assert "sddmm_backward" in bm.BENCH_OPS


def test_bench_sddmm_backward_on_the_cpu(capsys):
    status, out, err = run_main(
        capsys, "bench", "--graph", "uniform:200,4", "--ops", "sddmm_backward", "--repeat", "1", "--device", "cpu"
    )
    assert status == 0, err
    rows = [line for line in out.splitlines() if "sddmm_backward" in line]
    assert len(rows) == 1 and "csrattn" in rows[0]
    assert any(line.split()[:1] == ["scipy"] for line in out.splitlines()), out


def test_format_table_and_json(tmp_path):
    records = [
        dict(graph="g", op="spmm", dtype="float32", H=1, F=8, method=m, ms=ms, roofline_fraction=0.5)
        for m, ms in (("csrattn", 1.0), ("scipy", 3.0))
    ]
    records.append(
        dict(
            graph="g",
            op="gat_attention_backward",
            dtype="float16",
            H=8,
            F=16,
            method="csrattn",
            ms=4.0,
            roofline_fraction=0.5,
            gather_floor_fraction=0.25,
            backward_ms=3.0,
            backward_over_forward=3.0,
        )
    )
    table = bm.format_table(
        records, [dict(graph="g", op="sddmm", dtype="float32", H=1, F=8, method="csrattn", reason="no GPU kernel yet")]
    )
    assert "3.00x" in table and "no GPU kernel yet" in table
    assert "25.0% of gather floor; backward 3.0000 ms = 3.00x forward" in table
    assert bm.floor_text(records[0]) == ""
    path = bm.write_json(tmp_path / "sub" / "r.json", {"records": records})
    assert json.loads(path.read_text())["records"][1]["ms"] == 3.0


def test_format_table_takes_a_ratio_timed_in_turns_from_its_record():
    """A simple baseline timed in turns with the library's op on a small graph carries the
    library's time of those turns: the table's ratio is of the two, marked *."""
    key = dict(graph="g", op="edge_softmax", dtype="float32", H=8, F=0, roofline_fraction=0.5)
    records = [
        dict(key, method="csrattn", ms=0.030),
        dict(key, method="simple", ms=0.024, csrattn_ms_in_turns=0.020),
        dict(key, method="cupy", ms=0.300),
    ]
    rows = bm.format_table(records).splitlines()
    assert "1.20x*" in next(r for r in rows if " simple " in r)
    assert "10.00x" in next(r for r in rows if " cupy " in r)


class _TurnsDevice:
    """A GPU device stand-in for GraphBench.simple_baseline: it records what it times."""

    kind = "gpu"

    def __init__(self):
        self.turns, self.alone = [], 0

    def time_in_turns(self, fns):
        for fn in fns:
            fn()
        self.turns.append(len(fns))
        return [0.002, 0.001]

    def time(self, fn):
        fn()
        self.alone += 1
        return 0.004


@pytest.mark.parametrize("small", [True, False])
def test_simple_baseline_takes_turns_with_the_library_on_small_graphs(small):
    """On a small graph the simple kernel and the case's own op are timed call by call in
    turns, the op's time kept in the simple record; elsewhere the simple kernel alone."""
    graph = ca.CSRGraph(np.array([0, 1, 3], np.int32), np.array([0, 0, 1], np.int32), 2)
    bench = bm.GraphBench("g", graph, bm.CpuDevice(repeat=1), 1e9)
    bench.small = small
    device = bench.device = _TurnsDevice()
    calls = []

    class Kernels:
        max_degree = 2

        def softmax(self, s):
            calls.append(("simple", s))
            return s

    bench._simple = Kernels()
    case = bm.Case("edge_softmax", "float32", 8, 0, baselines=True)
    bench.library(case, lambda s: calls.append(("ours", s)), ["a", "b"], 64)
    calls.clear()
    bench.simple_baseline(case, lambda kernels, s: kernels.softmax(s), ["a", "b"], 64)
    simple = bench.records[-1]
    assert simple["method"] == "simple"
    fits = ("simple", "a")  # the call that tells whether the kernel runs at all
    if small:
        assert device.turns == [2] and calls == [fits, ("simple", "a"), ("ours", "a")]
        assert simple["ms"] == 0.002 and simple["csrattn_ms_in_turns"] == 0.001
    else:
        assert device.turns == [] and calls == [fits, ("simple", "a")]
        assert simple["ms"] == 0.004 and "csrattn_ms_in_turns" not in simple


def test_a_baseline_failing_in_turns_is_skipped_with_its_reason():
    """A simple kernel that fails while timed in turns with the library's op is recorded as
    skipped, like any baseline that cannot run, and the bench goes on."""
    graph = ca.CSRGraph(np.array([0, 1, 3], np.int32), np.array([0, 0, 1], np.int32), 2)
    bench = bm.GraphBench("g", graph, bm.CpuDevice(repeat=1), 1e9)
    device = bench.device = _TurnsDevice()

    def failing(fns):
        raise RuntimeError("launch failed\nmore")

    device.time_in_turns = failing
    device.free = lambda: None

    class Kernels:
        max_degree = 2

        def softmax(self, s):
            return s

    bench._simple = Kernels()
    case = bm.Case("edge_softmax", "float32", 8, 0, baselines=True)
    bench.library(case, lambda s: None, ["a"], 64)
    bench.simple_baseline(case, lambda kernels, s: kernels.softmax(s), ["a"], 64)
    assert [r["method"] for r in bench.records] == ["csrattn"]
    assert bench.skipped[-1]["method"] == "simple" and bench.skipped[-1]["reason"] == "RuntimeError: launch failed"


def test_write_json_replaces_the_file_whole_or_not_at_all(tmp_path, monkeypatch):
    """A write stopped before its end leaves the earlier file whole and no temporary file; a
    directory in the file's place is an error, with nothing left behind either."""
    path = bm.write_json(tmp_path / "r.json", {"run": 1})

    def interrupted(source, target):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        bm.write_json(path, {"run": 2})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"run": 1} and os.listdir(tmp_path) == ["r.json"]
    (tmp_path / "d.json").mkdir()
    with pytest.raises(OSError):
        bm.write_json(tmp_path / "d.json", {"run": 3})
    assert sorted(os.listdir(tmp_path)) == ["d.json", "r.json"]


def test_bench_gpu_script_keeps_its_cases_and_command_line():
    cases = [(c.op, c.dtype, c.H, c.F, c.baselines) for c in load_benchmark("bench_gpu").cases()]
    assert cases == [
        ("edge_softmax", "float32", 8, 0, True),
        ("edge_softmax_backward", "float32", 8, 0, False),
        ("edge_softmax", "float32", 1, 0, True),
        ("edge_softmax_backward", "float32", 1, 0, False),
        ("edge_softmax", "float16", 8, 0, False),
        ("attention_aggregate", "float32", 1, 64, True),
        ("attention_aggregate_backward", "float32", 1, 64, False),
        ("spmm", "float32", 1, 64, True),
        ("spmm_backward", "float32", 1, 64, False),
        ("attention_aggregate", "float32", 8, 16, True),
        ("attention_aggregate_backward", "float32", 8, 16, False),
        ("spmm", "float32", 8, 16, True),
        ("spmm_backward", "float32", 8, 16, False),
        ("attention_aggregate", "float16", 8, 16, False),
    ]
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_gpu.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert result.returncode == 0
    assert "--quick" in result.stdout and "--only" in result.stdout


def test_bench_attention_script_times_each_fused_backward_in_float16(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # it imports bench_gpu
    cases = load_benchmark("bench_attention").cases()
    for op in ("graph_attention", "gat_attention", "gatv2_attention"):
        float16 = [c for c in cases if c.op.startswith(op) and c.dtype == "float16"]
        shapes = ((8, 16), (4, 64))
        assert float16 == [bm.Case(op + part, "float16", H, F, False) for H, F in shapes for part in ("", "_backward")]
        # the backward-only estimate needs the forward of the same case in the run
        backward = [c for c in cases if c.op == op + "_backward"]
        assert all(dataclasses.replace(c, op=op) in cases for c in backward)


def test_compare_trees_cases_run_each_op_and_draw_only_what_runs(monkeypatch):
    """Every case of benchmarks/compare_trees.py calls its op with inputs of the right shapes
    and order (run here on the CPU backend, the inputs kept on the host), a case draws its
    inputs only when made, cases sharing inputs get the same arrays, and a fused backward whose
    forward's case did not run makes that forward first."""
    pytest.importorskip("cupy")
    compare = load_benchmark("compare_trees")
    monkeypatch.setattr(compare, "cupy", type("HostArrays", (), {"asarray": staticmethod(np.asarray)}))
    graph = datasets.uniform_graph(40, 5, seed=1)
    draws = []

    class CountingRng:
        def standard_normal(self, shape, dtype):
            draws.append(shape)
            return np.random.default_rng(len(draws)).standard_normal(shape, dtype=dtype)

    cases = dict(compare.cases(CountingRng(), graph.num_edges, graph.num_dst, graph.num_src))
    assert draws == [] and len(cases) == 53
    backward = cases["graph_attention_backward H=4 F=64 float16"]()  # its forward's case not made
    assert draws == [(40, 4, 64), (40, 4, 64), (40, 4, 64), (40, 4, 64), (40, 4), (40, 4), (4, 64)]
    backward(package=ca, graph=graph)
    spmm, aggregate = cases["spmm H=1 F=64 float32"](), cases["attention_aggregate H=1 F=64 float32"]()
    assert spmm.args[1] is aggregate.args[1] and spmm.args[2] is aggregate.args[2]
    for name, make in cases.items():
        fn = make()
        fn(package=ca, graph=graph)
        inputs = [a for a in fn.args if isinstance(a, np.ndarray)]
        want = "float16" if "float16" in name else "float64" if "float64" in name else "float32"
        assert {a.dtype.name for a in inputs} == {want}, name
    # each input drawn once: edge_softmax, its backwards, aggregate/spmm, their backward (float32
    # and float16), sddmm, fused
    assert len(draws) == 4 + 3 * 2 + 3 * 2 + 3 + 3 + 2 + 6 * 7


def test_call_overhead_times_the_call_each_case_makes(monkeypatch):
    """call_overhead's op_call binds, from each case of compare_trees, the op the case calls
    and the very arguments it passes (a backward, the results its forward's case kept), so
    that what it times is that call alone."""
    pytest.importorskip("cupy")
    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
    overhead = load_benchmark("call_overhead")
    compare = sys.modules["compare_trees"]  # the module whose case functions op_call knows
    monkeypatch.setattr(compare, "cupy", type("HostArrays", (), {"asarray": staticmethod(np.asarray)}))
    graph = datasets.uniform_graph(40, 5, seed=1)
    calls = []

    class Recording:
        def __getattr__(self, op):
            def call(*args, **kwargs):
                calls.append((op, args, kwargs))
                return object(), object()  # a forward's out and lse

            return call

    package = Recording()
    rng = np.random.default_rng(0)
    for name, make in compare.cases(rng, graph.num_edges, graph.num_dst, graph.num_src):
        case_call = functools.partial(make(), package=package, graph=graph)
        case_call()
        made = calls[-1]
        overhead.op_call(case_call)()
        op, args, kwargs = calls[-1]
        assert op == made[0] and kwargs == made[2], name
        assert len(args) == len(made[1]) and all(a is b for a, b in zip(args, made[1])), name


def test_call_overhead_gives_out_to_the_ops_that_take_it(monkeypatch):
    """out_call binds out= an array of the call's first result for the ops whose keyword-only
    out is an output (a fused forward's lse still comes back new), and None for the others
    (a fused backward's out is its forward's output)."""
    pytest.importorskip("cupy")
    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
    overhead = load_benchmark("call_overhead")
    graph = datasets.uniform_graph(40, 5, seed=1)
    rng = np.random.default_rng(0)
    E, N = graph.num_edges, graph.num_dst
    scores = rng.standard_normal((E, 2)).astype(np.float32)
    v = rng.standard_normal((N, 2, 4)).astype(np.float32)
    call = functools.partial(ca.edge_softmax, graph, scores)
    given = overhead.out_call(call, np.empty_like)
    out = given.keywords["out"]
    assert given() is out and np.array_equal(out, call())
    fused = functools.partial(ca.graph_attention, graph, v, v, v, return_lse=True)
    out, lse = overhead.out_call(fused, np.empty_like)()
    np.testing.assert_array_equal(out, fused()[0])
    backward = functools.partial(ca.graph_attention_backward, graph, v, v, v, out, v, lse)
    assert overhead.out_call(backward, np.empty_like) is None
    assert overhead.out_call(functools.partial(ca.spmm_backward, graph, scores, v, v), np.empty_like) is None


def test_replay_python_path_times_each_case_through_this_trees_replay():
    """replay_python_path's records stand in for the ops' (replay.Replay and _describe as this
    tree has them) and every case replays without a GPU: a few calls each, in a child process
    (it stands in for CuPy's allocator and the driver)."""
    pytest.importorskip("cupy")
    code = (
        "import json, sys; sys.path.insert(0, 'benchmarks'); import replay_python_path as r; "
        "r.CALLS = 20; print(json.dumps(r.time_tree('.')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, env=dict(os.environ)
    )
    assert result.returncode == 0, result.stderr
    times = json.loads(result.stdout.splitlines()[-1])
    assert set(times) == set(load_benchmark("replay_python_path").CASES) and all(t > 0 for t in times.values())


def test_compare_trees_takes_more_trees_by_name():
    pytest.importorskip("cupy")
    compare = load_benchmark("compare_trees")
    args = compare._arguments("old new out.json rmat-20 --case edge_softmax --tree a=/tmp/a b=/tmp/b".split())
    assert (args.old_tree, args.new_tree, args.out_path, args.graphs) == ("old", "new", "out.json", ["rmat-20"])
    assert args.case == ["edge_softmax"] and args.tree == [("a", "/tmp/a"), ("b", "/tmp/b")]
    assert (args.host, args.rounds) == (False, 2)
    args = compare._arguments("old new out.json small-384 --host --rounds 9".split())
    assert (args.graphs, args.host, args.rounds) == (["small-384"], True, 9)
    with pytest.raises(SystemExit):
        compare._arguments("old new out.json --rounds 1".split())
    for bad in ("a", "=x", "old=x", "new=x", "a="):
        with pytest.raises(SystemExit):
            compare._arguments(["o", "n", "out.json", "--tree", bad])


# ---------------------------------------------------------------------------------------
# The CPU backend's fused backward: the faster formulation


@pytest.mark.parametrize("op", ["graph_attention", "gat_attention"])
def test_cpu_fused_backward_formulation(monkeypatch, op):
    """The CPU backward of the fused ops: per-edge dot products in the compute dtype (float32
    here, no float64 copies of the gathered features), and D = <grad_out[d], out[d]> from the
    forward's ``out``, as the GPU kernels take it (see cupy_csrattn/cpu/attention.py): a NaN
    in one row of out reaches that row's gradient terms only."""
    graph = datasets.uniform_graph(60, 4, seed=2)
    rng = np.random.default_rng(2)
    H, F = 2, 5
    if op == "graph_attention":
        inputs = [rng.standard_normal((60, H, F), dtype=np.float32) for _ in range(3)]
    else:
        inputs = [rng.standard_normal((60, H), dtype=np.float32) for _ in range(2)]
        inputs.append(rng.standard_normal((60, H, F), dtype=np.float32))
    grad_out = rng.standard_normal((60, H, F), dtype=np.float32)
    out, lse = OPS[op].function(graph, *inputs, return_lse=True)
    dtypes = []
    real_edge_dot = edge_dots.edge_dot

    def recording_edge_dot(graph, dst_feat, src_feat, dtype=None, edge_feat=None):
        dtypes.append("compute dtype" if dtype is None else np.dtype(dtype).name)
        return real_edge_dot(graph, dst_feat, src_feat, dtype=dtype, edge_feat=edge_feat)

    monkeypatch.setattr(edge_dots, "edge_dot", recording_edge_dot)
    backward = OPS[op + "_backward"].function
    grads = backward(graph, *inputs, out, grad_out, lse)
    assert dtypes and "float64" not in dtypes, dtypes
    poisoned = out.copy()
    poisoned[7] = np.nan
    grad_dst = backward(graph, *inputs, poisoned, grad_out, lse)[0]
    rows = np.arange(60) == 7
    assert np.isnan(grad_dst[rows]).all() and not np.isnan(grad_dst[~rows]).any()
    np.testing.assert_array_equal(grad_dst[~rows], grads[0][~rows])


@pytest.mark.parametrize("slope", [0.2, 1.0, 0.0, -0.5, 3.0])
def test_cpu_gat_leaky_relu_special_values(slope):
    """The CPU gat_attention's leaky ReLU (max(z, slope * z) for 0 < slope <= 1) equals
    where(z > 0, z, slope * z) on signed zeros, infinities and NaN too: one edge per row,
    so out = 1 * values where the score is finite, NaN where it is +inf or NaN."""
    a_dst = np.array([0.0, -0.0, 1.5, -2.5, np.inf, -np.inf, np.nan, 1e-30])
    graph = ca.CSRGraph(np.arange(9), np.zeros(8, dtype=np.int64), 1)
    values = np.array([[2.0]])
    with np.errstate(invalid="ignore"):  # slope 0 times an infinity
        out, lse = ca.gat_attention(graph, a_dst, np.zeros(1), values, negative_slope=slope, return_lse=True)
        scores = np.where(a_dst > 0, a_dst, slope * a_dst)
    # A +inf score: NaN; a finite one to rounding (a row is shifted by its maximum only when its
    # unshifted sum is out of range, and unshifted, log(exp(1e-30)) is 0).
    np.testing.assert_allclose(lse, np.where(np.isposinf(scores), np.nan, scores), rtol=1e-15, atol=1e-15)
    expected = np.where(np.isfinite(scores), 2.0, np.where(np.isneginf(scores), 0.0, np.nan))
    np.testing.assert_array_equal(out[:, 0], expected)


# ---------------------------------------------------------------------------------------
# Packaging: minimum versions, extras, the README's test command and CI


def pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_minimum_versions_are_declared_and_met():
    """numpy and scipy carry the minimum versions the package and the README need (SciPy 1.15:
    random_array(..., rng=0) in the quick start), and this environment meets them."""
    requirements = dict(r.split(">=") for r in pyproject()["dependencies"])
    assert set(requirements) == {"numpy", "scipy"}
    for name, module in (("numpy", np), ("scipy", scipy)):
        minimum = tuple(int(part) for part in requirements[name].split("."))
        installed = tuple(int(part) for part in module.__version__.split(".")[: len(minimum)])
        assert installed >= minimum, f"{name} {module.__version__} < {requirements[name]}"
    assert requirements["scipy"] == "1.15"
    assert "rng=0" in (ROOT / "README.md").read_text()  # the call that needs it


def test_test_extra_holds_no_cupy_and_nvrtc_has_its_own_extra():
    """``pip install ".[cuda12,test]"`` must not bring a second CuPy: the test extra has none,
    the NVRTC compile checks' CuPy is the nvrtc extra."""
    extras = pyproject()["optional-dependencies"]
    assert not [r for r in extras["test"] if "cupy" in r.lower()], extras["test"]
    assert extras["nvrtc"] == ["cupy-cuda13x[ctk]>=14"]
    assert extras["distributed"] == ["dask[array]>=2024.1", "distributed>=2024.1"]
    assert all(len([r for r in reqs if "cupy" in r.lower()]) <= 1 for reqs in extras.values())


def readme_test_command():
    text = (ROOT / "README.md").read_text()
    setup = text.split("## Set-up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    lines = setup.split("Install and run the tests:", 1)[1].strip().splitlines()
    return lines[0].strip()


def test_readme_test_command_is_one_command_that_ci_runs():
    command = readme_test_command()
    assert command == 'python3 -m pip install ".[test,nvrtc,distributed]" && python3 -m pytest -q'
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    install, run = (part.strip() for part in command.split("&&"))
    assert install in ci and run in ci
    assert ci.index(install) < ci.index("ruff check .") < ci.index("ruff format --check .") < ci.index(run)


@pytest.mark.skipif(os.name != "posix", reason="file names of arbitrary bytes are a POSIX matter")
def test_bench_prints_a_file_name_that_is_not_utf8(tmp_path):
    """A file name holding byte 0xff (a surrogate escape in Python) stopped bench, after its
    timing, with a UnicodeEncodeError where the output is strict UTF-8 (PYTHONIOENCODING)."""
    path = os.fsencode(tmp_path) + b"/\xff.txt"
    with open(path, "wb") as file:
        file.write(b"0 1\n1 2\n2 0\n")
    arguments = ["bench", "--graph", os.fsdecode(path), *"--ops edge_softmax --repeat 1 --device cpu".split()]
    result = run_module(*arguments, "--out", str(tmp_path), env={"PYTHONIOENCODING": "utf-8"})
    assert result.returncode == 0, result.stderr
    assert "\\udcff: 3 rows, 3 edges" in result.stdout
    # with matplotlib, its figure's title too: a lone surrogate made set_text raise a TypeError
    assert bm.matplotlib_available() == bool(list(tmp_path.glob("bench_*.png")))
    assert report.printable(os.fsdecode(b"\xff.txt")) == "\\udcff.txt" and report.printable("ü 1") == "ü 1"

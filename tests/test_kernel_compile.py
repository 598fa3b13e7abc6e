"""Every kernel specialization compiles through NVRTC for sm_80 and sm_90, without a GPU, and
the compiler checks every entry point against its declaration in gpu/signatures.py.

Needs CuPy's NVRTC bindings (the `nvrtc` extra installs cupy with its `ctk` extra). Outside
CI a machine without CuPy skips with the reason; in CI (CI=true) a missing NVRTC fails.
"""

import dataclasses
import os

import numpy as np
import pytest
from helpers import load_benchmark

from cupy_csrattn.gpu import kernels, signatures


@pytest.fixture(scope="module")
def nvrtc_ready():
    try:
        kernels.nvrtc_version()
    except RuntimeError as error:  # no CuPy, or no libnvrtc
        if os.environ.get("CI"):
            pytest.fail(str(error))
        pytest.skip(str(error))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize(
    "family,dtype,index_dtype", kernels.specializations(), ids=lambda v: str(getattr(v, "name", v))
)
def test_specialization_compiles_clean(nvrtc_ready, family, dtype, index_dtype, arch):
    log, cubin = kernels.compile_for_arch(family, dtype, index_dtype, arch)
    assert log.strip() == "", f"NVRTC printed for {family} {dtype} {index_dtype} {arch}:\n{log}"
    for name in kernels.FAMILIES[family]:
        assert b"\0" + name.encode() + b"\0" in cubin, f"entry point {name} missing from {family}.cu"


def test_compile_error_names_the_kernel(nvrtc_ready, monkeypatch):
    broken = kernels.source("sddmm", "float32", "int32") + "\nthis is not CUDA;\n"
    monkeypatch.setattr(kernels, "source", lambda *args: broken)
    with pytest.raises(kernels.KernelCompileError, match=r"sddmm\.cu \[float32, int32\].*sm_90"):
        kernels.compile_for_arch("sddmm", "float32", "int32", "sm_90")


def _swap_first_two_types(params):
    first, second = params[:2]
    return (dataclasses.replace(first, ctype=second.ctype), dataclasses.replace(second, ctype=first.ctype), *params[2:])


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(_swap_first_two_types, id="swapped-types"),
        pytest.param(lambda params: params[:-1], id="dropped-parameter"),
    ],
)
def test_signature_mismatch_fails_to_compile(nvrtc_ready, monkeypatch, change):
    """A declaration that differs from the kernel in sddmm.cu is caught by the compiler."""
    declared = signatures.SIGNATURES["sddmm_add"]
    assert declared.params[0].ctype != declared.params[1].ctype  # so that swapping them changes the type
    kernels.source.cache_clear()
    try:
        with monkeypatch.context() as patch:
            patch.setitem(
                signatures.SIGNATURES, "sddmm_add", dataclasses.replace(declared, params=change(declared.params))
            )
            with pytest.raises(kernels.KernelCompileError) as raised:
                kernels.compile_for_arch("sddmm", "float32", "int32", "sm_90")
    finally:
        kernels.source.cache_clear()
    message = str(raised.value)
    assert "sddmm_add" in message and "differ from its declaration" in message, message
    assert signatures.SIGNATURES["sddmm_add"] is declared


def _sddmm_add_arguments():
    """Every argument of sddmm_add by its declared name (launch checks the names before any GPU work)."""
    return {param.name: None for param in signatures.SIGNATURES["sddmm_add"].params}


def test_launch_rejects_an_unknown_argument_name():
    arguments = dict(_sddmm_add_arguments(), not_a_parameter=1)
    with pytest.raises(TypeError, match=r"sddmm_add\(\) got an unexpected keyword argument 'not_a_parameter'"):
        kernels.launch("sddmm_add", np.float32, np.int32, (1,), **arguments)


def test_launch_rejects_a_missing_argument():
    arguments = _sddmm_add_arguments()
    del arguments["out"]
    with pytest.raises(TypeError, match=r"sddmm_add\(\) missing 1 required keyword-only argument: 'out'"):
        kernels.launch("sddmm_add", np.float32, np.int32, (1,), **arguments)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("name", sorted(signatures.SIGNATURES))
def test_arguments_are_packed_in_declared_order(name, dtype):
    """Every kernel's arguments, given by name in reverse order, come out in declared order:
    pointers as given (omitted optional ones as null), i64 as int64, int as int32, acc_t in
    the data type's accumulation type."""
    params = signatures.SIGNATURES[name].params
    accumulate = np.float64 if dtype == "float64" else np.float32
    given, expected = {}, []
    for position, param in enumerate(params):
        if param.is_pointer and param.optional and position % 2:
            expected.append((np.uint64, 0))  # left out
            continue
        value = object() if param.is_pointer else position + 0.5 if param.ctype == "acc_t" else position
        given[param.name] = value
        kind = {"i64": np.int64, "int": np.int32, "acc_t": accumulate}.get(param.ctype)
        expected.append((kind, value) if kind else (None, value))
    packed = kernels.pack_arguments(name, dtype, **dict(reversed(list(given.items()))))
    assert len(packed) == len(params)
    for param, got, (kind, value) in zip(params, packed, expected):
        if kind is None:
            assert got is value, f"{name}: {param.name} is not the array given"
        else:
            assert type(got) is kind and got == value, f"{name}: {param.name} packed as {got!r}"


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1, 2**40])
def test_an_int_parameter_past_int32_is_named(value):
    """np.int32 raised OverflowError past int32 on NumPy 2 (NumPy 1 wrapped the value round):
    a ValueError naming the parameter; the range's ends pass."""
    arguments = dict(num_pairs=1, F=value, grad_out=object(), out=object(), row_dot=object())
    with pytest.raises(ValueError, match=rf"^the GPU kernels take F as a 32-bit int, got {value}"):
        kernels.pack_arguments("attention_row_dot", np.float32, **arguments)
    for fits in (2**31 - 1, -(2**31)):
        assert kernels.pack_arguments("attention_row_dot", np.float32, **dict(arguments, F=fits))[1] == fits


PTXAS_LOG = """ptxas info    : 55 bytes gmem
ptxas info    : Compiling entry function 'first_kernel' for 'sm_90'
ptxas info    : Function properties for first_kernel
ptxas         .     40 bytes stack frame, 36 bytes spill stores, 72 bytes spill loads
ptxas info    : Used 80 registers, used 0 barriers
ptxas info    : Compile time = 66.038 ms
ptxas info    : Compiling entry function 'second_kernel' for 'sm_90'
ptxas info    : Function properties for second_kernel
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 64 registers, used 0 barriers
"""


def test_kernel_resources_parses_the_ptxas_report():
    usage = load_benchmark("kernel_resources").parse(PTXAS_LOG)
    assert usage == {
        "first_kernel": dict(registers=80, stack=40, spill_stores=36, spill_loads=72),
        "second_kernel": dict(registers=64, stack=0, spill_stores=0, spill_loads=0),
    }


def test_kernel_resources_reports_every_entry_point(nvrtc_ready):
    """benchmarks/kernel_resources.py compiles the library's own source and reports each
    entry point of the family (sddmm: the smallest file)."""
    usage = load_benchmark("kernel_resources").resources("sddmm", "float32", "int32", "sm_90")
    assert set(kernels.FAMILIES["sddmm"]) <= set(usage)
    assert all(isinstance(u["registers"], int) and u["registers"] > 0 for u in usage.values())

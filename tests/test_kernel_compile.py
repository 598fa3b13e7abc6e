"""Every kernel specialization compiles through NVRTC for sm_80 and sm_90, without a GPU, and
the compiler checks every entry point against its declaration in gpu/signatures.py.

Needs CuPy's NVRTC bindings (the `test` extra installs cupy with its `ctk` extra). Outside
CI a machine without CuPy skips with the reason; in CI (CI=true) a missing NVRTC fails.
"""

import dataclasses
import os

import numpy as np
import pytest

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
    with pytest.raises(TypeError, match=r"sddmm_add got unknown arguments \['not_a_parameter'\]"):
        kernels.launch("sddmm_add", np.float32, np.int32, (1,), **arguments)


def test_launch_rejects_a_missing_argument():
    arguments = _sddmm_add_arguments()
    del arguments["out"]
    with pytest.raises(TypeError, match=r"sddmm_add got unknown arguments \[\] and lacks \['out'\]"):
        kernels.launch("sddmm_add", np.float32, np.int32, (1,), **arguments)

"""Every kernel specialization compiles through NVRTC for sm_80 and sm_90, without a GPU.

Needs CuPy's NVRTC bindings (the `test` extra installs cupy with its `ctk` extra). Outside
CI a machine without CuPy skips with the reason; in CI (CI=true) a missing NVRTC fails.
"""
import os

import pytest

from cupy_csrattn import _kernels


def _nvrtc_or_reason():
    try:
        from cupy_backends.cuda.libs import nvrtc
        nvrtc.getVersion()
    except Exception as error:  # not installed, or no libnvrtc
        return f"NVRTC is not usable: {type(error).__name__}: {error}"
    return None


@pytest.fixture(scope="module")
def nvrtc_ready():
    reason = _nvrtc_or_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("family,dtype,index_dtype", _kernels.specializations(),
                         ids=lambda v: str(getattr(v, "name", v)))
def test_specialization_compiles_clean(nvrtc_ready, family, dtype, index_dtype, arch):
    log, cubin = _kernels.compile_for_arch(family, dtype, index_dtype, arch)
    assert log.strip() == "", f"NVRTC printed for {family} {dtype} {index_dtype} {arch}:\n{log}"
    for name in _kernels.ENTRY_POINTS[family]:
        assert b"\0" + name.encode() + b"\0" in cubin, f"entry point {name} missing from {family}.cu"


def test_compile_error_names_the_kernel(nvrtc_ready, monkeypatch):
    broken = _kernels.source("sddmm", "float32", "int32") + "\nthis is not CUDA;\n"
    monkeypatch.setattr(_kernels, "source", lambda *args: broken)
    with pytest.raises(_kernels.KernelCompileError, match=r"sddmm\.cu \[float32, int32\].*sm_90"):
        _kernels.compile_for_arch("sddmm", "float32", "int32", "sm_90")

"""Every kernel entry point in cuda/ matches its declaration in gpu/signatures.py, by name,
order, C type and parameter name, with no GPU and no NVRTC.

Launchers pass arguments by name, so a kernel whose parameters were renamed or reordered
(even between two of the same type, which the compile-time static_assert cannot see) would
get the wrong arrays. The preprocessed source of each family is read with the C
preprocessor (`cpp`); outside CI a machine without one skips, in CI (CI=true) it fails.
"""

import os
import re
import shutil
import subprocess

import pytest

from cupy_csrattn.gpu import kernels
from cupy_csrattn.gpu.signatures import SIGNATURES

_ENTRY_POINT = re.compile(
    r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?(\w+)\s*\(([^)]*)\)'
)


@pytest.fixture(scope="module")
def cpp():
    path = shutil.which("cpp")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("the C preprocessor (cpp) is needed to read the kernels' parameter lists")
        pytest.skip("no C preprocessor (cpp) on this machine")
    return path


def _entry_points(cpp, family):
    """{name: [(C type, parameter name), ...]} of the extern "C" kernels of one family."""
    source = kernels.source(family, "float32", "int32")
    result = subprocess.run([cpp, "-P", "-x", "c++", "-"], input=source, capture_output=True, text=True, check=True)
    entry_points = {}
    for match in _ENTRY_POINT.finditer(result.stdout):
        params = []
        for part in filter(None, (p.strip() for p in match.group(2).split(","))):
            declaration = re.match(r"^(.*?[\s*])(\w+)$", part)
            assert declaration, f"cannot read parameter {part!r} of {match.group(1)}"
            ctype = re.sub(r"\s*\*", "*", " ".join(declaration.group(1).split()))
            params.append((ctype, declaration.group(2)))
        entry_points[match.group(1)] = params
    return entry_points


@pytest.mark.parametrize("family", sorted(kernels.FAMILIES))
def test_kernels_match_their_declarations(cpp, family):
    found = _entry_points(cpp, family)
    declared = kernels.FAMILIES[family]
    undeclared, missing = sorted(set(found) - set(declared)), sorted(set(declared) - set(found))
    assert not undeclared and not missing, f"{family}.cu defines {undeclared} undeclared and lacks {missing}"
    for name in declared:
        expected = [(param.ctype, param.name) for param in SIGNATURES[name].params]
        assert found[name] == expected, f"{name}: the kernel has {found[name]}, gpu/signatures.py declares {expected}"


def test_the_reader_sees_a_renamed_parameter(cpp, monkeypatch):
    """The check above can fail: rename one parameter of a declared kernel in the source."""
    original = kernels.source("sddmm", "float32", "int32")
    renamed = original.replace("int H, const idx_t* row_of_edge", "int heads, const idx_t* row_of_edge", 1)
    assert renamed != original, "the sddmm kernels' parameter text changed; update this test"
    monkeypatch.setattr(kernels, "source", lambda *args: renamed)
    found = _entry_points(cpp, "sddmm")
    assert ("int", "heads") in found["sddmm_add"] or ("int", "heads") in found["sddmm_dot_v1"]

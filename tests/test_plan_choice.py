"""The softmax plan's choice of rows per run (gpu/plan._run_rows), which needs no GPU: the
median degree is given."""

import pytest

from cupy_csrattn.gpu import plan
from cupy_csrattn.gpu.kernels import MAX_RUN_ROWS


@pytest.mark.parametrize(
    "median,heads,capacity,want",
    [
        (16, 8, 1024, 4),  # 4 rows of 16 edges x 8 heads: half of 1024; 32 (row, head) pairs
        (16, 1, 1024, 32),
        (16, 8, 2048, 8),
        (16, 8, 512, 2),  # 16 (row, head) pairs, two lanes each
        (16, 1, 512, 16),
        (500, 1, 1024, 1),  # one row per run, the whole warp on it
        (500, 1, 512, 0),  # a row alone fills more than half the stage
        (500, 8, 1024, 0),
        (2, 1, 1024, MAX_RUN_ROWS),
        (0, 4, 1024, 64),  # empty rows count as degree 1
        (5, 40, 1024, 2),
        (16, 0, 1024, 0),
    ],
)
def test_rows_per_run(monkeypatch, median, heads, capacity, want):
    monkeypatch.setattr(plan, "_median_degree", lambda graph: float(median))
    got = plan._run_rows(None, heads, capacity)
    assert got == want
    if got:
        assert got & (got - 1) == 0
        assert 2 * got * heads * max(1, median) <= capacity


def test_forced_rows_per_run(monkeypatch):
    monkeypatch.setattr(plan, "_median_degree", lambda graph: 16.0)
    monkeypatch.setattr(plan, "RUN_ROWS", 1)
    assert plan._run_rows(None, 1, 1024) == 1
    monkeypatch.setattr(plan, "RUN_ROWS", 0)
    assert plan._run_rows(None, 1, 1024) == 0

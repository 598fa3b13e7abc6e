"""Short runs of the examples: the training scripts learn, their manual backward passes
match finite differences, and interop.py runs (skipping what is not installed)."""

import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.io
import scipy.sparse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
sys.path.insert(0, EXAMPLES)

import _common  # noqa: E402
import gat_train  # noqa: E402
import transformer_train  # noqa: E402

TINY = ["--nodes", "300", "--epochs", "15", "--device", "cpu", "--log-every", "0", "--no-check"]


def assert_learns(results):
    model, baseline = results["model"], results["baseline"]
    chance = results["majority_test_acc"]  # always guessing the most frequent class
    losses = model["loss"]
    assert losses[-1] < 0.7 * losses[0], f"loss did not go down: {losses}"
    assert model["final_loss"] < losses[0]
    assert model["final_train_acc"] > chance + 0.2
    assert model["final_test_acc"] > chance + 0.2
    assert baseline["loss"][-1] < baseline["loss"][0]


@pytest.mark.parametrize("script", [gat_train, transformer_train], ids=["gat", "transformer"])
def test_training_on_sbm(script, capsys):
    assert_learns(script.main(TINY))
    out = capsys.readouterr().out
    assert "backend: NumPy on the CPU" in out and "features-only MLP" in out


def grid_mtx(path, rows=15, cols=20):
    """A Matrix Market file of a 2-D grid graph (upper triangle only, as files often are)."""

    def path_graph(n):
        return scipy.sparse.diags_array([np.ones(n - 1), np.ones(n - 1)], offsets=[-1, 1])

    grid = scipy.sparse.kron(path_graph(rows), scipy.sparse.eye_array(cols)) + scipy.sparse.kron(
        scipy.sparse.eye_array(rows), path_graph(cols)
    )
    scipy.io.mmwrite(path, scipy.sparse.triu(grid).tocoo())
    return str(path)


@pytest.mark.parametrize("script", [gat_train, transformer_train], ids=["gat", "transformer"])
def test_training_on_mtx_file(script, tmp_path):
    assert_learns(script.main(["--mtx", grid_mtx(tmp_path / "grid.mtx")] + TINY))


def test_graph_beats_features_only_baseline():
    # The default SBM parameters, smaller: noisy features, homophilous edges.
    results = gat_train.main(["--nodes", "600", "--epochs", "30", "--device", "cpu", "--log-every", "0", "--no-check"])
    assert results["model"]["final_test_acc"] > results["baseline"]["final_test_acc"] + 0.1


def test_gat_manual_backward_matches_finite_differences():
    assert gat_train.check_gradients(seed=0, verbose=False) < 1e-4


@pytest.mark.parametrize("residual", [True, False])
def test_transformer_manual_backward_matches_finite_differences(residual):
    assert transformer_train.check_gradients(seed=1, residual=residual, verbose=False) < 1e-4


def test_mlp_manual_backward_matches_finite_differences():
    rng = np.random.default_rng(0)
    model = _common.MLP(5, 7, 3, rng=rng, dtype=np.float64)
    x = rng.standard_normal((20, 5))
    labels = rng.integers(0, 3, 20)
    worst, _ = _common.gradient_check(model, x, labels, np.arange(12))
    assert worst < 1e-4


def test_interop_exits_cleanly():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, "interop.py")], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAIL" not in result.stdout

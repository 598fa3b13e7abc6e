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


# ---------------------------------------------------------------------------------------
# What the training scripts print, and their --help


def test_default_log_prints_every_tenth_epoch_and_the_last(capsys):
    gat_train.main(["--nodes", "300", "--epochs", "25", "--device", "cpu", "--no-check"])
    out = capsys.readouterr().out
    epochs = [int(line.split()[2]) for line in out.splitlines() if line.startswith("GAT epoch")]
    assert epochs == [1, 10, 20, 25]
    assert out.strip().splitlines()[-1].startswith("GAT ")  # the comparison ends the output


@pytest.mark.parametrize(
    "gain,expected",
    [
        (0.581, "GAT beats the features-only baseline by 58.1 points of test accuracy"),
        (-0.082, "GAT does NOT beat the features-only baseline: 8.2 points of test accuracy below it"),
        (0.0, "GAT ties with the features-only baseline (the same test accuracy to 0.1 points)"),
        (-0.0004, "GAT ties with the features-only baseline (the same test accuracy to 0.1 points)"),
    ],
)
def test_verdict_wording(gain, expected):
    assert _common.verdict("GAT", gain) == expected


def test_negative_margin_is_worded_without_a_double_negative(capsys):
    history = {"final_train_acc": 0.5, "final_test_acc": 0.4, "seconds": 1.0}
    baseline = {"final_train_acc": 0.6, "final_test_acc": 0.482, "seconds": 1.0}
    data = _common.sbm_data(60, 3, degree=4, num_features=5, seed=0)
    _common.compare("GAT", history, baseline, data)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == "GAT does NOT beat the features-only baseline: 8.2 points of test accuracy below it"


def loops_of(graph):
    rows = np.repeat(np.arange(graph.num_dst), np.diff(graph.indptr))
    return rows == graph.indices


def test_sbm_data_line_counts_the_added_self_loops(capsys):
    """200 SBM nodes: the generator makes some self-loops (a few rows more than one), the
    script adds one to each row without: the line says how many loops in all, and how many added."""
    from cupy_csrattn import datasets

    data = _common.sbm_data(200, 5, seed=0)
    generated, _, _ = datasets.contextual_sbm(200, 5, degree=10, num_features=16, homophily=0.9, feature_noise=3.0)
    generated_loops = loops_of(generated)
    rows_with_loop = len(np.unique(np.repeat(np.arange(200), np.diff(generated.indptr))[generated_loops]))
    added = 200 - rows_with_loop
    total_loops = int(loops_of(data.graph).sum())
    assert total_loops == int(generated_loops.sum()) + added
    assert int(generated_loops.sum()) > rows_with_loop  # a row with two loops: loops != nodes
    data.describe()
    line = capsys.readouterr().out
    assert f"200 nodes, {data.graph.num_edges} edges: {data.graph.num_edges - total_loops} between two nodes" in line
    assert f"+ {total_loops} self-loops ({added} added so that every node has at least one)" in line


def test_mtx_data_line_counts_the_added_self_loops(tmp_path, capsys):
    data = _common.mtx_data(grid_mtx(tmp_path / "grid.mtx", rows=4, cols=5))
    data.describe()
    line = capsys.readouterr().out
    assert "20 nodes, 82 edges: 62 between two nodes + 20 self-loops (20 added" in line


def test_quickstart_checks_every_op_without_cupy():
    """The main job (the README's first set-up command) runs where CuPy cannot be imported, as
    the README promises, and checks every registered op against its reference."""
    import cupy_csrattn as ca

    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + EXAMPLES + os.pathsep + env.get("PYTHONPATH", "")
    blocked = "import sys; sys.modules.update(dict.fromkeys(['cupy', 'cupyx', 'cupy_backends']))"  # None: ImportError
    run = "import runpy; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    script = os.path.join(EXAMPLES, "quickstart.py")
    command = [sys.executable, "-c", f"{blocked}; {run}", script, "--rows", "400", "--repeats", "1"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "GPU: none found" in result.stdout and "all results match the reference" in result.stdout
    rows = {line.split()[0] for line in result.stdout.splitlines() if line.endswith(" ok")}
    assert rows >= set(ca.ops.registry.OPS), rows  # "sddmm dot" and "sddmm add" count as sddmm


@pytest.mark.parametrize(
    "script,defaults",
    [
        ("gat_train.py", ["(default: 3000)", "(default: 100)", "(default: 10)", "(default: 8)"]),
        ("transformer_train.py", ["(default: 3000)", "(default: 32)", "(default: 2)"]),
        ("quickstart.py", ["(default: 50000)", "(default: 32)", "(default: 16)"]),
    ],
)
def test_help_shows_every_default(script, defaults):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["COLUMNS"] = "200"  # one line per option
    result = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, script), "--help"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    for default in defaults:
        assert default in result.stdout, (default, result.stdout)
    entries = []  # one per option: its line and the lines of its help text below it
    for line in result.stdout.split("options:", 1)[1].splitlines():
        if line.startswith("  -"):
            entries.append(line)
        elif entries and line.startswith("   "):
            entries[-1] += line
    options = [entry for entry in entries if not entry.lstrip().startswith("-h")]
    assert options and all("(default: " in entry for entry in options), result.stdout


# ---------------------------------------------------------------------------------------
# Bad command lines: one error line naming the option, exit status 2, no traceback
# (issue 13 item 8: --heads 0, --nodes 3 or a non-square --mtx ended in tracebacks)


def run_example(script, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, script), *args], env=env, capture_output=True, text=True, timeout=120
    )


def assert_usage_error(result, script, message):
    """Exit status 2, nothing on stdout (nothing ran), and argparse's usage then one error line."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith(f"usage: {script}")
    assert lines[-1] == f"{script}: error: {message}", lines[-1]


def write_mtx(path, text):
    path.write_text("%%MatrixMarket matrix coordinate pattern general\n" + text)
    return str(path)


TRAINING_ERRORS = [
    (["--heads", "0"], "argument --heads: must be >= 1, got 0"),
    (["--nodes", "3"], "--nodes must be at least 5 (one node per class, --classes 5), got 3"),
    (["--nodes", "0"], "--nodes must be at least 5 (one node per class, --classes 5), got 0"),
    (["--nodes", "6", "--classes", "7"], "--nodes must be at least 7 (one node per class, --classes 7), got 6"),
    (["--classes", "1"], "argument --classes: must be >= 2, got 1"),
    (["--epochs", "0"], "argument --epochs: must be >= 1, got 0"),
    (["--lr", "0"], "argument --lr: must be a finite number > 0, got 0"),
    (["--lr", "nan"], "argument --lr: must be a finite number > 0, got nan"),
    (["--noise", "-1"], "argument --noise: must be a finite number >= 0, got -1"),
    (["--noise", "inf"], "argument --noise: must be a finite number >= 0, got inf"),
    (["--seed", "-1"], "argument --seed: must be >= 0, got -1"),
    (["--log-every", "-1"], "argument --log-every: must be >= 0, got -1"),
]


@pytest.mark.parametrize("script", ["gat_train.py", "transformer_train.py"])
@pytest.mark.parametrize("args,message", TRAINING_ERRORS, ids=[" ".join(args) for args, _ in TRAINING_ERRORS])
def test_training_scripts_refuse_bad_options(script, args, message):
    assert_usage_error(run_example(script, *args), script, message)


SCRIPT_ERRORS = [
    ("gat_train.py", ["--hidden", "0"], "argument --hidden: must be >= 1, got 0"),
    ("transformer_train.py", ["--dim", "0"], "argument --dim: must be >= 1, got 0"),
    ("transformer_train.py", ["--layers", "0"], "argument --layers: must be >= 1, got 0"),
    (
        "transformer_train.py",
        ["--dim", "30"],
        "--dim 30 must be a multiple of --heads 4 (each head gets --dim / --heads)",
    ),
    (
        "transformer_train.py",
        ["--heads", "3"],
        "--dim 32 must be a multiple of --heads 3 (each head gets --dim / --heads)",
    ),
    ("quickstart.py", ["--rows", "2"], "argument --rows: must be >= 3, got 2"),
    ("quickstart.py", ["--heads", "0"], "argument --heads: must be >= 1, got 0"),
    ("quickstart.py", ["--features", "0"], "argument --features: must be >= 1, got 0"),
    ("quickstart.py", ["--head-dim", "0"], "argument --head-dim: must be >= 1, got 0"),
    ("quickstart.py", ["--repeats", "0"], "argument --repeats: must be >= 1, got 0"),
    ("quickstart.py", ["--seed", "-1"], "argument --seed: must be >= 0, got -1"),
]


@pytest.mark.parametrize(
    "script,args,message", SCRIPT_ERRORS, ids=[f"{script} {' '.join(args)}" for script, args, _ in SCRIPT_ERRORS]
)
def test_script_specific_bad_options(script, args, message):
    assert_usage_error(run_example(script, *args), script, message)


def bad_mtx_files(tmp_path):
    """(file, expected error after '--mtx ') per malformed or unusable Matrix Market file."""
    wide = write_mtx(tmp_path / "wide.mtx", "3 5 2\n1 2\n3 5\n")
    small = write_mtx(tmp_path / "small.mtx", "3 3 2\n1 2\n3 1\n")
    empty = write_mtx(tmp_path / "empty.mtx", "0 0 0\n")
    malformed = write_mtx(tmp_path / "malformed.mtx", "3 3 2\n1 2\n3 x\n")
    not_mtx = tmp_path / "not.mtx"
    not_mtx.write_text("0 1\n1 2\n")
    missing = str(tmp_path / "missing.mtx")
    return {
        "non-square": (wide, f"{wide}: the matrix is 3 x 5; node classification needs a square matrix"),
        "fewer nodes than classes": (
            small,
            f"{small}: the graph has 3 nodes, fewer than the 5 classes asked for (--classes)",
        ),
        "empty": (empty, f"{empty}: the graph has 0 nodes, fewer than the 5 classes asked for (--classes)"),
        "malformed": (malformed, f"{malformed}:4: column 2: 'x' is not an integer"),
        "not Matrix Market": (
            str(not_mtx),
            f"{not_mtx}:1: not a Matrix Market file: the first line must start with %%MatrixMarket",
        ),
        "missing": (missing, f"{missing}: No such file"),
        "a directory": (str(tmp_path), f"{tmp_path}: Is a directory"),
    }


MTX_CASES = ["non-square", "fewer nodes than classes", "empty", "malformed", "not Matrix Market", "missing"]


@pytest.mark.parametrize("script", ["gat_train.py", "transformer_train.py"])
@pytest.mark.parametrize("case", MTX_CASES + ["a directory"])
def test_training_scripts_refuse_bad_mtx_files(tmp_path, script, case):
    path, message = bad_mtx_files(tmp_path)[case]
    if case == "a directory" and sys.platform == "win32":
        pytest.skip("another error text on Windows")
    assert_usage_error(run_example(script, "--mtx", path, "--no-check"), script, f"--mtx {message}")


def test_mtx_data_refuses_a_non_square_matrix(tmp_path):
    path = write_mtx(tmp_path / "wide.mtx", "3 5 2\n1 2\n3 5\n")
    with pytest.raises(ValueError, match="the matrix is 3 x 5; node classification needs a square matrix"):
        _common.mtx_data(path)


def test_small_valid_inputs_still_train():
    """The smallest accepted values run to the end (as many nodes as classes, one epoch,
    one head, one hidden feature)."""
    results = gat_train.main(
        ["--nodes", "5", "--epochs", "1", "--heads", "1", "--hidden", "1", "--device", "cpu", "--no-check"]
    )
    assert len(results["model"]["loss"]) == 1
    results = transformer_train.main(
        ["--nodes", "2", "--classes", "2", "--epochs", "1", "--heads", "3", "--dim", "3", "--layers", "1"]
        + ["--device", "cpu", "--no-check", "--log-every", "0"]
    )
    assert len(results["model"]["loss"]) == 1

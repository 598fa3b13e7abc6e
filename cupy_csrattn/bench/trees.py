"""A benchmark timed in several checkouts of the repository, the checkouts taking turns.

The benchmark script, run as ``python3 SCRIPT --time-tree TREE``, times the package of
checkout TREE in its own interpreter (TREE first on sys.path, the package not imported
before, so the script handles that form before importing this module) and prints
{case: figure} as JSON. ``best_over_rounds`` runs it for each tree in turn, ``rounds``
times, and keeps each case's smallest figure: the trees see the same machine load, and a
round slowed by something else does not count. ``main`` is the script's command line.
"""

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path

from cupy_csrattn.bench.devices import cpu_name


def best_over_rounds(script, trees, rounds):
    """{tree: {case: smallest figure over the rounds}}."""
    best = {tree: {} for tree in trees}
    for _ in range(rounds):
        for tree in trees:
            child = [sys.executable, str(script), "--time-tree", tree]
            figures = json.loads(subprocess.run(child, check=True, stdout=subprocess.PIPE, text=True).stdout)
            for case, figure in figures.items():
                best[tree][case] = min(figure, best[tree].get(case, figure))
    return best


def print_ratios(best, unit, width=36, digits=2):
    """A line per case: each tree's figure and its ratio to the first tree's."""
    first = next(iter(best))
    for case in best[first]:
        row = "  ".join(
            f"{best[tree][case]:{digits + 6}.{digits}f} {unit} ({best[tree][case] / best[first][case]:6.4f})"
            for tree in best
        )
        print(f"{case:<{width}} {row}", flush=True)


def record(best, rounds, **more):
    """The JSON record of a comparison: the machine, the rounds and every tree's figures."""
    return dict(cpu=cpu_name(), python=platform.python_version(), rounds=rounds, **more, best=best)


def main(script, doc, rounds, unit, width=36, digits=2, **more):
    """The command line of a benchmark script over trees: ``SCRIPT [TREE ...] [--rounds R]
    [--out JSON]``, the trees defaulting to the script's own checkout."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("trees", nargs="*", default=[str(Path(script).resolve().parents[1])])
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--out")
    options = parser.parse_args()
    best = best_over_rounds(script, options.trees, options.rounds)
    print_ratios(best, unit, width, digits)
    if options.out:
        Path(options.out).write_text(json.dumps(record(best, options.rounds, unit=unit, **more), indent=1) + "\n")

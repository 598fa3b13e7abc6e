"""Output of a benchmark run: a text table, a JSON document, plots (with matplotlib)."""

import contextlib
import json
import os
import pathlib
import re
import tempfile

import numpy as np


def case_key(record):
    """(graph, op, dtype, H, F) of a record."""
    return (record["graph"], record["op"], record["dtype"], record["H"], record["F"])


def floor_text(record):
    """A fused op record's fraction of the gather floor and, for a backward case, the backward
    alone and its ratio to the forward ("" for other records)."""
    if "gather_floor_fraction" not in record:
        return ""
    text = f"{record['gather_floor_fraction'] * 100:.1f}% of gather floor"
    if "backward_ms" in record:
        text += f"; backward {record['backward_ms']:.4f} ms = {record['backward_over_forward']:.2f}x forward"
    return text


def format_table(records, skipped=()):
    """The records as a text table, each baseline with its time relative to the library's."""
    library_ms = {case_key(r): r["ms"] for r in records if r["method"] == "csrattn"}
    header = (
        f"{'graph':<16} {'op':<29} {'dtype':<7} {'H':>3} {'F':>4} {'method':<14} "
        f"{'ms':>10} {'roofline':>9} {'vs csrattn':>11}  fused ops: gather floor"
    )
    lines = [header, "-" * len(header)]
    previous = None
    for r in records:
        key = case_key(r)
        same = key == previous
        previous = key
        ratio = ""
        if r.get("csrattn_ms_in_turns", 0) > 0:
            ratio = f"{r['ms'] / r['csrattn_ms_in_turns']:.2f}x*"
        elif r["method"] != "csrattn" and key in library_ms and library_ms[key] > 0:
            ratio = f"{r['ms'] / library_ms[key]:.2f}x"
        label = ("", "", "", "", "") if same else (r["graph"], r["op"], r["dtype"], r["H"], r["F"] or "-")
        lines.append(
            f"{label[0]:<16} {label[1]:<29} {label[2]:<7} {label[3]:>3} {label[4]:>4} {r['method']:<14} "
            f"{r['ms']:10.4f} {r['roofline_fraction'] * 100:8.1f}% {ratio:>11}  {floor_text(r)}".rstrip()
        )
    for s in skipped:
        lines.append(
            f"{s['graph']:<16} {s['op']:<29} {s['dtype']:<7} {s['H']:>3} {s['F'] or '-':>4} "
            f"{s['method']:<14} skipped: {s['reason']}"
        )
    lines.append(
        "vs csrattn: the baseline's time over the library's (above 1: the library is faster; "
        "*: the two timed in turns, call by call); "
        "roofline: the time of the byte count at the measured copy bandwidth, over the time; "
        "gather floor: the same for the no-reuse gather bytes, and for forward + backward cases "
        "the backward alone (their time less the forward case's)"
    )
    return "\n".join(lines)


def write_json(path, document):
    """Write ``document`` as indented JSON (creating the folder); returns the path. The file is
    written beside its final name and then renamed over it: a run stopped while writing leaves
    the earlier results whole, never half a file."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(document, indent=1)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path


def file_stem(text):
    """``text`` made safe for a file name (letters of any script kept: "ü" and "ö" are two names)."""
    return re.sub(r"[^\w.-]+", "_", text).strip("_") or "bench"


def printable(text):
    """``text`` with what no font draws escaped: a file name's undecodable bytes are lone
    surrogates in Python, which matplotlib's text refuses (a TypeError after the timing)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def matplotlib_available():
    try:
        import matplotlib
    except Exception:  # not installed, or broken
        return False
    return bool(matplotlib.__version__)


def plot_results(records, out_dir, title=""):
    """One PNG per graph: time per case for each method, and the library's fraction of the roofline.

    Parameters
    ----------
    records : list of dict
        As made by :class:`cupy_csrattn.bench.runner.GraphBench`.
    out_dir : str or os.PathLike
        Folder for ``bench_<graph>.png``.
    title : str
        Appended to each figure's title (the device and date, say).

    Returns
    -------
    list of pathlib.Path
        The files written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.patches
    import matplotlib.pyplot as plt

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for graph in dict.fromkeys(r["graph"] for r in records):
        mine = [r for r in records if r["graph"] == graph]
        cases = list(dict.fromkeys(case_key(r)[1:] for r in mine))
        methods = list(dict.fromkeys(r["method"] for r in mine))
        ms = {(case_key(r)[1:], r["method"]): r["ms"] for r in mine}
        roof = [
            next((r["roofline_fraction"] for r in mine if case_key(r)[1:] == case and r["method"] == "csrattn"), 0.0)
            * 100
            for case in cases
        ]
        labels = [f"{op} {dtype} H={H}" + (f" F={F}" if F else "") for op, dtype, H, F in cases]
        present = [[m for m in methods if (case, m) in ms] for case in cases]
        widest = max(len(p) for p in present)
        colors = {m: f"C{i}" for i, m in enumerate(methods)}
        height = 1.6 + len(cases) * (0.16 * widest + 0.12)
        fig, (ax_time, ax_roof) = plt.subplots(
            1, 2, figsize=(13, height), sharey=True, gridspec_kw={"width_ratios": [3, 2]}
        )
        bar = 0.8 / widest
        for y, (case, here) in enumerate(zip(cases, present, strict=True)):
            for i, method in enumerate(here):
                ax_time.barh(
                    y + (i - (len(here) - 1) / 2) * bar, ms[(case, method)], height=bar * 0.9, color=colors[method]
                )
        handles = [matplotlib.patches.Patch(color=colors[m], label=m) for m in methods]
        ax_time.legend(handles=handles, loc="lower right", fontsize="small")
        ax_time.set_xscale("log")
        ax_time.set_xlabel("time per call (ms, log scale; shorter is better)")
        ax_time.set_yticks(np.arange(len(cases)), labels, fontsize="small")
        ax_time.set_ylim(len(cases) - 0.5, -0.5)
        ax_time.grid(axis="x", which="both", alpha=0.3)
        ax_roof.barh(np.arange(len(cases)), roof, height=0.6, color="0.45")
        ax_roof.axvline(100, color="black", linewidth=0.8)
        ax_roof.set_xlabel("csrattn: % of the memory roofline (copy bandwidth)")
        ax_roof.grid(axis="x", alpha=0.3)
        for y, value in enumerate(roof):
            ax_roof.text(value, y, f" {value:.0f}%", va="center", fontsize="x-small")
        size = f"{mine[0]['num_dst']} rows, {mine[0]['num_edges']} edges"
        fig.suptitle(f"{printable(graph)}: {size}" + (f" ({title})" if title else ""))
        fig.tight_layout()
        path = out_dir / f"bench_{file_stem(graph)}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written

"""Registers, spills and stack of every kernel of one specialization, as ptxas reports them
through NVRTC for the library's own source (no GPU needed): the figures behind the register
caps in cuda/ (span_min_blocks in attention.cu) and the notes that quote ptxas.

    python3 benchmarks/kernel_resources.py FAMILY DTYPE [--index-dtype int32]
        [--arch sm_90] [--match REGEX] [--json OUT.json]

prints one line per kernel (registers, stack frame, spill stores and loads in bytes), in the
order ptxas compiled them; --match keeps the kernels whose name matches REGEX.
"""

import argparse
import json
import pathlib
import re
import sys

# The checkout beside this script, not an installed copy of the package: run as a script,
# sys.path[0] is benchmarks/, and an installed copy would report its own kernels.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from cupy_csrattn.gpu import kernels  # noqa: E402

_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")


def parse(log):
    """{kernel: dict(registers, stack, spill_stores, spill_loads)} from a ptxas -v log."""
    usage, name = {}, None
    for line in log.splitlines():
        entry = _ENTRY.search(line)
        if entry:
            name = entry.group(1)
            usage[name] = dict(registers=None, stack=0, spill_stores=0, spill_loads=0)
            continue
        if name is None:
            continue
        frame = _FRAME.search(line)
        if frame:
            usage[name].update(zip(("stack", "spill_stores", "spill_loads"), map(int, frame.groups())))
        registers = _REGISTERS.search(line)
        if registers:
            usage[name]["registers"] = int(registers.group(1))
            name = None  # the entry's report ends with its registers
    return usage


def resources(family, dtype, index_dtype="int32", arch="sm_90"):
    """parse() of the ptxas report of one specialization compiled for ``arch``."""
    log, _ = kernels.compile_for_arch(family, dtype, index_dtype, arch, extra_options=("-Xptxas=-v",))
    return parse(log)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("family", choices=sorted(kernels.FAMILIES))
    parser.add_argument("dtype", choices=["float16", "float32", "float64"])
    parser.add_argument("--index-dtype", default="int32", choices=["int32", "int64"])
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--match", default="", help="keep the kernels whose name matches this regular expression")
    parser.add_argument("--json", help="also write the table to this file")
    args = parser.parse_args(argv)
    usage = resources(args.family, args.dtype, args.index_dtype, args.arch)
    usage = {name: u for name, u in usage.items() if re.search(args.match, name)}
    width = max((len(name) for name in usage), default=0)
    for name, u in usage.items():
        print(
            f"{name:<{width}}  {u['registers']:>4} registers  stack {u['stack']:>4}  "
            f"spill stores {u['spill_stores']:>4}  loads {u['spill_loads']:>4}"
        )
    if args.json:
        with open(args.json, "w") as file:
            json.dump(dict(vars(args), kernels=usage), file, indent=1)


if __name__ == "__main__":
    sys.exit(main())

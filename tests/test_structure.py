"""The package's shape: its imports form a DAG, the core never imports the tools, no private
name crosses a module, no module-level code is hidden in functions' imports, and no module
is too long to read in one sitting. Read from the source with ast; nothing is imported."""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "cupy_csrattn"
MAX_LINES = 400
TOOLS = ("cupy_csrattn.cli", "cupy_csrattn.bench", "cupy_csrattn.datasets", "cupy_csrattn.testing")


def _modules():
    """{dotted module name: path} of every module of the package."""
    result = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        result[".".join(parts)] = path
    return result


MODULES = _modules()


def _target(name, modules):
    """The package module an imported name lives in (the name itself when it is a module)."""
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in modules else None


def _imports(module, path):
    """[(imported module, imported names, line, at module level)] of the package's own modules."""
    tree = ast.parse(path.read_text())
    top_level = {id(node) for node in tree.body}
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            if not base.startswith("cupy_csrattn"):
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                target = full if full in MODULES else _target(base, MODULES)
                found.append((target, alias.name, node.lineno, id(node) in top_level))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("cupy_csrattn"):
                    found.append((_target(alias.name, MODULES), None, node.lineno, id(node) in top_level))
    return found


IMPORTS = {module: _imports(module, path) for module, path in MODULES.items()}


def test_no_import_cycle():
    graph = {m: sorted({t for t, _, _, _ in imports if t and t != m}) for m, imports in IMPORTS.items()}
    state, stack = {}, []

    def visit(module):
        state[module] = "open"
        stack.append(module)
        for target in graph[module]:
            if state.get(target) == "open":
                cycle = stack[stack.index(target) :] + [target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        stack.pop()
        state[module] = "done"

    for module in graph:
        if module not in state:
            visit(module)


def test_core_does_not_import_the_tools():
    for module, imports in IMPORTS.items():
        if module.startswith(TOOLS) or module == "cupy_csrattn":
            continue
        tools = [t for t, _, _, _ in imports if t and t.startswith(TOOLS)]
        assert not tools, f"{module} (core) imports the tools {tools}"


def test_imports_are_at_module_level():
    late = [
        f"{module}:{line} imports {target}"
        for module, imports in IMPORTS.items()
        for target, _, line, top in imports
        if not top
    ]
    assert not late, "function-level imports of the package's own modules: " + "; ".join(late)


def test_no_private_name_crosses_a_module():
    """A module may import a package-private module (``_validate``), not another module's
    private functions, classes or constants."""
    crossing = [
        f"{module}:{line} imports {name} from {target}"
        for module, imports in IMPORTS.items()
        for target, name, line, _ in imports
        if name and name.startswith("_") and not name.startswith("__") and not (target or "").endswith("." + name)
    ]
    assert not crossing, "private names imported across modules: " + "; ".join(crossing)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_is_short(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines (more than {MAX_LINES}): split it by concern"

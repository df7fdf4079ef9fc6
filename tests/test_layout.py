"""Cheap checks that keep the layout honest: no import circle between project modules, ``env/`` standing on
its own, and package docstrings that describe what is there."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("actors", "cli", "env", "serving", "tune")
ENV_MAY_IMPORT = {"gymnasium", "numpy", "pettingzoo", "pydantic", "yaml", "PIL", "matplotlib"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (lazy imports inside functions count too); ``from pkg import
    mod`` counts as importing ``pkg.mod``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} - {""}
            submodules = {m for m in submodules if is_module(m)}
            found |= submodules if len(submodules) == len(node.names) else submodules | {node.module}
    return found


def project_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    return {name: {m for m in imports(path) if m in files and m != name} for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_circle_between_project_modules():
    assert find_cycle(project_graph()) is None, " -> ".join(find_cycle(project_graph()))


def test_the_cycle_finder_finds_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_env_imports_nothing_outside_itself_but_its_few_libraries():
    stdlib = __import__("sys").stdlib_module_names
    for path in (ROOT / "env").rglob("*.py"):
        for module in imports(path):
            top = module.split(".")[0]
            assert top == "env" or top in stdlib or top in ENV_MAY_IMPORT, f"{path.name} imports {module}"


def test_package_docstrings_describe_what_is_built():
    stale = re.compile(r"not (yet )?built|not built yet|to be built|\bTODO\b|\bstub\b", re.IGNORECASE)
    for package in (*PACKAGES, "benchmarks"):
        init = ROOT / package / "__init__.py"
        if init.exists():
            docstring = ast.get_docstring(ast.parse(init.read_text())) or ""
            assert not stale.search(docstring), f"{package}/__init__.py: {docstring!r}"

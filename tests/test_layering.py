"""The import graph has layers: common/ at the bottom, gateway/ and worker/ on it, then bench/,
then launcher/ on top; nothing imports a package above it or beside it. Inside worker/ the
same holds for its subpackages, and no files import one another in a circle."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "gateway", "worker", "bench", "launcher")
ALLOWED = {
    "common": {"common"},
    "gateway": {"common", "gateway"},
    "worker": {"common", "worker"},
    "bench": {"common", "gateway", "worker", "bench"},
    "launcher": set(PACKAGES),
}
# worker/'s floors, bottom up: each may import its own and those listed (worker/errors.py is
# the worker's floor, importable from anywhere in it).
WORKER_ALLOWED = {
    "machine": {"machine"},
    "text": {"text"},
    "sampling": {"sampling"},
    "kernels": {"machine", "kernels"},
    "kv": {"kv"},
    "model": {"machine", "kernels", "kv", "model"},
    "engine": {"machine", "kernels", "kv", "model", "sampling", "text", "engine"},
    "server": {"machine", "kernels", "kv", "model", "sampling", "text", "engine", "server"},
}


def imported_modules(path: Path) -> set[str]:
    """The dotted names a file imports, anywhere in it (lazy and type-checking ones too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def imported_packages(path: Path) -> set[str]:
    """The first-party packages a file imports."""
    return {name.split(".")[0] for name in imported_modules(path)} & set(PACKAGES)


def worker_subpackages(path: Path) -> set[str]:
    """The worker subpackages a file imports (worker.errors and the package's face aside)."""
    parts = {tuple(name.split(".")[:2]) for name in imported_modules(path)}
    return {sub for top, *rest in parts if top == "worker" and rest for sub in rest} & set(
        WORKER_ALLOWED
    )


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_imports_only_its_own_layer_and_those_below(package):
    wrong = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) - ALLOWED[package])
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert {file: names for file, names in wrong.items() if names} == {}


@pytest.mark.parametrize("subpackage", sorted(WORKER_ALLOWED))
def test_a_worker_subpackage_imports_only_those_below_it(subpackage):
    wrong = {
        str(path.relative_to(ROOT)): sorted(worker_subpackages(path) - WORKER_ALLOWED[subpackage])
        for path in sorted((ROOT / "worker" / subpackage).rglob("*.py"))
    }
    assert {file: names for file, names in wrong.items() if names} == {}


def test_the_worker_floor_and_top_files_stay_where_they_are():
    """worker/errors.py is the floor under every subpackage (it imports none of them);
    worker/cli.py and __main__.py are the top (no subpackage imports them)."""
    assert worker_subpackages(ROOT / "worker" / "errors.py") == set()
    top = {"worker.cli", "worker.__main__"}
    importers = {
        str(path.relative_to(ROOT))
        for sub in WORKER_ALLOWED
        for path in sorted((ROOT / "worker" / sub).rglob("*.py"))
        if imported_modules(path) & top
    }
    assert importers == set()


def module_graph(package: str) -> dict[str, set[str]]:
    """Each module of a package → the modules of it that it imports."""
    modules = {
        ".".join(path.relative_to(ROOT).with_suffix("").parts): path
        for path in (ROOT / package).rglob("*.py")
    }
    return {
        name: {m for m in imported_modules(path) if m in modules and m != name}
        for name, path in modules.items()
    }


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """A circle through each module that lies on one (depth-first, each reported once)."""
    found, done = [], set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            found.append(path[path.index(node) :])
            return
        if node in done:
            return
        for nxt in sorted(graph[node]):
            visit(nxt, [*path, node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])
    return found


def test_no_worker_modules_import_one_another_in_a_circle():
    assert circles(module_graph("worker")) == []


def test_the_checks_see_an_upward_import_and_a_circle(tmp_path):
    source = tmp_path / "example.py"
    source.write_text("def f():\n    from launcher.cli import main\n    import worker.cli\n")
    assert imported_packages(source) == {"launcher", "worker"}
    source.write_text("from worker.engine.sequence import Sequence\nimport worker.errors\n")
    assert worker_subpackages(source) == {"engine"}
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]

"""The import graph has layers: common/ at the bottom, gateway/ and worker/ on it, then bench/,
then launcher/ on top; nothing imports a package above it or beside it."""

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


def imported_packages(path: Path) -> set[str]:
    """The first-party packages a file imports, anywhere in it (lazy imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {name.split(".")[0] for name in names} & set(PACKAGES)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_imports_only_its_own_layer_and_those_below(package):
    wrong = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) - ALLOWED[package])
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert {file: names for file, names in wrong.items() if names} == {}


def test_the_check_sees_an_upward_import(tmp_path):
    source = tmp_path / "example.py"
    source.write_text("def f():\n    from launcher.cli import main\n    import worker.cli\n")
    assert imported_packages(source) == {"launcher", "worker"}

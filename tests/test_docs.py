"""The README and docs/ name only paths that exist and link only to headings that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The benchmark history (measurements as they were taken) is held to the same paths and links.
CHECKED = [*DOCS, ROOT / "docs" / "bench" / "HISTORY.md"]
TOP_FOLDERS = ("worker", "gateway", "common", "launcher", "tests", "bench", "deploy", "docs")
# A repository path in backticks: `worker/kv/paged.py`, `docs/BENCHMARKS.md`, `bench/`.
NAMED_PATH = re.compile(rf"`((?:{'|'.join(TOP_FOLDERS)})/[\w./-]*)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    return {slug(m) for m in re.findall(r"^#{1,6} (.*)$", doc.read_text(), re.MULTILINE)}


def doc_id(doc: Path) -> str:
    return str(doc.relative_to(ROOT))


@pytest.mark.parametrize("doc", CHECKED, ids=doc_id)
def test_every_path_a_doc_names_exists(doc: Path) -> None:
    named = {m.rstrip(".,:;") for m in NAMED_PATH.findall(doc.read_text())}
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert missing == []


@pytest.mark.parametrize("doc", CHECKED, ids=doc_id)
def test_every_link_leads_to_a_file_and_heading_that_exist(doc: Path) -> None:
    broken = []
    for target in LINK.findall(doc.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        if not linked.exists() or (
            anchor and linked.suffix == ".md" and anchor not in anchors(linked)
        ):
            broken.append(target)
    assert broken == []


def test_the_readme_is_a_front_door() -> None:
    """Short, with a way into every reader's document."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 350
    for doc in DOCS[1:]:
        assert f"(docs/{doc.name})" in readme, doc.name


def test_the_benchmarks_page_holds_the_current_figures() -> None:
    """Short, with the measurements as they were taken one link away."""
    page = (ROOT / "docs" / "BENCHMARKS.md").read_text()
    assert len(page.splitlines()) <= 500
    assert "](bench/HISTORY.md)" in page

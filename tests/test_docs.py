"""Every citation in the code points to a document in the repository, at a section it has."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITATION = re.compile(r"docs/architecture\.md (§\d+(?:\.\d+)?)(?: and (§\d+(?:\.\d+)?))?")


def _tracked(*patterns: str) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return [ROOT / line for line in listed.stdout.splitlines() if not line.startswith("tests/data")]


def test_citations_name_sections_of_docs_architecture() -> None:
    sections = set(
        re.findall(r"^#+ (\d+(?:\.\d+)?)\.? ", (ROOT / "docs/architecture.md").read_text(), re.M)
    )
    assert {"1", "3", "4", "5", "6", "7.5"} <= sections
    cited: list[tuple[str, str]] = []
    outside: list[str] = []
    for path in _tracked("*.py", "*.md", "Makefile"):
        text = path.read_text()
        for match in CITATION.finditer(text):
            cited += [(path.name, s[1:]) for s in match.groups() if s]
        if path != Path(__file__) and re.search(r"DESIGN\.md|REFERENCE §|\.\./shared/", text):
            outside.append(path.relative_to(ROOT).as_posix())
    assert outside == [], "cites a document that is not in the repository"
    assert len(cited) >= 20
    missing = [(name, s) for name, s in cited if s not in sections]
    assert missing == []

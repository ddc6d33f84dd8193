"""The docs stay true: every citation in the code points at a section the docs have; the README
is short and free of run history and issue tags; every command shown in the README and the docs
is one the commands take; and the README's quick tour and the user guide's examples run, in a
new shell that follows the README's own words (the demo first, then ``source
.venv/bin/activate``), on the demo's table.

In the docs, a ``sh`` block is run as it is and a ``python`` block next to it too (the tour and
the user guide); a ``shell`` block shows commands for a setting the tests do not have (S3, a
cluster), whose command lines are checked against the commands' parsers; a ``text`` block is
notation."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CITATION = re.compile(r"docs/architecture\.md (§\d+(?:\.\d+)?)(?: and (§\d+(?:\.\d+)?))?")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)
COMMANDS = ("indexer", "indexer-table", "indexer-write", "indexer-metadata")


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


def test_the_readme_is_short_and_the_docs_hold_no_run_history() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    head = readme.split("\n## ", 2)
    assert head[1].startswith("The two commands"), "the two commands come right after the intro"
    assert "source .venv/bin/activate" in head[2].split("\n## ", 1)[0]
    for path in DOCS:
        text = path.read_text()
        tags = re.findall(r"\[(?:scale|perf|query|mor|indexes|onboarding|hudi-mdt)\](?!\()", text)
        assert tags == [], f"{path.name} names issue tags: {tags}"
        assert not re.search(r"\d+ passed, \d+ skipped", text), f"{path.name} holds CI history"
    links = re.findall(r"\]\((docs/[\w-]+\.md|[\w-]+\.md)(?:#[\w-]+)?\)", readme)
    for page in {
        *links,
        *re.findall(r"\]\(([\w-]+\.md)", (ROOT / "docs/user-guide.md").read_text()),
    }:
        assert (ROOT / page).exists() or (ROOT / "docs" / page).exists(), page


def _blocks(path: Path, kinds: tuple[str, ...]) -> list[tuple[str, str]]:
    return [
        (m.group(1), m.group(2)) for m in BLOCK.finditer(path.read_text()) if m.group(1) in kinds
    ]


def _command_lines(script: str) -> list[list[str]]:
    """The invocations of our commands in a shell script (continuations joined; pipelines,
    lists and command substitutions taken apart, redirections left out)."""
    joined = re.sub(r"\\\n\s*", " ", script)
    found = []
    for line in joined.splitlines():
        lexer = shlex.shlex(re.sub(r"^\$ ", "", line), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words: list[str] = []
        for token in [*lexer, ";"]:
            if token and set(token) <= set("();<>|&"):
                if words and words[0] in COMMANDS:
                    found.append(words)
                words = [] if ">" not in token and "<" not in token else ["<redirect>"]
            else:
                words.append(token)
    return found


def _parser(command: str) -> object:
    from indexer.cli import build_parser as indexer_parser
    from metadata_table.cli import build_parser as metadata_parser
    from timeline.cli import build_parser as table_parser
    from writer.cli import build_parser as write_parser

    return {
        "indexer": indexer_parser,
        "indexer-table": table_parser,
        "indexer-write": write_parser,
        "indexer-metadata": metadata_parser,
    }[command]()


def test_every_command_the_docs_show_is_one_the_commands_take() -> None:
    checked = 0
    for path in DOCS:
        for _, script in _blocks(path, ("sh", "shell")):
            for words in _command_lines(script):
                parser = _parser(words[0])
                try:
                    parser.parse_args(words[1:])  # type: ignore[attr-defined]
                except SystemExit as e:
                    pytest.fail(f"{path.name}: `{shlex.join(words)}` is refused ({e})")
                checked += 1
    assert checked >= 40


def _script(path: Path, section: str | None = None) -> str:
    """The ``sh`` and ``python`` blocks of ``path`` (of one section), as one bash script."""
    text = path.read_text()
    if section is not None:
        text = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    parts = []
    for match in BLOCK.finditer(text):
        kind, body = match.group(1), match.group(2)
        if kind == "sh":
            parts.append(body)
        elif kind == "python":
            parts.append(f"python - <<'PYTHON'\n{body}PYTHON\n")
    return "\n".join(parts)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A folder as a user's clone is after `make demo`: the demo's table in ``demo-output``, the
    project's ``.venv``; and an environment whose PATH does not have the venv's commands."""
    folder = tmp_path_factory.mktemp("clone")
    venv = Path(sys.executable).parent.parent
    (folder / ".venv").symlink_to(venv)
    bin_dir = str(venv / "bin")
    path = [p for p in os.environ["PATH"].split(os.pathsep) if p and Path(p) != Path(bin_dir)]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(
        PATH=os.pathsep.join(path),
        XDG_STATE_HOME=str(folder / "state"),
        AIX_DEMO_OUTPUT=str(folder / "demo-output"),
    )
    made = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py")],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    assert "the same answer" in made.stdout and "source .venv/bin/activate" in made.stdout
    assert "{'" not in made.stdout and "0/0 tasks" not in made.stdout  # words, not dicts
    return folder, env


def _run(script: str, folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    assert shutil.which("indexer", path=env["PATH"]) is None, "the shell starts without the venv"
    # as a user who comes back a minute after the demo: a write's clean deletes the versions
    # the cleaner no longer keeps at once, as it would once its grace period is over
    return subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script],
        cwd=folder,
        env={**env, "INDEXER_CLEAN_GRACE_SECONDS": "0"},
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.slow  # the demo starts the daemon's Spark
def test_the_readme_tour_runs_in_a_new_shell_as_it_says(demo: tuple[Path, dict[str, str]]) -> None:
    folder, env = demo
    tour = _script(ROOT / "README.md", "A quick tour")
    assert tour.startswith("source .venv/bin/activate")
    done = _run(tour, folder, env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "trip-90001" in done.stdout and '"tables"' in done.stdout
    assert "record_index: dropped" in done.stdout  # the key filter's plan
    assert "(0 rows)" not in done.stdout, "every query of the tour finds rows in the demo's table"


@pytest.mark.slow
def test_the_user_guide_examples_run(demo: tuple[Path, dict[str, str]]) -> None:
    folder, env = demo
    guide = _script(ROOT / "docs" / "user-guide.md")
    done = _run("source .venv/bin/activate\n" + guide, folder, env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "(0 rows)" not in done.stdout

"""The layering of docs/architecture.md §1, checked on the source: imports go downward only, and
the indexer reaches the metadata table's files only through its partition-writer interface."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("timeline", "metadata_table", "writer", "indexer")
BELOW = {
    "timeline": set(),
    "metadata_table": {"timeline"},
    "writer": {"timeline", "metadata_table"},
    "indexer": {"timeline", "metadata_table"},
}


def _imports(package: str) -> list[tuple[str, str, str]]:
    """(file, module, name) of every ``from X import name`` and ``import X`` in a package."""
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found += [(path.name, node.module, a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                found += [(path.name, a.name, "") for a in node.names]
    return found


def test_imports_go_downward_only() -> None:
    wrong = []
    for package in PACKAGES:
        for file, module, _ in _imports(package):
            top = module.split(".")[0]
            if top in PACKAGES and top != package and top not in BELOW[package]:
                wrong.append(f"{package}/{file} imports {module}")
    assert wrong == []


def test_the_indexer_uses_partition_names_and_the_writer_interface_only() -> None:
    allowed = {
        # the index types a request names, as partitions, checked (the rules are the layout's)
        "metadata_table.layout": {"expand_index_types", "check_partition"}
        | {"requested_partitions", "dropped_partitions"},
        # the interface: the two formats' writers, and the types of what passes through them
        "metadata_table.partition_writer": {"PartitionWriter", "HudiPartitionWriter"}
        | {"DataFile", "PartitionBuild", "MigrationResult", "UpkeepResult"},
    }
    used = [(f, m, n) for f, m, n in _imports("indexer") if m.startswith("metadata_table")]
    assert used, "the indexer builds through the metadata table"
    wrong = [
        f"{file}: {module}.{name}"
        for file, module, name in used
        if module not in allowed or (allowed[module] is not None and name not in allowed[module])
    ]
    assert wrong == []
    assert len({name for _, _, name in used}) <= 10
    # and it neither makes Parquet files nor touches storage paths of the index itself
    for file, module, _ in _imports("indexer"):
        assert not module.startswith("pyarrow"), f"indexer/{file} imports {module}"
    for path in (ROOT / "indexer").rglob("*.py"):
        text = path.read_text()
        for verb in ("storage.delete(", "storage.create(", "storage.overwrite(", "METADATA_FOLDER"):
            assert verb not in text, f"indexer/{path.name} uses {verb}"


def test_what_a_worker_or_a_reader_imports() -> None:
    """A build's worker process (forked with its work's module imported) and a process that
    only reads do not import what they never use: SQLAlchemy (the SQL lock's, a quarter of a
    second) and, for the worker, the read side that ``metadata_table`` exports."""
    probe = """
import sys
import metadata_table.hudi_build, metadata_table.group_records
worker = {m for m in ("sqlalchemy", "metadata_table.read.scan") if m in sys.modules}
from metadata_table import load_table
reader = {m for m in ("sqlalchemy",) if m in sys.modules}
print(sorted(worker), sorted(reader), load_table.__module__)
"""
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    assert out == ["[]", "[]", "metadata_table.read.scan"]

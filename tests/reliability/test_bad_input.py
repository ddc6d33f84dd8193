"""The bad-input catalogue: each case plants one kind of bad input (in the table, in a file, in a
command line, on an HTTP API), runs what a user runs, and checks three things: a clear error
naming the culprit, a non-zero exit where a CLI is involved, and a table left intact (the same
rows, no pending instant, no uncommitted data file, every completed index equal to a from-scratch
build). The CLIs run in-process (their ``main``), as ``python -m ...`` would run them."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import indexer.cli
import metadata_table.cli
import timeline.cli
import writer.cli
from metadata_table.layout import BLOOM_FILTERS, COLUMN_STATS, FILES
from metadata_table.table import MetadataTable, build_records, initialize
from timeline import Table
from timeline.config import Config
from timeline.fs_view import FileSystemView
from writer.client import WriteClient

CLIS: dict[str, Callable[[list[str]], int]] = {
    "timeline": timeline.cli.main,
    "writer": writer.cli.main,
    "indexer": indexer.cli.main,
    "metadata_table": metadata_table.cli.main,
}
INDEXES = [FILES, COLUMN_STATS, BLOOM_FILTERS]


def lock_url(base: Path) -> str:
    return f"sqlite:///{base.parent / 'locks.sqlite'}"


def config(base: Path) -> Config:
    return Config.resolve(explicit={"indexer.lock.url": lock_url(base)})


def batch(start: int, stop: int, ts: int = 1) -> pa.Table:
    return pa.table(
        {
            "uuid": [f"u{i:03d}" for i in range(start, stop)],
            "city": [["sf", "la"][i % 2] for i in range(start, stop)],
            "ts": pa.array([ts] * (stop - start), pa.int64()),
            "fare": [float(i) for i in range(start, stop)],
        }
    )


@dataclass
class Ctx:
    """What a case gets: the table's base path and a folder for its own files."""

    base: Path
    tmp: Path

    @property
    def hoodie(self) -> Path:
        return self.base / ".hoodie"

    def table(self) -> Table:
        return Table.open(str(self.base), config(self.base))

    def write_input(self, name: str, data: pa.Table | bytes | str) -> str:
        path = self.tmp / name
        if isinstance(data, pa.Table):
            pq.write_table(data, path)
        else:
            path.write_bytes(data.encode() if isinstance(data, str) else data)
        return str(path)

    def completed(self, action: str = "commit") -> Path:
        return sorted(self.hoodie.glob(f"*.{action}"))[-1]

    def data_file(self) -> Path:
        return sorted(self.base.glob("sf/*.parquet"))[0]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A table with two commits and all three indexes, copied for each case."""
    base = tmp_path_factory.mktemp("bad-input") / "t"
    table = Table.create(str(base), "trips", ["uuid"], ["city"], "ts", config=config(base))
    with WriteClient(table) as client:
        client.insert(batch(0, 40))
        client.upsert(batch(20, 60, ts=2))
    initialize(table, INDEXES)
    return base


@pytest.fixture
def ctx(template: Path, tmp_path: Path) -> Ctx:
    base = tmp_path / "t"
    shutil.copytree(template, base)
    (tmp_path / "in").mkdir()
    return Ctx(base, tmp_path / "in")


def rows_of(table: Table) -> list[dict[str, Any]]:
    data = FileSystemView(table.timeline, table.timeline.load()).read_snapshot()
    return sorted(data.to_pylist(), key=lambda r: r["_hoodie_record_key"])


def assert_intact(base: Path, before: list[dict[str, Any]], planted: set[str]) -> None:
    """Same rows; nothing pending or uncommitted except what the case planted itself; every
    completed index equal to the from-scratch build."""
    table = Table.open(str(base), config(base))
    timeline = table.timeline.load()
    assert rows_of(table) == before
    pending = {f"{i.timestamp}.{i.action}" for i in timeline.pending()}
    assert pending <= planted, f"left pending: {pending - planted}"
    committed = {i.timestamp for i in timeline.write_timeline().completed()}
    view = FileSystemView(table.timeline, timeline)
    stray = [
        b.path
        for b in view.all_base_files
        if b.instant_time not in committed and b.path not in planted
    ]
    assert not stray, f"uncommitted data files: {stray}"
    props = table.reload_table_config()
    reader = MetadataTable(table).reader(timeline)
    for partition in props.metadata_partitions:
        assert (
            reader.read(partition).to_pylist()
            == build_records(table, timeline, partition).to_pylist()
        ), partition


@dataclass(frozen=True)
class Case:
    name: str
    plant: Callable[[Ctx], Any]  # returns extra args (list) for the command, or None
    command: list[str]  # CLI name, then args; "{base}" is the table
    error: str  # a regex the error message must match (it names the culprit)
    planted: Callable[[Ctx], set[str]] = lambda c: set()


def _corrupt(path_of: Callable[[Ctx], Path], data: bytes) -> Callable[[Ctx], None]:
    def plant(c: Ctx) -> None:
        path_of(c).write_bytes(data)

    return plant


def _props(edit: Callable[[str], str]) -> Callable[[Ctx], None]:
    def plant(c: Ctx) -> None:
        for name in ("hoodie.properties", "hoodie.properties.backup"):
            path = c.hoodie / name
            if path.exists():
                path.write_text(edit(path.read_text()))

    return plant


def _drop_key(key: str) -> Callable[[str], str]:
    return lambda text: "\n".join(line for line in text.splitlines() if not line.startswith(key))


def _set_key(key: str, value: str) -> Callable[[str], str]:
    return lambda text: re.sub(rf"(?m)^{re.escape(key)}=.*$", f"{key}={value}", text)


def _plan(body: bytes, t: str = "20990101000000000") -> Callable[[Ctx], None]:
    def plant(c: Ctx) -> None:
        (c.hoodie / f"{t}.indexing.requested").write_bytes(body)

    return plant


def _input(name: str, data: Any) -> Callable[[Ctx], list[str]]:
    return lambda c: ["--input", c.write_input(name, data)]


def _write(op: str = "upsert") -> list[str]:
    return ["writer", "{base}", "--operation", op]


def _in_partition(name: str, data: bytes) -> Callable[[Ctx], None]:
    def plant(c: Ctx) -> None:
        (c.base / "sf" / name).write_bytes(data)

    return plant


STRAY_BASE = "deadbeef-0000-0000-0000-000000000000-0_0-0-0_20200101000000000.parquet"
VALID_PLAN = {
    "version": 1,
    "indexPartitionInfos": [
        {"metadataPartitionPath": "secondary_index", "indexUptoInstant": "00000000000000000"}
    ],
}

CASES = [
    # --- the timeline ------------------------------------------------------------------------
    Case(
        "truncated completed commit",
        _corrupt(lambda c: c.completed(), b'{"partitionToWriteStats": {"sf": [{"fil'),
        ["writer", "{base}", "--operation", "upsert"],
        r"\.commit.*(JSON|corrupt|truncated)|(JSON|corrupt).*\.commit",
    ),
    Case(
        "commit metadata of the wrong shape",
        _corrupt(lambda c: c.completed(), b'{"partitionToWriteStats": ["not", "a", "map"]}'),
        ["writer", "{base}", "--operation", "upsert"],
        r"\.commit",
    ),
    Case(
        "an unknown action",
        _corrupt(lambda c: c.hoodie / "20200101000000001.frobnicate", b"{}"),
        ["timeline", "show", "{base}"],
        r"20200101000000001\.frobnicate.*unknown action|unknown action.*frobnicate",
        planted=lambda c: {"20200101000000001.frobnicate"},
    ),
    Case(
        "a completed instant older than the table with a bad timestamp",
        _corrupt(lambda c: c.hoodie / "2020.commit", b"{}"),
        ["timeline", "show", "{base}"],
        r"2020\.commit",
    ),
    Case(
        "an indexing plan that is not JSON",
        _plan(b"\x00\x01garbage"),
        ["indexer", "execute", "{base}"],
        r"20990101000000000\.indexing\.requested",
    ),
    Case(
        "an indexing plan without partitions",
        _plan(json.dumps({"version": 1, "indexPartitionInfos": []}).encode()),
        ["indexer", "execute", "{base}"],
        r"20990101000000000\.indexing\.requested",
    ),
    Case(
        "an indexing plan naming an unknown partition",
        _plan(json.dumps(VALID_PLAN).encode()),
        ["indexer", "execute", "{base}"],
        r"secondary_index",
    ),
    # --- hoodie.properties -------------------------------------------------------------------
    Case(
        "hoodie.properties without the table name",
        _props(_drop_key("hoodie.table.name")),
        ["timeline", "show", "{base}"],
        r"hoodie\.table\.name",
    ),
    Case(
        "hoodie.properties without the record key",
        _props(_drop_key("hoodie.table.recordkey.fields")),
        ["writer", "{base}", "--operation", "upsert"],
        r"hoodie\.table\.recordkey\.fields",
    ),
    Case(
        "hoodie.properties of table version 8",
        _props(_set_key("hoodie.table.version", "8")),
        ["timeline", "show", "{base}"],
        r"hoodie\.table\.version.*8|version 8",
    ),
    Case(
        "hoodie.properties with a wrong checksum and no backup",
        lambda c: (
            (c.hoodie / "hoodie.properties.backup").unlink(missing_ok=True),
            _props(_set_key("hoodie.table.checksum", "12345"))(c),
        ),
        ["timeline", "show", "{base}"],
        r"checksum",
    ),
    Case(
        "hoodie.properties missing",
        lambda c: [
            (c.hoodie / n).unlink(missing_ok=True)
            for n in ("hoodie.properties", "hoodie.properties.backup")
        ],
        ["timeline", "show", "{base}"],
        r"hoodie\.properties|no table",
    ),
    Case(
        "no table at the path",
        lambda c: ["{tmp}/nowhere"],
        ["timeline", "show"],
        r"nowhere",
    ),
    Case(
        "a table created twice",
        lambda c: None,
        ["timeline", "init", "{base}", "--table-name", "t", "--record-key", "uuid"],
        r"already",
    ),
    # --- data partitions ---------------------------------------------------------------------
    Case(
        "a non-Parquet file named like a base file",
        _in_partition(STRAY_BASE, b"this is not parquet"),
        ["metadata_table", "init", "{base}", "--partitions", "column_stats"],
        r"deadbeef.*(Parquet|parquet)",
        planted=lambda c: {f"sf/{STRAY_BASE}"},
    ),
    Case(
        "a zero-byte file named like a base file",
        _in_partition(STRAY_BASE, b""),
        ["metadata_table", "init", "{base}", "--partitions", "column_stats"],
        r"deadbeef",
        planted=lambda c: {f"sf/{STRAY_BASE}"},
    ),
    Case(
        "a truncated committed base file",
        lambda c: c.data_file().write_bytes(c.data_file().read_bytes()[:100]),
        ["metadata_table", "dump", "{base}", "files"],
        r"\.parquet",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input(case: Case, ctx: Ctx, capsys: pytest.CaptureFixture[str]) -> None:
    before = rows_of(ctx.table())
    extra = case.plant(ctx)
    args = [a.replace("{base}", str(ctx.base)).replace("{tmp}", str(ctx.tmp)) for a in case.command]
    if isinstance(extra, list):
        args += [a.replace("{tmp}", str(ctx.tmp)) for a in extra]
    if args[0] != "timeline" or args[1] not in ("init",):
        args += ["--conf", f"indexer.lock.url={lock_url(ctx.base)}"]
    code = CLIS[args[0]](args[1:])
    err = capsys.readouterr().err
    assert code != 0, f"exit 0 for {case.name}; stderr: {err}"
    assert re.search(case.error, err, re.IGNORECASE | re.DOTALL), err
    if not ctx.base.exists() or not (ctx.hoodie / "hoodie.properties").exists():
        return
    try:
        ctx.table()
    except Exception:
        return  # the case broke the table config itself; nothing else to compare
    assert_intact(ctx.base, before, case.planted(ctx))

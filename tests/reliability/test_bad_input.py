"""The bad-input catalogue: each case plants one kind of bad input (in the table, in a file, in a
command line, on an HTTP API), runs what a user runs, and checks three things: a clear error
naming the culprit, a non-zero exit where a CLI is involved, and a table left intact (the same
rows, no pending instant, no uncommitted data file, every completed index equal to a from-scratch
build). The CLIs run in-process (their ``main``), as ``python -m ...`` would run them."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import urllib.error
import urllib.parse
import urllib.request
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
from metadata_table.index_types import index_type
from metadata_table.layout import BLOOM_FILTERS, COLUMN_STATS, FILES
from metadata_table.maintenance import build_records, initialize
from metadata_table.table import MetadataTable
from timeline import Action, Table
from timeline.config import Config
from timeline.errors import BadRecordsError, CorruptInstantError
from timeline.fs_view import FileSystemView
from timeline.markers.server import API, MarkerServer
from writer.client import Operation, WriteClient

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
        """The latest base file of a file group in partition sf."""
        table = self.table()
        latest = FileSystemView(table.timeline, table.timeline.load()).latest_base_files(["sf"])
        return self.base / latest[0].path


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


@pytest.fixture(scope="module")
def plain_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same commits without indexes: listings and upsert tagging read storage."""
    base = tmp_path_factory.mktemp("bad-input-plain") / "t"
    table = Table.create(str(base), "trips", ["uuid"], ["city"], "ts", config=config(base))
    with WriteClient(table) as client:
        client.insert(batch(0, 40))
        client.upsert(batch(20, 60, ts=2))
    return base


def make_ctx(template: Path, tmp_path: Path) -> Ctx:
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
    reader = MetadataTable(table).reader(timeline)
    for partition in table.reload_index_state().completed:
        kind = index_type(partition)
        assert kind.comparable(reader.read(partition)) == kind.comparable(
            build_records(table, timeline, partition)
        ), partition


@dataclass(frozen=True)
class Case:
    name: str
    plant: Callable[[Ctx], Any]  # returns extra args (list) for the command, or None
    command: list[str]  # CLI name, then args; "{base}" is the table
    error: str  # a regex the error message must match (it names the culprit)
    planted: Callable[[Ctx], set[str]] = lambda c: set()
    indexed: bool = True  # start from the table with indexes (else: without, so reads list storage)


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


def _delete_properties(c: Ctx) -> None:
    for name in ("hoodie.properties", "hoodie.properties.backup"):
        (c.hoodie / name).unlink(missing_ok=True)


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


def _then_write(
    plant: Callable[[Ctx], Any], data: pa.Table | None = None
) -> Callable[[Ctx], list[str]]:
    """Plant, then hand the writer an input file of good records."""

    def both(c: Ctx) -> list[str]:
        plant(c)
        return [
            "--input",
            c.write_input("ok.parquet", data if data is not None else batch(0, 4, 5)),
        ]

    return both


def _committed_name(c: Ctx) -> str:
    """A base-file name at a completed commit's instant time (so readers take it as data)."""
    return (
        f"deadbeef-0000-0000-0000-000000000000-0_0-0-0_{c.completed().name.split('.')[0]}.parquet"
    )


def _in_partition_committed(data: bytes) -> Callable[[Ctx], None]:
    def plant(c: Ctx) -> None:
        (c.base / "sf" / _committed_name(c)).write_bytes(data)

    return plant


def _write(op: str = "upsert") -> list[str]:
    return ["writer", "{base}", "--operation", op]


def _in_partition(name: str, data: bytes) -> Callable[[Ctx], None]:
    def plant(c: Ctx) -> None:
        (c.base / "sf" / name).write_bytes(data)

    return plant


STRAY_BASE = "deadbeef-0000-0000-0000-000000000000-0_0-0-0_20200101000000000.parquet"


def _with_nested_column(c: Ctx) -> None:
    """A commit that adds a struct column (schema evolution)."""
    extra = pa.array([{"a": i} for i in range(3)], pa.struct([("a", pa.int64())]))
    with WriteClient(c.table()) as client:
        client.upsert(batch(0, 3, ts=5).append_column("extra", extra))


VALID_PLAN = {
    "version": 1,
    "indexPartitionInfos": [
        {"metadataPartitionPath": "secondary_index", "indexUptoInstant": "00000000000000000"}
    ],
}

CASES = [
    # --- the timeline ------------------------------------------------------------------------
    Case(
        "an unknown action",
        _then_write(_corrupt(lambda c: c.hoodie / "20200101000000001.frobnicate", b"{}")),
        ["writer", "{base}", "--operation", "upsert"],
        r"20200101000000001\.frobnicate.*unknown action|unknown action.*frobnicate",
        planted=lambda c: {"20200101000000001.frobnicate"},
    ),
    Case(
        "an instant file with a bad timestamp",
        _then_write(_corrupt(lambda c: c.hoodie / "2020.commit", b"{}")),
        ["writer", "{base}", "--operation", "upsert"],
        r"2020\.commit",
        planted=lambda c: {".hoodie/2020.commit"},
    ),
    Case(
        "an indexing plan that is not JSON",
        _plan(b"\x00\x01garbage"),
        ["indexer", "execute", "{base}"],
        r"20990101000000000\.indexing\.requested",
        planted=lambda c: {"20990101000000000.indexing"},
    ),
    Case(
        "an indexing plan without partitions",
        _plan(json.dumps({"version": 1, "indexPartitionInfos": []}).encode()),
        ["indexer", "execute", "{base}"],
        r"20990101000000000\.indexing\.requested",
        planted=lambda c: {"20990101000000000.indexing"},
    ),
    Case(
        "an indexing plan naming an unknown partition",
        _plan(json.dumps(VALID_PLAN).encode()),
        ["indexer", "execute", "{base}"],
        r"secondary_index",
        planted=lambda c: {"20990101000000000.indexing"},
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
        _then_write(_props(_drop_key("hoodie.table.recordkey.fields"))),
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
        _delete_properties,
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
        "a non-Parquet file named like a committed base file",
        _then_write(_in_partition_committed(b"this is not parquet")),
        ["writer", "{base}", "--operation", "upsert"],
        r"deadbeef.*(Parquet|parquet)",
        planted=lambda c: {f"sf/{_committed_name(c)}"},
        indexed=False,
    ),
    Case(
        "a zero-byte file named like a committed base file",
        _then_write(_in_partition_committed(b"")),
        ["writer", "{base}", "--operation", "upsert"],
        r"deadbeef",
        planted=lambda c: {f"sf/{_committed_name(c)}"},
        indexed=False,
    ),
    Case(
        "a truncated committed base file",
        _then_write(lambda c: c.data_file().write_bytes(c.data_file().read_bytes()[:100])),
        ["writer", "{base}", "--operation", "upsert"],
        r"\.parquet",
        planted=lambda c: {c.data_file().relative_to(c.base).as_posix()},
        indexed=False,
    ),
    # --- records handed to the writer ----------------------------------------------------------
    Case(
        "an input file that does not exist",
        lambda c: ["--input", "{tmp}/gone.parquet"],
        _write(),
        r"gone\.parquet.*no such file",
    ),
    Case(
        "an input of unknown format",
        _input("rows.txt", "uuid,city\n"),
        _write(),
        r"rows\.txt.*unknown format",
    ),
    Case("an unparsable CSV", _input("rows.csv", 'uuid,city\n"a,sf\n'), _write(), r"rows\.csv"),
    Case(
        "a null record key",
        _input(
            "in.parquet",
            pa.table({"uuid": ["a", None], "city": ["sf", "sf"], "ts": [1, 1], "fare": [1.0, 2.0]}),
        ),
        _write(),
        r"'uuid'.*null or empty record key",
    ),
    Case(
        "a partition value with a slash",
        _input("in.parquet", pa.table({"uuid": ["a"], "city": ["s/f"], "ts": [1], "fare": [1.0]})),
        _write(),
        r"'city'.*s/f",
    ),
    Case(
        "a partition value of ..",
        _input("in.parquet", pa.table({"uuid": ["a"], "city": [".."], "ts": [1], "fare": [1.0]})),
        _write(),
        r"'city'.*\.\.",
    ),
    Case(
        "a column whose type changed",
        _input(
            "in.parquet", pa.table({"uuid": ["a"], "city": ["sf"], "ts": [1], "fare": ["cheap"]})
        ),
        _write(),
        r"fare",
    ),
    Case(
        "input carrying Hudi meta columns",
        _input(
            "in.parquet", batch(0, 2).append_column("_hoodie_commit_time", pa.array(["1", "2"]))
        ),
        _write(),
        r"_hoodie_commit_time.*meta columns",
    ),
    Case(
        "input without the precombine field",
        _input("in.parquet", batch(0, 2).drop_columns(["ts"])),
        _write(),
        r"'ts'.*missing from the input|'ts'.*precombine",
    ),
    Case(
        "input without the record key field",
        _input("in.parquet", batch(0, 2).drop_columns(["uuid"])),
        _write(),
        r"'uuid'.*missing",
    ),
    Case(
        "a nested record key",
        _input(
            "in.parquet",
            pa.table({"uuid": [{"a": 1}], "city": ["sf"], "ts": [1], "fare": [1.0]}),
        ),
        _write(),
        r"'uuid'.*struct",
    ),
    Case(
        "duplicate record keys without a precombine field",
        lambda c: (
            _props(_drop_key("hoodie.table.precombine.field"))(c),
            ["--input", c.write_input("in.parquet", pa.concat_tables([batch(0, 3), batch(1, 2)]))],
        )[1],
        _write(),
        r"'u001'.*more than once",
    ),
    # --- configuration, locks, CLIs ----------------------------------------------------------
    Case(
        "an unknown indexer.* setting",
        _then_write(lambda c: None),
        ["writer", "{base}", "--operation", "upsert", "--conf", "indexer.lock.leese_ms=5"],
        r"indexer\.lock\.leese_ms",
    ),
    Case(
        "a setting of the wrong type",
        _then_write(lambda c: None),
        ["writer", "{base}", "--operation", "upsert", "--conf", "indexer.lock.lease_ms=soon"],
        r"indexer\.lock\.lease_ms.*soon",
    ),
    Case(
        "an unreachable lock database",
        _then_write(lambda c: None),
        [
            "writer",
            "{base}",
            "--operation",
            "upsert",
            "--conf",
            "hoodie.write.lock.wait_time_ms=3000",
            "--conf",
            "indexer.lock.url=postgresql://nobody:secret@127.0.0.1:1/locks",
        ],
        r"127\.0\.0\.1:1",
    ),
    Case(
        "a lock URL of an unknown kind",
        _then_write(lambda c: None),
        [
            "writer",
            "{base}",
            "--operation",
            "upsert",
            "--conf",
            "indexer.lock.url=zookeeper://zk:2181",
        ],
        r"zookeeper",
    ),
    Case(
        "an unknown index type",
        lambda c: None,
        ["indexer", "schedule", "{base}", "--index-types", "record_idx"],
        r"record_idx",
    ),
    Case(
        "a secondary index on a column the table lacks",
        lambda c: None,
        [
            "indexer",
            "schedule",
            "{base}",
            "--index-types",
            "record_index,secondary_index",
            "--columns",
            "tip",
        ],
        r"tip",
    ),
    Case(
        "a secondary index on a nested column",
        _with_nested_column,
        [
            "indexer",
            "schedule",
            "{base}",
            "--index-types",
            "record_index,secondary_index",
            "--columns",
            "extra",
        ],
        r"'extra' is struct",
    ),
    Case(
        "a secondary index without record_index",
        lambda c: None,
        ["indexer", "run", "{base}", "--index-types", "secondary_index", "--columns", "city"],
        r"record_index",
    ),
    Case(
        "a table without meta fields whose key field its files lack",
        _props(
            lambda text: (
                _set_key("hoodie.table.recordkey.fields", "rider")(text)
                + "\nhoodie.populate.meta.fields=false\n"
            )
        ),
        ["indexer", "run", "{base}", "--index-types", "record_index"],
        r"rider",
        indexed=False,
    ),
    Case(
        "a secondary index without columns",
        lambda c: None,
        ["indexer", "schedule", "{base}", "--index-types", "record_index,secondary_index"],
        r"--columns",
    ),
    Case(
        "column stats for a column the table lacks",
        lambda c: None,
        ["indexer", "schedule", "{base}", "--index-types", "column_stats", "--columns", "tip"],
        r"tip",
        indexed=False,
    ),
    Case(
        "a filter that does not parse",
        lambda c: None,
        ["metadata_table", "prune", "{base}", "--filter", "fare >> 5 AND"],
        r"fare >> 5|filter",
    ),
    Case(
        "a daemon config that is not TOML",
        lambda c: ["--config", c.write_input("service.toml", "[service\nport = ")],
        ["indexer", "serve"],
        r"service\.toml",
    ),
    Case(
        "a daemon config with an unknown section",
        lambda c: ["--config", c.write_input("service.toml", "[servise]\nport = 1\n")],
        ["indexer", "serve"],
        r"servise",
    ),
]


def files_of(base: Path) -> dict[str, bytes]:
    """Every file of the table except claims, locks and heartbeats (which commands may touch)."""
    out = {}
    if not base.exists():
        return out
    for path in base.rglob("*"):
        rel = path.relative_to(base).as_posix()
        if path.is_file() and not rel.startswith((".hoodie/.aux/", ".hoodie/.heartbeat/")):
            out[rel] = path.read_bytes()
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input(
    case: Case,
    template: Path,
    plain_template: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ctx = make_ctx(template if case.indexed else plain_template, tmp_path)
    extra = case.plant(ctx)
    try:
        before: list[dict[str, Any]] | None = rows_of(ctx.table())
    except Exception:
        before = None  # the planted damage makes the table unreadable: compare files only
    files_before = files_of(ctx.base)
    args = [a.replace("{base}", str(ctx.base)).replace("{tmp}", str(ctx.tmp)) for a in case.command]
    if isinstance(extra, list):
        args += [a.replace("{tmp}", str(ctx.tmp)) for a in extra]
    if not any(a.startswith("indexer.lock.url=") for a in args) and args[1] != "serve":
        args += ["--conf", f"indexer.lock.url={lock_url(ctx.base)}"]
    code = CLIS[args[0]](args[1:])
    err = capsys.readouterr().err
    assert code != 0, f"exit 0 for {case.name}; stderr: {err}"
    assert re.search(case.error, err, re.IGNORECASE | re.DOTALL), err
    files_after = files_of(ctx.base)
    planted = case.planted(ctx)
    changed = {
        p for p, data in files_before.items() if files_after.get(p) != data and p not in planted
    }
    assert not changed, f"{case.name} changed or deleted {sorted(changed)}"
    added = {p for p in files_after if p not in files_before}
    rollbacks = {p.rsplit("/", 1)[-1].split(".")[0] for p in added if ".rollback" in p}
    # a write rolled back leaves its rollback instant, and the rollback's update of the index
    # (its metadata deltacommit, written inside the rollback's critical section) when indexed
    recorded = {
        p
        for p in added
        if p.startswith(".hoodie/.async-indexer/.hoodie/")
        and p.rsplit("/", 1)[-1].split(".")[0] in rollbacks
        and ".deltacommit" in p
    }
    stray = sorted(p for p in added if ".rollback" not in p and p not in recorded)
    assert not stray, f"{case.name} left {stray}"
    if before is not None:
        assert_intact(ctx.base, before, planted)


# --- cases through the API (no CLI reads these) -------------------------------------------------


def test_a_column_type_parquet_cannot_store(template: Path, tmp_path: Path) -> None:
    ctx = make_ctx(template, tmp_path)
    table = ctx.table()
    before = rows_of(table)
    odd = batch(0, 2).append_column(
        "gap", pa.array([(1, 2, 3), (4, 5, 6)], pa.month_day_nano_interval())
    )
    with pytest.raises(BadRecordsError, match=r"'gap'.*month_day_nano_interval"):
        WriteClient(table).upsert(odd)
    assert_intact(ctx.base, before, set())


@pytest.mark.parametrize(
    "content",
    [b'{"partitionToWriteStats": {"sf": [{"fil', b'{"partitionToWriteStats": ["not", "a", "map"]}'],
    ids=["truncated", "wrong shape"],
)
def test_a_corrupt_concurrent_commit_stops_the_conflict_check(
    template: Path, tmp_path: Path, content: bytes
) -> None:
    """A commit completed while we wrote has unreadable metadata: we cannot know whether it
    touched our file groups, so we refuse to commit, name the file, and roll back."""
    ctx = make_ctx(template, tmp_path)
    table = ctx.table()
    before = rows_of(table)
    txn = WriteClient(table).start(Operation.UPSERT)
    txn.write(batch(0, 4, ts=7))
    other = table.timeline.generator.next()
    (ctx.hoodie / f"{other}.commit").write_bytes(content)
    with pytest.raises(CorruptInstantError, match=f"{other}\\.commit"):
        txn.commit()
    (ctx.hoodie / f"{other}.commit").unlink()
    assert_intact(ctx.base, before, set())


def test_clock_skew_between_writers(template: Path, tmp_path: Path) -> None:
    """A writer whose clock runs an hour ahead completed a commit; a writer with a correct clock
    still gets a later instant time (times are claimed after the newest instant), commits, and
    both commits are read in order."""
    ctx = make_ctx(template, tmp_path)
    table = ctx.table()
    ahead = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).strftime("%Y%m%d%H%M%S%f")[:17]
    skewed = WriteClient(table).start(Operation.UPSERT)
    # the skewed writer's instant: re-create the requested file an hour ahead
    txn_time = skewed.instant_time
    skewed.abort()
    del txn_time
    future = table.timeline.create_requested(Action.COMMIT, timestamp=ahead)
    table.timeline.complete(table.timeline.transition_to_inflight(future), {})
    done = WriteClient(table).upsert(batch(0, 2, ts=9))
    assert done.timestamp > ahead
    assert [r["ts"] for r in rows_of(table)[:2]] == [9, 9]
    assert not list(table.timeline.load().pending())


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("../escape.parquet.marker.CREATE", "inside the table"),
        ("/etc/passwd.marker.CREATE", "marker"),
        ("sf/x.parquet.marker.SIDEWAYS", "SIDEWAYS|type"),
    ],
    ids=["dot-dot", "absolute", "unknown io type"],
)
def test_bad_marker_names_on_the_http_api(
    template: Path, tmp_path: Path, name: str, reason: str
) -> None:
    ctx = make_ctx(template, tmp_path)
    table = ctx.table()
    with MarkerServer(table) as server:
        folder = table.storage.uri(".hoodie/.temp/20260101000000000")
        query = urllib.parse.urlencode({"markerdirpath": folder, "markername": name})
        request = urllib.request.Request(f"{server.url}{API}/create?{query}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(request, timeout=10)
    assert raised.value.code == 400
    assert re.search(reason, raised.value.read().decode(), re.IGNORECASE)
    assert not (ctx.hoodie / ".temp" / "20260101000000000").exists() or not any(
        (ctx.hoodie / ".temp" / "20260101000000000").iterdir()
    )


def test_garbage_on_the_marker_api(template: Path, tmp_path: Path) -> None:
    ctx = make_ctx(template, tmp_path)
    with MarkerServer(ctx.table()) as server:
        request = urllib.request.Request(
            f"{server.url}{API}/create", data=b"\x00\xff garbage", method="POST"
        )
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(request, timeout=10)
    assert raised.value.code == 400
    assert "markerdirpath" in raised.value.read().decode()

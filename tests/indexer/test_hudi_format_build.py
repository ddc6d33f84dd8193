"""``indexer run --format hudi`` (#49) against Apache Hudi 0.15: our build of column_stats,
bloom_filters and record_index in Hudi's own metadata table equals Hudi's own correct build of
the same partitions, and Hudi's engines use it (Spark's data skipping, RECORD_INDEX upserts, the
bloom index reading filters from the metadata table). One Hudi-written table per module (a
files partition, several partitions, dates, timestamps, decimals, a mostly-null and a struct
column, file groups with older versions), copied where a test changes it."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from indexer.cli import main
from indexer.hudi_format import HudiFormatIndexer
from indexer.indexer import IndexerOptions
from metadata_table.hudi_table import HudiMetadataTable, write_deltacommit
from timeline import Table
from timeline.config import Config
from timeline.errors import IndexBuildAbortedError
from timeline.formats import metadata_records as records

from ..hudi_peer.peer import HudiPeer, HudiPeerError, HudiTable

pytestmark = pytest.mark.hudi

ROOT = Path(__file__).resolve().parents[2]

TYPES = ["column_stats", "bloom_filters", "record_index"]
#: the files partition's record types: its partition list and its file lists
FILE_KINDS = ((1, "files: partitions"), (2, "files: file lists"))
FLAGS = {
    "hoodie.metadata.index.column.stats.enable": "true",
    "hoodie.metadata.index.bloom.filter.enable": "true",
    "hoodie.metadata.record.index.enable": "true",
    "hoodie.metadata.index.async": "true",
}
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("part", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("fare", pa.float64()),
        pa.field("day", pa.date32()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("amount", pa.decimal128(10, 2)),
        pa.field("big", pa.decimal128(22, 4)),
        pa.field("rare", pa.string()),
        pa.field("rider", pa.struct([("name", pa.string()), ("rating", pa.int32())])),
    ]
)
START = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def rows(ids: range, ts: int = 1) -> pa.Table:
    """One row per id, 4 partitions; value ranges follow the id, so files cover apart ranges."""
    return pa.Table.from_pylist(
        [
            {
                "id": i,
                "part": f"p{i % 4}",
                "ts": ts,
                "name": f"n{i:06d}",
                "fare": i * 0.5 - 100,
                "day": (START + dt.timedelta(days=i // 100)).date(),
                "at": START + dt.timedelta(minutes=i),
                "amount": decimal.Decimal(i) / 100,
                "big": decimal.Decimal(i * 7) / 10000 - 3,
                "rare": f"r{i}" if i % 97 == 0 else None,
                "rider": {"name": f"r{i}", "rating": i % 5},
            }
            for i in ids
        ],
        schema=SCHEMA,
    )


def write_table(hudi: HudiPeer, path: Path, table_type: str = "COPY_ON_WRITE") -> HudiTable:
    """Bulk inserts (new file groups each, apart key ranges), an insert, then an upsert that
    rewrites some file groups (older versions kept: nothing cleaned)."""
    table = HudiTable(
        str(path),
        table_type=table_type,
        extra={"hoodie.clean.automatic": "false", "hoodie.parquet.small.file.limit": "0"},
    )
    for start in (0, 4000, 8000):
        hudi.write(table, "bulk_insert", rows(range(start, start + 4000)))
    hudi.write(table, "insert", rows(range(12000, 13000)))
    hudi.write(table, "upsert", rows(range(0, 12000, 10), ts=2))
    return table


@pytest.fixture(scope="module")
def source(hudi: HudiPeer, tmp_path_factory: pytest.TempPathFactory) -> HudiTable:
    return write_table(hudi, tmp_path_factory.mktemp("hudi-format") / "t")


def copy_of(table: HudiTable, to: Path, **changes: Any) -> HudiTable:
    shutil.copytree(table.path, to)
    return HudiTable(str(to), table_type=table.table_type, extra={**table.extra, **changes})


def build(path: str, types: list[str] = TYPES, **options: Any) -> HudiFormatIndexer:
    indexer = HudiFormatIndexer(
        Table.open(path, Config.resolve(explicit={})), IndexerOptions(**options)
    )
    done = indexer.run(types)
    assert done is not None and done.is_completed
    return indexer


def mdt_records(hudi: HudiPeer, table: HudiTable) -> dict[str, dict[str, Any]]:
    """Every record of Hudi's metadata table, read by Hudi's own Spark reader of it."""
    metadata = HudiTable(f"{table.path}/.hoodie/metadata")
    found = hudi.read(metadata, metadata=False).to_pylist()
    return {r["key"]: r for r in found}


def hudis_own_build(hudi: HudiPeer, table: HudiTable, to: Path) -> HudiTable:
    """Hudi's correct build of the partitions (from scratch: the metadata table removed, then a
    writer with the flags on, whose write adds no file: a delete of a key that is not there)."""
    own = {**FLAGS, "hoodie.metadata.index.async": "false", "hoodie.metadata.enable": "true"}
    copy = copy_of(table, to, **own)
    without_metadata_table(to)
    hudi.write(copy, "delete", rows(range(99_000, 99_001)))
    return copy


def without_metadata_table(path: Path) -> None:
    """Hudi's metadata table taken out of a table, as a writer with it off leaves it."""
    shutil.rmtree(path / ".hoodie/metadata")
    properties = path / ".hoodie/hoodie.properties"
    text = properties.read_text()
    lines = [
        ln for ln in text.splitlines() if not ln.startswith("hoodie.table.metadata.partitions")
    ]
    properties.write_text("\n".join(lines) + "\n")
    (path / ".hoodie/.hoodie.properties.crc").unlink(missing_ok=True)


def comparable(record: dict[str, Any]) -> dict[str, Any]:
    """A metadata record as both builds must agree on it: a bloom filter's stamp is its
    build's instant; a file list is a map (Spark reads it as pairs, in the order stored)."""
    out = {k: v for k, v in record.items() if not k.startswith("_hoodie")}
    if out.get("filesystemMetadata"):
        out["filesystemMetadata"] = dict(out["filesystemMetadata"])
    if out.get("BloomFilterMetadata"):
        out["BloomFilterMetadata"] = {**out["BloomFilterMetadata"], "timestamp": None}
    return out


def by_type(found: dict[str, dict[str, Any]], kind: int) -> dict[str, dict[str, Any]]:
    return {k: comparable(r) for k, r in found.items() if r["type"] == kind}


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_our_build_equals_hudis_own_build_record_for_record(
    hudi: HudiPeer, source: HudiTable, tmp_path: Path, table_type: str
) -> None:
    original = (
        source if table_type == "COPY_ON_WRITE" else write_table(hudi, tmp_path / "mor", table_type)
    )
    ours = copy_of(original, tmp_path / "ours")
    build(ours.path)
    theirs = hudis_own_build(hudi, original, tmp_path / "theirs")
    assert set(TYPES) <= set(HudiMetadataTable(Table.open(theirs.path)).partitions)
    # and with the metadata table itself, on a copy without one: files too (log files listed)
    bare = copy_of(original, tmp_path / "bare")
    without_metadata_table(Path(bare.path))
    build(bare.path, ["files", *TYPES])
    hudis = mdt_records(hudi, theirs)
    kinds = ((3, "column_stats"), (4, "bloom_filters"), (5, "record_index"))
    for mine, also in ((mdt_records(hudi, ours), ()), (mdt_records(hudi, bare), FILE_KINDS)):
        for kind, name in (*kinds, *also):
            a, b = by_type(mine, kind), by_type(hudis, kind)
            assert a, name
            assert sorted(a) == sorted(b), (name, len(a), len(b))
            different = [k for k in a if a[k] != b[k]]
            assert not different, (name, len(different), a[different[0]], b[different[0]])


def test_on_a_table_without_a_metadata_table_we_create_it_with_files_as_hudi_does(
    hudi: HudiPeer, source: HudiTable, tmp_path: Path
) -> None:
    """``files`` with the metadata table itself, on a table whose writers ran with it off (one
    commits during our build: it leaves our unpublished metadata table alone, and our catch-up
    lists its files): every record equals Hudi's own build from scratch of the final table, read
    through Hudi's reader of its metadata table; then Hudi's readers list files from it and
    skip with our column stats, and its writers with the metadata table on keep it."""
    off = {"hoodie.metadata.enable": "false"}
    table = copy_of(source, tmp_path / "bare", **off)
    without_metadata_table(Path(table.path))

    class Busy(HudiFormatIndexer):
        def _catch_up(self, instant: Any, plan: Any, deadline: float) -> str:
            hudi.write(table, "upsert", _changed([6, 4006]))
            return super()._catch_up(instant, plan, deadline)

    indexer = Busy(Table.open(table.path, Config.resolve(explicit={})), IndexerOptions())
    done = indexer.run(["files", *TYPES])
    assert done is not None and indexer.stats["catch_up_instants"] == 1
    made = Path(table.path, ".hoodie/metadata/.hoodie/hoodie.properties").read_text()
    props = dict(ln.split("=", 1) for ln in made.splitlines() if not ln.startswith("#"))
    assert props["hoodie.table.name"] == "hudi_peer_table_metadata"
    assert props["hoodie.table.base.file.format"] == "HFILE"
    assert set(HudiMetadataTable(Table.open(table.path)).partitions) == {"files", *TYPES}
    theirs = hudis_own_build(hudi, table, tmp_path / "theirs")
    mine, hudis = mdt_records(hudi, table), mdt_records(hudi, theirs)
    for kind in (1, 2):  # the partition list, the file lists, through Hudi's reader
        a, b = by_type(mine, kind), by_type(hudis, kind)
        assert a and a == b, (kind, len(a), len(b))
    for partition in TYPES:  # as stored (see the test above: Hudi's reader of log blocks)
        found, wanted = stored(table, partition), stored(theirs, partition)
        assert found and found == wanted, partition
    # Hudi lists files through it and skips with our stats
    plain, files = hudi.files_read(table, "id >= 12500", {"hoodie.enable.data.skipping": "false"})
    skipped, kept = hudi.files_read(table, "id >= 12500", {"hoodie.enable.data.skipping": "true"})
    assert kept < files and ids(skipped) == ids(plain) and len(ids(plain)) == 500
    # Hudi's writers with it on (and the flags) keep it: upserts tagged by our record index
    writer = {**FLAGS, "hoodie.metadata.enable": "true", "hoodie.index.type": "RECORD_INDEX"}
    on = copy_of(table, tmp_path / "on", **writer)
    hudi.write(on, "upsert", _changed([8, 12008]))
    hudi.write(on, "insert", rows(range(13000, 13010)))
    assert hudi.read(on, columns=["id"]).num_rows == 13010
    reports = HudiFormatIndexer(Table.open(on.path), IndexerOptions()).hudi.validate()
    assert [r.partition for r in reports if r.ok] == ["files", *TYPES], reports


def ids(found: pa.Table) -> list[int]:
    return sorted(found.column("id").to_pylist())


@pytest.fixture(scope="module")
def built(hudi: HudiPeer, source: HudiTable, tmp_path_factory: pytest.TempPathFactory) -> HudiTable:
    """A copy of the source with our three partitions built (tests copy it again to write)."""
    table = copy_of(source, tmp_path_factory.mktemp("hudi-format-built") / "t")
    build(table.path)
    return table


def test_hudis_data_skipping_keeps_fewer_files_and_the_same_rows(
    hudi: HudiPeer, built: HudiTable
) -> None:
    for where in (
        "id >= 12500",
        "day = DATE '2024-01-05'",
        "at < TIMESTAMP '2024-01-01 02:00:00 UTC'",
        "amount BETWEEN 30.00 AND 30.50",
        "name = 'n003333'",
    ):
        plain, files = hudi.files_read(built, where, {"hoodie.enable.data.skipping": "false"})
        skipped, kept = hudi.files_read(built, where, {"hoodie.enable.data.skipping": "true"})
        assert kept < files, (where, kept, files)
        assert ids(skipped) == ids(plain) and plain.num_rows > 0, where


def test_hudis_record_index_upserts_find_every_key_we_indexed(
    hudi: HudiPeer, built: HudiTable, tmp_path: Path
) -> None:
    writer = {**FLAGS, "hoodie.index.type": "RECORD_INDEX"}
    table = copy_of(built, tmp_path / "rli", **writer)
    changed = list(range(5, 13000, 500))
    hudi.write(table, "upsert", _changed(changed))
    after = hudi.read(table, columns=["id", "ts"])
    assert after.num_rows == 13000  # no key written twice
    assert (
        sorted(i.as_py() for i, t in zip(*after.columns, strict=True) if t.as_py() == 9) == changed
    )
    # control: keys taken out of our index are tagged as inserts, so they are duplicated
    control = copy_of(built, tmp_path / "control", **writer)
    _forget_keys(control.path, ["5", "505"])
    hudi.write(control, "upsert", _changed([5, 505]))
    assert hudi.read(control, columns=["id"]).num_rows == 13002


def test_hudis_bloom_index_reads_our_filters_and_tags_correctly(
    hudi: HudiPeer, built: HudiTable, tmp_path: Path
) -> None:
    writer = {**FLAGS, "hoodie.index.type": "BLOOM", "hoodie.bloom.index.use.metadata": "true"}
    table = copy_of(built, tmp_path / "bloom", **writer)
    changed = list(range(7, 13000, 700))
    hudi.write(table, "upsert", _changed(changed))
    after = hudi.read(table, columns=["id", "ts"])
    assert after.num_rows == 13000
    assert (
        sorted(i.as_py() for i, t in zip(*after.columns, strict=True) if t.as_py() == 9) == changed
    )


def test_hudis_bloom_index_fails_without_our_filter_control(
    hudi: HudiPeer, built: HudiTable, tmp_path: Path
) -> None:
    """The control of the test above: the filter of the file holding key 7 taken out, Hudi's
    bloom index fails to tag it, so it read ours."""
    writer = {**FLAGS, "hoodie.index.type": "BLOOM", "hoodie.bloom.index.use.metadata": "true"}
    table = copy_of(built, tmp_path / "bloom-control", **writer)
    where = hudi.read(table, columns=["id", "_hoodie_partition_path", "_hoodie_file_name"])
    (row,) = [r for r in where.to_pylist() if r["id"] == 7]
    key = records.bloom_filter_key(row["_hoodie_partition_path"], row["_hoodie_file_name"])
    _forget_keys(table.path, [key], "bloom_filters")
    with pytest.raises(HudiPeerError, match=r"(?i)bloom filter"):
        hudi.write(table, "upsert", _changed([7]))


def test_hudis_writers_commit_during_our_build_and_its_services_run_over_our_files(
    hudi: HudiPeer, source: HudiTable, tmp_path: Path
) -> None:
    """Hudi's writers (the flags and the async-index flag Hudi's docs ask for) commit after t,
    between our base files and our catch-up: after completion every partition equals Hudi's
    own build of the final table; then Hudi's metadata compaction and cleaning run over it."""
    writer = {**FLAGS, "hoodie.metadata.compact.max.delta.commits": "2"}
    table = copy_of(source, tmp_path / "busy", **writer)

    class Busy(HudiFormatIndexer):
        def _catch_up(self, instant: Any, plan: Any, deadline: float) -> str:
            hudi.write(table, "upsert", _changed([3, 4003, 8003]))
            hudi.write(table, "insert", rows(range(13000, 13100)))
            return super()._catch_up(instant, plan, deadline)

    indexer = Busy(Table.open(table.path, Config.resolve(explicit={})), IndexerOptions())
    done = indexer.run(TYPES)
    assert done is not None and indexer.stats["catch_up_instants"] == 2
    # equal to Hudi's own build of the final table, record for record (decoded as stored:
    # Hudi's reader of log blocks unwraps dates and decimals into ints and bytes, its own
    # writer's as ours, so through it the two differ until a compaction)
    theirs = hudis_own_build(hudi, table, tmp_path / "theirs")
    for partition in TYPES:
        a, b = stored(table, partition), stored(theirs, partition)
        assert a and a == b, partition
    # Hudi's writers go on: its metadata compaction folds our files in, its cleaner follows
    for n in range(3):
        hudi.write(table, "upsert", _changed([10 + n]))
    timeline = HudiMetadataTable(Table.open(table.path)).instants
    assert any(a == "commit" for _, a, s in timeline if not s), timeline  # a compaction
    plain, files = hudi.files_read(table, "id >= 13050", {"hoodie.enable.data.skipping": "false"})
    skipped, kept = hudi.files_read(table, "id >= 13050", {"hoodie.enable.data.skipping": "true"})
    assert kept < files and ids(skipped) == ids(plain) == list(range(13050, 13100))
    rli = copy_of(table, tmp_path / "after", **{"hoodie.index.type": "RECORD_INDEX"})
    hudi.write(rli, "upsert", _changed([3, 13001]))
    assert hudi.read(rli, columns=["id"]).num_rows == 13100


def test_a_commit_caught_up_then_rolled_back_by_hudi_leaves_no_trace(
    hudi: HudiPeer, source: HudiTable, tmp_path: Path
) -> None:
    """A Hudi commit lands after t and is caught up; then Hudi rolls it back (a completed
    commit): its keys must not stay in our record index, located in files that are gone (Hudi's
    writer rolls back the metadata deltacommit of what it rolls back; ours is ours to undo)."""
    table = copy_of(source, tmp_path / "undone")

    class Undone(HudiFormatIndexer):
        def _catch_up(self, instant: Any, plan: Any, deadline: float) -> str:
            hudi.write(table, "insert", rows(range(13000, 13020)))
            caught = super()._catch_up(instant, plan, deadline)
            hudi.service(table, "rollback")  # the latest completed commit: that insert
            return caught

    indexer = Undone(Table.open(table.path, Config.resolve(explicit={})), IndexerOptions())
    assert indexer.run(TYPES) is not None and indexer.stats["catch_up_instants"] == 1
    found = stored(table, "record_index")
    assert not {str(k) for k in range(13000, 13020)} & set(found)
    theirs = hudis_own_build(hudi, table, tmp_path / "theirs")
    for partition in TYPES:
        assert stored(table, partition) == stored(theirs, partition), partition
    assert hudi.read(table, columns=["id"]).num_rows == 13000


def stored(table: HudiTable, partition: str) -> dict[str, dict[str, Any]]:
    """A partition's records as stored (base files and log blocks merged as Hudi merges them),
    without what two correct builds differ in: a bloom filter's stamp (its build's instant) and
    the instant of a record-index entry (a key updated in place keeps the instant that placed
    it, in Hudi's writer as here; a build from scratch takes its file's) and the meta fields
    (Hudi's compaction fills ``_hoodie_file_name``)."""
    found = HudiMetadataTable(Table.open(table.path)).records(partition)
    out = {}
    for key, record in found.items():
        record = {k: v for k, v in record.items() if not k.startswith("_hoodie")}
        if record.get("BloomFilterMetadata"):
            record["BloomFilterMetadata"] = {**record["BloomFilterMetadata"], "timestamp": None}
        if record.get("recordIndexMetadata"):
            record["recordIndexMetadata"] = {**record["recordIndexMetadata"], "instantTime": None}
        out[key] = record
    return out


POINTS = (
    "execute.after_inflight",
    "build.mid",
    "execute.after_build",
    "complete.before",
)


def test_a_build_failing_at_each_step_leaves_the_table_as_before_and_the_next_run_completes(
    hudi: HudiPeer, source: HudiTable, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = copy_of(source, tmp_path / "failing")
    properties = Path(table.path, ".hoodie/hoodie.properties")
    before = properties.read_bytes()
    metadata = Path(table.path, ".hoodie/metadata")
    listed = sorted(p.name for p in metadata.iterdir())
    timeline = sorted(p.name for p in Path(table.path, ".hoodie").iterdir() if p.is_file())
    for point in POINTS:
        monkeypatch.setenv("AIX_FAILPOINT", point)
        with pytest.raises(IndexBuildAbortedError):
            build(table.path)
        assert properties.read_bytes() == before, point
        assert sorted(p.name for p in metadata.iterdir()) == listed, point
        now = sorted(p.name for p in Path(table.path, ".hoodie").iterdir() if p.is_file())
        assert now == timeline, point
        assert not list(metadata.glob(".hoodie/*004.deltacommit*")), point
    monkeypatch.delenv("AIX_FAILPOINT")
    assert hudi.read(table, columns=["id"]).num_rows == 13000
    build(table.path)
    plain, files = hudi.files_read(table, "id >= 12500", {"hoodie.enable.data.skipping": "false"})
    skipped, kept = hudi.files_read(table, "id >= 12500", {"hoodie.enable.data.skipping": "true"})
    assert kept < files and ids(skipped) == ids(plain)


def test_a_killed_build_leaves_hudi_working_and_the_next_run_resumes_it(
    hudi: HudiPeer, source: HudiTable, tmp_path: Path
) -> None:
    table = copy_of(source, tmp_path / "killed", **FLAGS)
    command = [sys.executable, "-m", "indexer", "run", table.path, "--format", "hudi"]
    command += ["--index-types", ",".join(TYPES)]
    env = {**os.environ, "AIX_FAILPOINT": "execute.after_build:kill"}
    killed = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    # Hudi's writers and readers go on meanwhile (the partitions are in neither list)
    hudi.write(table, "upsert", _changed([21, 4021]))
    assert hudi.read(table, columns=["id"]).num_rows == 13000
    resumed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "1 instants caught up" in resumed.stdout
    assert "hoodie.write.lock.provider is not set" in resumed.stderr  # no lock shared with Hudi
    assert "hoodie.metadata.record.index.enable=true" in resumed.stdout
    assert set(TYPES) <= set(HudiMetadataTable(Table.open(table.path)).partitions)
    rli = copy_of(table, tmp_path / "after", **{"hoodie.index.type": "RECORD_INDEX"})
    hudi.write(rli, "upsert", _changed([21, 9021]))
    assert hudi.read(rli, columns=["id"]).num_rows == 13000


def _changed(keys: list[int]) -> pa.Table:
    return (
        rows(range(0, 0))
        if not keys
        else pa.concat_tables([rows(range(k, k + 1), ts=9) for k in keys])
    )


def _forget_keys(path: str, keys: list[str], partition: str = "record_index") -> None:
    """Take keys out of a partition we built (a delete block at an instant of ours)."""
    table = Table.open(path, Config.resolve(explicit={}))
    hudi = HudiMetadataTable(table)
    newest = max(t for t, a, s in hudi.instants if a == "deltacommit" and not s)
    with table.lock("test") as lock:
        write_deltacommit(
            table, hudi, newest[:17] + "030", [partition], {}, {partition: keys}, lock
        )


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_validate_sync_drop_and_status_on_hudis_metadata_table(
    hudi: HudiPeer, built: HudiTable, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = copy_of(built, tmp_path / "kept")
    code, out = cli(capsys, "validate", table.path, "--format", "hudi")
    assert code == 0 and out.count(": ok") == 4, out  # files, made by Hudi's writer, too
    # a lost metadata deltacommit (its writer died before completing it): sync writes it again
    mdt = Path(table.path, ".hoodie/metadata/.hoodie")
    newest = max(p.name.split(".")[0] for p in mdt.glob("*.deltacommit") if len(p.name) == 29)
    (mdt / f"{newest}.deltacommit").unlink()
    code, out = cli(capsys, "validate", table.path, "--format", "hudi")
    assert code == 1 and "not applied" in out, out
    code, out = cli(capsys, "sync", table.path, "--format", "hudi")
    assert code == 0 and f"applied {newest}" in out, out
    code, out = cli(capsys, "validate", table.path, "--format", "hudi")
    assert code == 0, out
    # a record that differs from the data files is named
    _forget_keys(table.path, ["4242"])
    code, out = cli(capsys, "validate", table.path, "--format", "hudi")
    assert code == 1 and "record_index: differs" in out and "1 missing record(s): 4242" in out
    # drop: out of hoodie.properties and storage; Hudi's readers and writers go on
    code, out = cli(capsys, "drop", table.path, "--format", "hudi", "--index-types", "record_index")
    assert code == 0 and "dropped record_index" in out, out
    assert "record_index" not in HudiMetadataTable(Table.open(table.path)).partitions
    assert not Path(table.path, ".hoodie/metadata/record_index").exists()
    assert hudi.read(table, columns=["id"]).num_rows == 13000


def test_status_warns_of_a_partition_a_hudi_writer_deleted(
    hudi: HudiPeer, built: HudiTable, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    without = {k: v for k, v in FLAGS.items() if k != "hoodie.metadata.record.index.enable"}
    table = copy_of(built, tmp_path / "careless", **without)
    code, out = cli(capsys, "status", table.path)
    assert "WARNING" not in out
    hudi.write(table, "upsert", _changed([1]))  # its writer lacks the record index's flag
    assert "record_index" not in HudiMetadataTable(Table.open(table.path)).partitions
    code, out = cli(capsys, "status", table.path)
    assert "WARNING: record_index" in out and "hoodie.metadata.record.index.enable=true" in out
    code, out = cli(capsys, "status", table.path, "--json")
    assert json.loads(out)["hudi_deleted_by_writers"] == ["record_index"]
    # built again (in two steps), the warning goes
    code, out = cli(
        capsys, "schedule", table.path, "--format", "hudi", "--index-types", "record_index"
    )
    assert code == 0 and "scheduled" in out, out
    code, out = cli(capsys, "execute", table.path, "--format", "hudi")
    assert code == 0 and "completed" in out, out
    assert "hoodie.metadata.record.index.enable=true" in out
    code, out = cli(capsys, "status", table.path)
    assert "WARNING" not in out


def test_the_daemon_builds_hudi_format_and_rebuilds_what_a_writer_deleted(
    hudi: HudiPeer, source: HudiTable, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from indexer.service import IndexerService
    from indexer.service_config import parse_service_config

    without = {k: v for k, v in FLAGS.items() if k != "hoodie.metadata.index.column.stats.enable"}
    table = copy_of(source, tmp_path / "served", **without)
    config = parse_service_config(
        {
            "service": {"request_store": f"sqlite:///{tmp_path / 's.sqlite'}"},
            "tables": [
                {
                    "base": table.path,
                    "format": "hudi",
                    "index_types": ["column_stats", "bloom_filters"],
                    "lock_url": f"sqlite:///{tmp_path / 'locks.sqlite'}",
                }
            ],
        }
    )
    service = IndexerService(config)
    try:
        base = next(iter(service.tables))
        service.tick(base)
        partitions = HudiMetadataTable(Table.open(table.path)).partitions
        assert {"column_stats", "bloom_filters"} <= set(partitions)
        assert service.status()["tables"][base]["partitions"]["column_stats"] == "completed"
        hudi.write(table, "upsert", _changed([2]))  # its writer lacks column stats' flag
        assert "column_stats" not in HudiMetadataTable(Table.open(table.path)).partitions
        assert 'hudi_partitions_deleted_by_writers{table="' in service.lag_metrics()
        assert service.lag_metrics().rstrip().endswith(" 1")
        with caplog.at_level("WARNING"):
            service.tick(base)
        assert "hoodie.metadata.index.column.stats.enable=true; it is built again" in caplog.text
        assert "column_stats" in HudiMetadataTable(Table.open(table.path)).partitions
        assert service.lag_metrics().rstrip().endswith(" 0")
    finally:
        service.store.close()


def test_a_build_killed_after_publishing_is_completed_not_built_again(
    hudi: HudiPeer, source: HudiTable, tmp_path: Path
) -> None:
    table = copy_of(source, tmp_path / "published", **FLAGS)
    command = [sys.executable, "-m", "indexer", "run", table.path, "--format", "hudi"]
    command += ["--index-types", "column_stats"]
    env = {**os.environ, "AIX_FAILPOINT": "complete.after_partitions:kill"}
    killed = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert "column_stats" in HudiMetadataTable(Table.open(table.path)).partitions
    folder = Path(table.path, ".hoodie/metadata/column_stats")
    files = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    pending = [i for i in hudi.instants(table) if i["action"] == "indexing"]
    assert [i["state"] for i in pending] == ["INFLIGHT"], pending
    # whatever else the crash lost (here: our record of what we published), a partition Hudi's
    # readers may read is never deleted or rewritten
    Path(table.path, ".hoodie/.async-indexer/hudi-published.json").unlink()
    resumed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == files  # not built again
    done = [i for i in hudi.instants(table) if i["action"] == "indexing"]
    assert [i["state"] for i in done] == ["COMPLETED"], done
    plain, files_all = hudi.files_read(
        table, "id >= 12500", {"hoodie.enable.data.skipping": "false"}
    )
    skipped, kept = hudi.files_read(table, "id >= 12500", {"hoodie.enable.data.skipping": "true"})
    assert kept < files_all and ids(skipped) == ids(plain)

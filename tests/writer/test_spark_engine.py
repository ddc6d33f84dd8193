"""The Spark write engine on a local SparkSession: the same table as the local engine, file names
with Spark write tokens, markers, and a clear error for bad input."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from metadata_table.bloom import BloomSizing
from timeline.errors import BadRecordsError, SparkWriteError
from timeline.fs_view import FileSystemView
from timeline.markers import marker_folder
from writer.client import Operation, WriteClient, WriteOptions
from writer.spark import SparkWriteClient

from .test_client import commit_metadata, make_table, rows, snapshot


def frame(spark: Any, data: pa.Table, folder: Path) -> Any:
    """``data`` as a Spark DataFrame, through a Parquet file (as the CLI reads its input)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"input-{len(list(folder.iterdir()))}.parquet"
    pq.write_table(data, path)
    return spark.read.parquet(str(path))


def records(table: Any) -> dict[str, dict[str, Any]]:
    """The snapshot without the meta columns that name instants and files."""
    volatile = ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_file_name")
    return {
        key: {c: v for c, v in row.items() if c not in volatile}
        for key, row in snapshot(table).items()
    }


TOKEN = re.compile(r"^[0-9a-f-]+-\d+_(\d+)-(\d+)-(\d+)_\d{17}\.parquet$")


BATCHES = [
    (
        Operation.INSERT,
        rows(*[(f"k{i:03d}", ["sf", "nyc", "la"][i % 3], 1, float(i)) for i in range(60)]),
    ),
    (
        Operation.UPSERT,
        rows(*[(f"k{i:03d}", ["sf", "nyc", "la"][i % 3], 2, i * 10.0) for i in range(0, 90, 3)]),
    ),
    (Operation.UPSERT, rows(("k000", "sf", 1, -1.0), ("k001", "nyc", 3, -2.0))),  # k000 is stale
    (
        Operation.DELETE,
        rows(*[(f"k{i:03d}", ["sf", "nyc", "la"][i % 3], 0, 0.0) for i in range(0, 30, 2)]),
    ),
]


@pytest.mark.parametrize("markers", ["direct", "timeline_server_based"])
def test_spark_engine_matches_the_local_engine(tmp_path: Path, spark: Any, markers: str) -> None:
    options = WriteOptions(markers=markers, max_records_per_file=8)
    local = make_table(str(tmp_path / "local"))
    remote = make_table(str(tmp_path / "spark"))
    with WriteClient(local, options) as a, SparkWriteClient(remote, spark, options) as b:
        for operation, data in BATCHES:
            a.write(operation, data)
            instant = b.write(operation, frame(spark, data, tmp_path / "in"))
            metadata = commit_metadata(remote, instant.timestamp)
            for stat in metadata.write_stats:
                match = TOKEN.match(stat.path.rsplit("/", 1)[1])
                assert match, stat.path  # <fileId>_<partition>-<stage>-<attempt id>_<T>.parquet
                assert stat.num_writes <= 8 or operation is not Operation.INSERT
            assert not remote.storage.exists(marker_folder(instant.timestamp))
    assert records(remote) == records(local)
    view = FileSystemView(remote.timeline, remote.timeline.load())
    assert len(view.latest_base_files()) >= 60 // 8


def test_spark_engine_bucket_layout(tmp_path: Path, spark: Any) -> None:
    options = WriteOptions(bucket_count=4)
    local = make_table(str(tmp_path / "local"))
    remote = make_table(str(tmp_path / "spark"))
    with WriteClient(local, options) as a, SparkWriteClient(remote, spark, options) as b:
        for operation, data in BATCHES:
            a.write(operation, data)
            b.write(operation, frame(spark, data, tmp_path / "in"))
    assert records(remote) == records(local)
    view = FileSystemView(remote.timeline, remote.timeline.load())
    assert {b.file_id[:8] for b in view.latest_base_files()} <= {f"{i:08d}" for i in range(4)}


def test_spark_engine_takes_arrow_tables_in_any_string_layout(tmp_path: Path, spark: Any) -> None:
    """string_view (tpchgen-cli, Polars, DuckDB) and dictionaries (pandas) as key, partition and
    data columns, handed over as Arrow tables: written as the local engine writes them."""
    data = BATCHES[0][1]
    odd = pa.table(
        {
            "uuid": data.column("uuid").cast(pa.string_view()),
            "city": data.column("city").dictionary_encode(),
            "ts": data.column("ts"),
            "fare": data.column("fare"),
            "note": pa.array([f"n{i}" for i in range(data.num_rows)], pa.string_view()),
        }
    )
    plain = data.append_column("note", odd.column("note").cast(pa.string()))
    local = make_table(str(tmp_path / "local"))
    remote = make_table(str(tmp_path / "spark"))
    with WriteClient(local) as a, SparkWriteClient(remote, spark) as b:
        a.insert(plain)
        b.insert(odd)
        b.upsert(odd.slice(0, 5))  # tagging finds the keys it wrote
        a.upsert(plain.slice(0, 5))
    assert records(remote) == records(local)


def test_spark_engine_bad_input_names_the_column_and_rolls_back(tmp_path: Path, spark: Any) -> None:
    table = make_table(str(tmp_path / "t"))
    bad = pa.table({"uuid": ["a", None], "city": ["sf", "sf"], "ts": [1, 1], "fare": [1.0, 2.0]})
    with SparkWriteClient(table, spark) as client:
        with pytest.raises(SparkWriteError, match="uuid"):
            client.insert(frame(spark, bad, tmp_path / "in"))
        with pytest.raises(BadRecordsError, match="_hoodie_record_key"):
            client.insert(
                frame(
                    spark,
                    bad.append_column("_hoodie_record_key", pa.array(["x", "y"])),
                    tmp_path / "in",
                )
            )
    timeline = table.timeline.load()
    assert not timeline.pending()
    assert FileSystemView(table.timeline, timeline).all_base_files == []


def test_a_late_attempt_knows_its_file_cannot_be_committed(tmp_path: Path) -> None:
    """A task attempt that finishes writing after the write completed (or was rolled back)
    deletes its own file: only the stats the driver collected are committed."""
    from writer.files import FileLayout
    from writer.spark import _WriteTask

    table = make_table(str(tmp_path / "t"))
    with WriteClient(table) as client:
        txn = client.start(Operation.INSERT)
        task = _WriteTask(
            storage=table.storage,
            markers=txn.markers,
            instant_time=txn.instant_time,
            operation=Operation.INSERT,
            bases={},
            per_file={},
            precombine="ts",
            bloom=BloomSizing(),
            layout=FileLayout(),
            failpoint=None,
        )
        assert not task._late()  # requested: the write is running
        txn.write(rows(("a", "sf", 1, 1.0)))
        assert not task._late()  # inflight
        txn.commit()
        assert task._late()  # completed
        txn = client.start(Operation.INSERT)
        task.instant_time = txn.instant_time
        txn.abort()
        assert task._late()  # rolled back


def test_spark_engine_tags_through_the_bloom_index(tmp_path: Path, spark: Any) -> None:
    """With bloom_filters completed, a Spark upsert reads the keys of only the files whose
    filter may hold an incoming key (probed on the executors), as the local engine does."""
    from metadata_table.maintenance import initialize

    options = WriteOptions(max_records_per_file=2)
    seed = rows(*[(f"k{i:03d}", "sf", 1, float(i)) for i in range(20)])
    change = rows(("k007", "sf", 2, -7.0))
    results = {}
    for indexed in (False, True):
        table = make_table(str(tmp_path / f"t{indexed}"))
        WriteClient(table, options).insert(seed)
        if indexed:
            initialize(table, ["bloom_filters"])
        with SparkWriteClient(table, spark, options) as client:
            client.write(Operation.UPSERT, frame(spark, change, tmp_path / "in"))
            results[indexed] = client.last_tag_files_read
        assert records(table)["k007"]["fare"] == -7.0 and len(records(table)) == 20
    assert results[False] == 10  # every file of the partition
    assert 1 <= results[True] <= 3  # the file with k007, and at most a false positive or two


def test_schema_on_write_and_nested_columns_as_the_local_engine(tmp_path: Path, spark: Any) -> None:
    """The Spark engine takes the schema and layout from the same rules as the local engine: a
    new column, a promoted type and another column order, with struct, list and map values."""
    nested = pa.schema(
        [
            ("uuid", pa.string()),
            ("city", pa.string()),
            ("ts", pa.int32()),
            ("fare", pa.float32()),
            ("rider", pa.struct([("name", pa.string()), ("stars", pa.int32())])),
            ("tags", pa.list_(pa.string())),
            ("attrs", pa.map_(pa.string(), pa.string())),
        ]
    )

    def batch(ids: range, ts: int, extra: bool = False) -> pa.Table:
        data = pa.Table.from_pylist(
            [
                {
                    "uuid": f"k{i}",
                    "city": "sf" if i % 2 else "la",
                    "ts": ts,
                    "fare": i + 0.5,
                    "rider": {"name": f"r{i}", "stars": i % 5},
                    "tags": [f"t{i}"] * (i % 3),
                    "attrs": [("k", str(i))],
                }
                for i in ids
            ],
            schema=nested,
        )
        if extra:  # long, double, a new column, another order
            data = data.cast(
                pa.schema([f.with_type(pa.int64()) if f.name == "ts" else f for f in nested])
            )
            data = data.set_column(3, "fare", data.column("fare").cast(pa.float64()))
            data = data.append_column("tip", pa.array([1.5] * data.num_rows))
            data = data.select(["tip", *reversed(nested.names)])
        return data

    results = {}
    for engine in ("local", "spark"):
        table = make_table(str(tmp_path / engine))
        client = SparkWriteClient(table, spark) if engine == "spark" else WriteClient(table)

        for op, data in (
            (Operation.INSERT, batch(range(6), 1)),
            (Operation.UPSERT, batch(range(0, 6, 2), 2, extra=True)),
        ):
            if engine == "spark":
                client.write(op, frame(spark, data, tmp_path / "in"))
            else:
                client.write(op, data)
        got = records(table)
        assert got["k2"]["tip"] == 1.5 and got["k1"]["tip"] is None
        assert got["k2"]["ts"] == 2 and got["k1"]["ts"] == 1
        assert got["k4"]["rider"] == {"name": "r4", "stars": 4}
        assert got["k4"]["tags"] == ["t4"] and dict(got["k5"]["attrs"]) == {"k": "5"}
        assert len(got) == 6
        results[engine] = {
            k: {c: v for c, v in r.items() if c != "_hoodie_commit_seqno"} for k, r in got.items()
        }
    assert results["local"] == results["spark"]


GLOBAL_BATCHES = [
    *BATCHES[:2],
    # k001 (nyc) moves to tokyo; k006 (sf, ts 2) would move to la but is stale (ts 1: it stays)
    (Operation.UPSERT, rows(("k001", "tokyo", 5, 1.5), ("k006", "la", 1, 4.5))),
    (Operation.INSERT, rows(("k002", "la", 6, 2.5), ("k500", "sf", 6, 5.0))),  # k002 exists
    (Operation.DELETE, rows(("k001", "sf", 0, 0.0), ("k003", "la", 0, 0.0))),  # named elsewhere
]


@pytest.mark.parametrize("bucket_count", [0, 4])
def test_spark_engine_with_global_keys_matches_the_local_engine(
    tmp_path: Path, spark: Any, bucket_count: int
) -> None:
    """With a record index the Spark engine tags through it as the local engine does: keys
    moved to another partition leave the old one, an insert of a stored key updates it, a
    delete finds the key wherever it lives; no data file is read to tag."""
    from metadata_table.layout import RECORD_INDEX
    from metadata_table.maintenance import initialize
    from metadata_table.validate import validate

    options = WriteOptions(max_records_per_file=8, bucket_count=bucket_count)
    local = make_table(str(tmp_path / "local"))
    remote = make_table(str(tmp_path / "spark"))
    for table in (local, remote):
        WriteClient(table, options).insert(GLOBAL_BATCHES[0][1])
        initialize(table, [RECORD_INDEX])
    with WriteClient(local, options) as a, SparkWriteClient(remote, spark, options) as b:
        for operation, data in GLOBAL_BATCHES[1:]:
            a.write(operation, data)
            b.write(operation, frame(spark, data, tmp_path / "in"))
            assert b.last_tag_files_read == 0
    assert records(remote) == records(local)
    got = records(remote)
    assert "k001" not in got and "k003" not in got
    assert got["k006"]["city"] == "sf" and got["k002"]["fare"] == 2.5
    assert all(r.ok for r in validate(remote))

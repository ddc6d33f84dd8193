"""Scan plans tell the truth: each index is credited with exactly the files it dropped, in the
order the indexes are applied (partition_stats, column_stats, record_index, secondary indexes,
bloom_filters), and each index that dropped nothing says why; filters on the record key fields
by their own names are answered by the key indexes. Every plan is checked against the rows: no
file that holds a matching row is ever dropped, and the credits add up to the files skipped."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from indexer.indexer import AsyncIndexer
from metadata_table import load_table
from metadata_table.layout import (
    BLOOM_FILTERS,
    COLUMN_STATS,
    FILES,
    PARTITION_STATS,
    RECORD_INDEX,
    secondary_index_partition,
)
from metadata_table.maintenance import initialize
from metadata_table.read.filters import parse_filter
from metadata_table.read.scan import ScanPlan
from timeline import Table
from timeline.config import Config
from timeline.fs_view import FileSystemView
from timeline.index_state import INDEX_FOLDER
from writer.client import WriteClient

CITIES = ["sf", "la", "ny"]
RIDER = secondary_index_partition("rider")
EVERY = [FILES, COLUMN_STATS, PARTITION_STATS, BLOOM_FILTERS, RECORD_INDEX, RIDER]


def _rows(lo: int, hi: int, city: str | None = None) -> pa.Table:
    ids = list(range(lo, hi))
    return pa.table(
        {
            "uuid": [f"k{i:04d}" for i in ids],
            "city": [city or CITIES[i % 3] for i in ids],
            "ts": pa.array([1] * len(ids), pa.int64()),
            "fare": [float(i) for i in ids],
            "rider": [f"r{i % 17}" for i in ids],
        }
    )


def _open(base: Path) -> Table:
    lock = f"sqlite:///{base.parent / f'{base.name}-locks.sqlite'}"
    return Table.open(str(base), Config.resolve(explicit={"indexer.lock.url": lock}))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 files in 3 partitions (4 inserts of 30 keys), every index built; column_stats covers
    fare and city (not rider, not the record key)."""
    base = tmp_path_factory.mktemp("plans") / "t"
    lock = f"sqlite:///{base.parent / 't-locks.sqlite'}"
    config = Config.resolve(explicit={"indexer.lock.url": lock})
    table = Table.create(str(base), "t", ["uuid"], ["city"], "ts", config=config)
    client = WriteClient(table)
    for batch in range(4):
        client.insert(_rows(batch * 30, batch * 30 + 30))
    initialize(table, EVERY, columns=["fare", "city"])
    return base


@pytest.fixture
def table(built: Path, tmp_path: Path) -> Table:
    """A copy of the built table for one test to change."""
    copy = tmp_path / "t"
    shutil.copytree(built, copy)
    return _open(copy)


def holders(table: Table, text: str) -> set[str]:
    """The files holding a row that matches ``text``, from a full read of the snapshot."""
    view = FileSystemView(table.timeline, table.timeline.load())
    data = view.read_snapshot()
    matching = data.filter(parse_filter(text).bind(data.schema).expression(data.schema))
    out = {
        f"{partition}/{name}" if partition else name
        for partition, name in zip(
            matching.column("_hoodie_partition_path").to_pylist(),
            matching.column("_hoodie_file_name").to_pylist(),
            strict=True,
        )
    }
    assert out <= {f.path for f in view.latest_base_files()}
    return out


def plan_of(table: Table, text: str) -> ScanPlan:
    """The plan of ``text``, checked against the rows: every file holding a matching row is
    kept, and the credits add up to the files skipped."""
    plan = load_table(table.base_uri, config=table.config).scan(text).plan()
    kept = {f.path for f in plan.files}
    assert holders(table, text) <= kept, "a file holding a matching row was dropped"
    assert sum(plan.dropped.values()) == plan.total - plan.kept, plan.dropped
    return plan


def test_each_index_is_credited_with_the_files_it_dropped(table: Table) -> None:
    plan = plan_of(table, "city = 'sf' AND fare >= 80")
    assert list(plan.dropped) == [PARTITION_STATS, COLUMN_STATS]
    # la and ny (8 files) go whole; of sf's four files, those whose fares end below 80
    sf_matching = len(holders(table, "city = 'sf' AND fare >= 80"))
    assert plan.dropped == {PARTITION_STATS: 8, COLUMN_STATS: 4 - sf_matching}
    assert plan.kept == sf_matching == 2
    no_key = "the filter has no = or IN on the record key: uuid, or _hoodie_record_key"
    assert plan.unused[RECORD_INDEX] == plan.unused[BLOOM_FILTERS] == no_key
    assert plan.unused[RIDER] == "the filter asks for no value of rider (= or IN)"


def test_a_secondary_index_gets_its_own_credit_not_column_stats(table: Table) -> None:
    plan = plan_of(table, "rider = 'r7'")
    expected = holders(table, "rider = 'r7'")
    assert plan.dropped == {RIDER: 12 - len(expected)}
    assert {f.path for f in plan.files} == expected
    assert plan.unused[COLUMN_STATS] == plan.unused[PARTITION_STATS] == "it holds no stats of rider"
    text = load_table(table.base_uri, config=table.config).scan("rider = 'r7'").explain()
    assert f"{RIDER}: dropped {12 - len(expected)} file(s)" in text


@pytest.mark.parametrize(
    "text",
    [
        "uuid = 'k0042'",
        "_hoodie_record_key = 'k0042'",
        "uuid IN ('k0042', 'k0100') AND _hoodie_record_key = 'k0042'",
        "uuid = 'k0042' AND fare > 0",
        "uuid = 'k0042' OR uuid = 'k0042'",
    ],
)
def test_a_record_key_filter_is_answered_by_record_index(table: Table, text: str) -> None:
    plan = plan_of(table, text)
    assert {f.path for f in plan.files} == holders(table, text)
    assert plan.kept == 1 and plan.dropped[RECORD_INDEX] == 11
    assert plan.unused[BLOOM_FILTERS] == "record_index answered the record keys exactly"
    rows = load_table(table.base_uri, config=table.config).scan(text, ("uuid",)).to_arrow()
    assert rows.column("uuid").to_pylist() == ["k0042"]


def test_an_in_list_of_keys_keeps_exactly_their_files(table: Table) -> None:
    plan = plan_of(table, "uuid IN ('k0042', 'k0100', 'nope')")
    assert {f.path for f in plan.files} == holders(table, "uuid IN ('k0042', 'k0100')")
    assert plan.kept == 2 and plan.dropped == {RECORD_INDEX: 10}


def test_without_record_index_bloom_filters_answer_and_then_nothing(table: Table) -> None:
    AsyncIndexer(table).drop([RIDER, RECORD_INDEX])
    plan = plan_of(table, "uuid = 'k0042'")
    assert plan.dropped == {BLOOM_FILTERS: 11}
    assert plan.unused[RECORD_INDEX] == "not built"
    AsyncIndexer(table).drop([BLOOM_FILTERS])
    plan = plan_of(table, "uuid = 'k0042'")
    assert plan.dropped == {} and plan.kept == 12
    assert plan.unused[BLOOM_FILTERS] == "not built"


def test_an_index_being_built_is_not_used_and_says_so(built: Path, tmp_path: Path) -> None:
    copy = tmp_path / "t"
    shutil.copytree(built, copy)
    table = _open(copy)
    AsyncIndexer(table).drop([RIDER, RECORD_INDEX, COLUMN_STATS])
    AsyncIndexer(table).schedule([RECORD_INDEX, COLUMN_STATS])  # inflight until executed
    plan = plan_of(table, "uuid = 'k0042' AND fare > 1")
    being_built = "being built (inflight): readers use it once it completes"
    assert plan.unused[RECORD_INDEX] == plan.unused[COLUMN_STATS] == being_built
    # partition_stats (of fare and city) is used and drops nothing: every partition has fares > 1
    assert plan.dropped == {PARTITION_STATS: 0, BLOOM_FILTERS: 11}


def test_a_lost_index_is_not_credited(table: Table) -> None:
    shutil.rmtree(Path(table.base_uri.removeprefix("file://"), INDEX_FOLDER, RECORD_INDEX))
    plan = plan_of(table, "uuid = 'k0042'")
    assert plan.unused[RECORD_INDEX].startswith("lost: ")
    assert plan.dropped == {BLOOM_FILTERS: 11}
    assert plan.unused[RIDER].startswith("it finds records through record_index, which is lost")


def test_instants_an_index_does_not_reflect_keep_their_files(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.indexer.test_foreign_commits import foreign_write

    foreign = foreign_write(table, _rows(200, 203, city="tokyo"), monkeypatch)
    plan = plan_of(table, "uuid = 'k0042'")
    # record_index answers outside tokyo, which the commit it lacks wrote to; there the bloom
    # filters (which lack it too) cannot drop the file that commit wrote
    assert plan.total == 13
    assert plan.dropped == {RECORD_INDEX: 11, BLOOM_FILTERS: 0}
    assert plan.unapplied[RECORD_INDEX] == plan.unapplied[BLOOM_FILTERS] == (foreign,)
    assert plan.unused[PARTITION_STATS] == f"it does not reflect {foreign} yet"
    sf = plan_of(table, "fare >= 200")
    assert sf.unapplied[COLUMN_STATS] == (foreign,)
    assert sf.kept == 1 and sf.dropped == {COLUMN_STATS: 12}
    rows = load_table(table.base_uri, config=table.config).scan("fare >= 200").to_arrow()
    assert rows.num_rows == 3


def test_key_fields_of_a_complex_key_are_answered_by_record_index(tmp_path: Path) -> None:
    lock = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    config = Config.resolve(explicit={"indexer.lock.url": lock})
    table = Table.create(str(tmp_path / "t"), "t", ["order", "line"], ["city"], config=config)
    data = pa.table(
        {
            "order": pa.array([i // 4 for i in range(120)], pa.int64()),
            "line": pa.array([i % 4 + 1 for i in range(120)], pa.int32()),
            "city": [CITIES[i % 3] for i in range(120)],
            "qty": [float(i) for i in range(120)],
        }
    )
    client = WriteClient(table)
    for part in range(4):
        client.insert(data.slice(part * 30, 30))
    initialize(table, [FILES, BLOOM_FILTERS, RECORD_INDEX])
    text = "order = 17 AND line = 2"
    plan = plan_of(table, text)
    assert plan.kept == 1 and plan.dropped == {RECORD_INDEX: plan.total - 1}
    assert plan_of(table, "order = 17").unused[RECORD_INDEX].startswith("the filter has no")
    both = plan_of(table, "order IN (17, 29) AND line IN (2, 3)")
    assert {f.path for f in both.files} == holders(table, "order IN (17, 29) AND line IN (2, 3)")
    rows = load_table(table.base_uri, config=table.config).scan(text).to_arrow().to_pylist()
    assert [(r["order"], r["line"], r["_hoodie_record_key"]) for r in rows] == [
        (17, 2, "order:17,line:2")
    ]


def test_a_table_without_meta_fields_is_answered_by_its_key_fields(tmp_path: Path) -> None:
    """hudi-rs's sample of Hudi's virtual keys: the files store no record key, so only the key
    field names one."""
    from tests.indexer.test_hudi_rs_samples import DATA, unpack

    base = unpack(DATA / "cow" / "v6_simplekeygen_hivestyle_no_metafields.zip", tmp_path)
    table = _open(base)
    initialize(table, [FILES, BLOOM_FILTERS, RECORD_INDEX])
    key = table.table_config.record_key_fields[0]
    files = FileSystemView(table.timeline, table.timeline.load()).latest_base_files()
    value = FileSystemView(table.timeline, table.timeline.load()).read_snapshot([key])[0][0]
    text = f"{key} = {value.as_py()!r}" if isinstance(value.as_py(), str) else f"{key} = {value}"
    plan = load_table(table.base_uri, config=table.config).scan(text).plan()
    assert plan.kept == 1 and plan.dropped == {RECORD_INDEX: len(files) - 1}
    rows = load_table(table.base_uri, config=table.config).scan(text, (key,)).to_arrow()
    assert rows.column(key).to_pylist() == [value.as_py()]


def test_an_unreadable_state_file_is_named_as_the_reason(table: Table) -> None:
    state = Path(table.base_uri.removeprefix("file://"), INDEX_FOLDER, "partitions.json")
    state.write_text("{ not json")
    plan = plan_of(table, "city = 'sf'")
    assert plan.dropped == {} and plan.kept == 12
    assert plan.unused[PARTITION_STATS].startswith("the index's state file cannot be read: ")
    assert "partitions.json" in plan.unused[COLUMN_STATS]


#: per index, a filter it answers on the built table
ANSWERS = {
    PARTITION_STATS: "city = 'sf'",
    COLUMN_STATS: "fare >= 80",
    RECORD_INDEX: "uuid = 'k0042'",
    RIDER: "rider = 'r7'",
    BLOOM_FILTERS: "uuid = 'k0042'",
}


@pytest.mark.parametrize("index", list(ANSWERS))
def test_every_index_says_why_when_lost_or_being_built(
    built: Path, tmp_path: Path, index: str
) -> None:
    """For each index type: used, it is credited; lost, or dropped and being built again, it is
    credited with nothing and says why (bloom_filters answers once record_index is gone)."""
    copies = []
    for name in ("used", "lost", "building"):
        shutil.copytree(built, tmp_path / name / "t")
        copies.append(_open(tmp_path / name / "t"))
    used, lost, building = copies
    if index == BLOOM_FILTERS:
        for table in copies:
            AsyncIndexer(table).drop([RIDER, RECORD_INDEX])
    text = ANSWERS[index]
    assert plan_of(used, text).dropped[index] > 0
    shutil.rmtree(Path(lost.base_uri.removeprefix("file://"), INDEX_FOLDER, index))
    plan = plan_of(lost, text)
    assert index not in plan.dropped and plan.unused[index].startswith("lost: ")
    AsyncIndexer(building).drop([RIDER, index] if index == RECORD_INDEX else [index])
    kinds, columns = (["secondary_index"], ["rider"]) if index == RIDER else ([index], [])
    AsyncIndexer(building).schedule(kinds, columns)  # inflight until executed
    plan = plan_of(building, text)
    assert index not in plan.dropped
    assert plan.unused[index] == "being built (inflight): readers use it once it completes"


def test_bloom_filters_probe_only_the_files_still_kept(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bloom stage reads the filters of the files the stages before it kept: probing every
    file's filter for one key took 0.5 s at 2,000 files (a copy of every filter), for a file
    that column_stats had already chosen (here: three files of twelve)."""
    import metadata_table.bloom as bloom

    AsyncIndexer(table).drop([RIDER, RECORD_INDEX])
    probed: list[int] = []
    real = bloom._probe_in_place

    def spy(words: Any, starts: Any, blocks: int, values: Any) -> Any:
        probed.append(len(starts))
        return real(words, starts, blocks, values)

    monkeypatch.setattr(bloom, "_probe_in_place", spy)
    plan = plan_of(table, "uuid = 'k0042' AND fare >= 40 AND fare < 50")
    # fares 40 to 49 are one insert's: its three files (one a city) kept by column_stats
    assert plan.dropped == {PARTITION_STATS: 0, COLUMN_STATS: 9, BLOOM_FILTERS: 2}
    assert sum(probed) == 3  # the filters of those three files alone
    probed.clear()
    assert plan_of(table, "uuid = 'k0042'").dropped == {BLOOM_FILTERS: 11}
    assert sum(probed) == 12


def test_a_filtered_plan_makes_no_object_per_file_of_the_table(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan counts the snapshot's files from the pruning's listing: listing them as objects
    first cost 0.39 s of a point lookup's first plan at 100,000 files."""
    plan = plan_of(table, "uuid = 'k0042'")

    def every_file(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the plan made an object of every file")

    monkeypatch.setattr(FileSystemView, "latest_base_files", every_file)
    again = load_table(table.base_uri, config=table.config).scan("uuid = 'k0042'").plan()
    assert again.total == plan.total == 12 and again.files == plan.files and again.kept == 1

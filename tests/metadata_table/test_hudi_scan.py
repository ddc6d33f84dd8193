"""Scans against Apache Hudi 0.15's own reader: on tables Hudi writes with each key generator and
partition style (checked on the tables tests/indexer/test_hudi_tables.py makes, through the
helpers here), and on a table ours writes, ``scan(filter).to_arrow()`` returns the rows Hudi's
Spark snapshot read returns with the same filter; time travel and incremental reads return what
Hudi's ``as.of.instant`` and incremental query return, instant by instant. Filters are drawn at
random (a seeded generator per table), so every run checks the same ones."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from indexer.indexer import AsyncIndexer, IndexerOptions
from metadata_table import load_table
from metadata_table.layout import PARTITIONS
from metadata_table.read.filters import parse_filter
from timeline import Table
from timeline.config import Config
from writer.client import WriteClient

from ..hudi_peer.peer import HudiPeer, HudiTable
from ..hudi_peer.rows import make_rows
from ..hudi_peer.tables import HUDI_READER_FAILS
from ..writer.test_failed_writes import hudi_rs
from .test_scan import holds

pytestmark = pytest.mark.hudi

COLUMNS = ("_hoodie_record_key", "id", "name", "fare")


def _filters(seed: str, count: int = 4) -> list[str]:
    """Filters over id, name and fare that SQL (Spark) and our language read alike."""
    rng = random.Random(seed)
    templates = [
        lambda: f"fare > {rng.randint(0, 30)}",
        lambda: f"fare <= {rng.randint(0, 30)} OR name = 'n{rng.randint(0, 25)}'",
        lambda: f"NOT (id IN ({rng.randint(0, 25)}, {rng.randint(0, 25)}))",
        lambda: f"name != 'n{rng.randint(0, 25)}' AND fare >= {rng.randint(0, 30)}.5",
        lambda: f"id BETWEEN {rng.randint(0, 10)} AND {rng.randint(10, 25)}",
        lambda: f"name IS NOT NULL AND NOT fare < {rng.randint(0, 30)}",
        lambda: f"id NOT BETWEEN 3 AND {rng.randint(4, 20)} AND name IN ('n1', 'n4', 'n21')",
    ]
    return [rng.choice(templates)() for _ in range(count)]


def _by_key(
    rows: list[dict[str, Any]], columns: tuple[str, ...] = COLUMNS
) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in columns) for r in rows)


def _ours(table: Table, text: str, columns: tuple[str, ...] = COLUMNS, **kw: Any) -> list[Any]:
    scan = load_table(table.base_uri, config=table.config).scan(text, columns, **kw)
    return _by_key(scan.to_arrow().to_pylist(), columns)


def assert_scans_match_hudi(hudi: HudiPeer, hudi_table: HudiTable, table: Table) -> None:
    """For seeded random filters, our scan of a table Hudi wrote (and we indexed) returns the
    rows Hudi's Spark reader returns (hudi-rs's, filtered row by row, where Hudi 0.15 cannot
    read the table); for a table of four commits and more, time travel to each and incremental
    reads between them too. Called on the tables tests/indexer/test_hudi_tables.py makes."""
    style = Path(hudi_table.path).name
    for text in _filters(style):
        if style in HUDI_READER_FAILS:  # Hudi 0.15 cannot read it (apache/hudi#10678)
            expr = parse_filter(text)
            theirs = _by_key([r for r in hudi_rs(table.base_uri, {}) if holds(expr, r)])
        else:
            read = hudi.read(hudi_table, columns=COLUMNS, filter=text, metadata=False)
            theirs = _by_key(read.to_pylist())
        assert _ours(table, text) == theirs, text


def assert_history_matches_hudi(hudi: HudiPeer, hudi_table: HudiTable, table: Table) -> None:
    """Time travel to each completed commit, and incremental reads between them, return what
    Hudi's ``as.of.instant`` and incremental query return."""
    instants = table.timeline.load().write_timeline().completed().timestamps
    assert len(instants) >= 4
    text = "fare > 5 OR name = 'n1'"
    for instant in instants:
        theirs = hudi.read(
            hudi_table,
            columns=COLUMNS,
            filter=text,
            metadata=False,
            options={"as.of.instant": instant},
        )
        assert _ours(table, text, as_of=instant) == _by_key(theirs.to_pylist()), instant
    trips = load_table(table.base_uri, config=table.config)
    for begin, end in [(instants[0], None), (instants[0], instants[2]), (instants[1], instants[3])]:
        options = {"hoodie.datasource.read.begin.instanttime": begin}
        if end:
            options["hoodie.datasource.read.end.instanttime"] = end
        theirs = hudi.read(
            hudi_table, columns=COLUMNS, query_type="incremental", metadata=False, options=options
        )
        ours = trips.changes(begin, end, selected_fields=COLUMNS).to_arrow()
        assert _by_key(ours.to_pylist()) == _by_key(theirs.to_pylist()), (begin, end)


def test_scans_of_our_tables_return_hudis_rows(hudi: HudiPeer, tmp_path: Path) -> None:
    """A table our writer writes (the rows Hudi's tables hold), read by Hudi's reader with the
    same filters."""
    config = Config.resolve(explicit={"indexer.lock.url": f"sqlite:///{tmp_path / 'locks.db'}"})
    table = Table.create(str(tmp_path / "ours"), "ours", ["id"], ["part"], "ts", config=config)
    client = WriteClient(table)
    client.insert(make_rows(range(12)))
    AsyncIndexer(table, IndexerOptions(engine="local")).run(list(PARTITIONS))
    client.upsert(make_rows([1, 4, 7], ts=2, fare_offset=50.0))
    client.insert(make_rows(range(20, 26)))
    client.delete(make_rows([3], ts=3))
    hudi_table = HudiTable(table.base_uri, name="ours", metadata=False)
    for text in _filters("ours", 6):
        read = hudi.read(hudi_table, columns=COLUMNS, filter=text, metadata=False)
        assert _ours(table, text) == _by_key(read.to_pylist()), text

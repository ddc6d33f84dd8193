"""TPC-H data as tpchgen-cli writes it (string_view columns, decimals, dates), as a new user
brings it: written through indexer-write (orders) and WriteClient (lineitem, a complex key),
indexed with every index type, and queried on the key fields, a secondary-index column, dates,
decimals and partition values. Every query returns exactly DuckDB's rows over the same Parquet
files, and its plan credits the index that dropped the files."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from metadata_table import load_table
from metadata_table.layout import COLUMN_STATS, PARTITION_STATS, RECORD_INDEX
from timeline import Table
from timeline.config import Config
from writer.client import WriteClient

PARTS = 4
SCALE = "0.01"  # 15,000 orders, 60,175 lines; by hand at 1 (see the closing notes)


@pytest.fixture(scope="module")
def tpch(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("tpch")
    generator = shutil.which("tpchgen-cli", path=str(Path(sys.executable).parent))
    assert generator, "tpchgen-cli is a test extra: `make test` installs it"
    subprocess.run(
        [
            generator,
            "parquet",
            "-s",
            SCALE,
            "--tables=orders,lineitem",
            f"--parts={PARTS}",
            f"--output-dir={root / 'data'}",
        ],
        check=True,
        capture_output=True,
    )
    lock = f"sqlite:///{root / 'locks.sqlite'}"
    # files of at most 2,000 records: several per partition, as a larger table has them
    settings = {"indexer.lock.url": lock, "indexer.write.max.records.per.file": "2000"}
    config = Config.resolve(explicit=settings)
    conf = [arg for key, value in settings.items() for arg in ("--conf", f"{key}={value}")]

    def cli(module: str, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", module, *args, *conf], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    orders = str(root / "orders")
    cli(
        "timeline",
        "init",
        orders,
        "--table-name",
        "orders",
        "--record-key",
        "o_orderkey",
        "--partition-field",
        "o_orderpriority",
    )
    for part in sorted((root / "data" / "orders").iterdir()):
        cli("writer", orders, "--input", str(part), "--operation", "insert")
    lineitem = Table.create(
        str(root / "lineitem"),
        "lineitem",
        ["l_orderkey", "l_linenumber"],
        ["l_shipmode"],
        config=config,
    )
    with WriteClient(lineitem) as client:
        for part in sorted((root / "data" / "lineitem").iterdir()):
            client.insert(pq.read_table(part))  # as it comes: string_view columns
    for base, secondary in ((orders, "o_custkey"), (lineitem.base_uri, "l_partkey")):
        cli("indexer", "run", base, "--index-types", "column_stats,bloom_filters,partition_stats")
        cli(
            "indexer",
            "run",
            base,
            "--index-types",
            "record_index,secondary_index",
            "--columns",
            secondary,
        )
        cli("indexer", "validate", base)
    return {"root": root, "config": config, "orders": orders, "lineitem": lineitem.base_uri}


def _same_rows(tpch: dict[str, Any], name: str, where: str) -> Any:
    """The scan's rows of ``where`` against DuckDB's over the generated files; its plan."""
    files = sorted(str(p) for p in (tpch["root"] / "data" / name).iterdir())
    expected = duckdb.sql(f"SELECT * FROM read_parquet({files!r}) WHERE {where}").to_arrow_table()
    scan = load_table(tpch[name], config=tpch["config"]).scan(where, tuple(expected.column_names))
    got = scan.to_arrow()

    def rows(table: pa.Table) -> list[tuple[Any, ...]]:
        return sorted(tuple(r.values()) for r in table.to_pylist())

    assert rows(got) == rows(expected), where
    plan = scan.plan()
    assert sum(plan.dropped.values()) == plan.total - plan.kept, plan.dropped
    return plan, expected.num_rows


@pytest.mark.parametrize(
    ("name", "where", "credited"),
    [
        ("orders", "o_orderkey = 4001", RECORD_INDEX),
        ("orders", "o_orderkey IN (1, 4001, 14982)", RECORD_INDEX),
        ("orders", "o_custkey = 370", "secondary_index_o_custkey"),
        ("orders", "o_orderpriority = '1-URGENT' AND o_totalprice > 300000", PARTITION_STATS),
        ("orders", "o_orderdate BETWEEN '1995-01-01' AND '1995-01-31'", None),
        ("orders", "o_totalprice > 400000.50", None),
        ("lineitem", "l_orderkey = 4001 AND l_linenumber = 1", RECORD_INDEX),
        ("lineitem", "l_shipmode = 'AIR' AND l_orderkey < 100", PARTITION_STATS),
        ("lineitem", "l_partkey = 1000", "secondary_index_l_partkey"),
        ("lineitem", "l_shipdate BETWEEN DATE '1998-11-01' AND DATE '1998-12-31'", None),
        ("lineitem", "l_quantity > 49.5 AND l_discount = 0.10", None),
        ("lineitem", "l_orderkey > 14900 AND l_returnflag = 'R'", COLUMN_STATS),
    ],
)
def test_rows_equal_duckdbs_and_the_plan_credits_the_index_that_dropped_files(
    tpch: dict[str, Any], name: str, where: str, credited: str | None
) -> None:
    plan, found = _same_rows(tpch, name, where)
    assert found > 0, f"{where}: the query should match some rows"
    if credited is not None:
        assert plan.dropped.get(credited, 0) > 0, (where, plan.dropped, plan.unused)

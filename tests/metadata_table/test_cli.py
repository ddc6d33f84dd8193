"""`python -m metadata_table`: dump, prune, lookup, init."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from timeline import Table
from timeline.config import Config
from writer.client import WriteClient

from .test_metadata_table import keys, rows


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "metadata_table", *args], capture_output=True, text=True, timeout=120
    )


def test_init_dump_prune(tmp_path: Path) -> None:
    lock = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    conf = ["--conf", f"indexer.lock.url={lock}"]
    base = str(tmp_path / "t")
    table = Table.create(
        base,
        "trips",
        ["uuid"],
        ["city"],
        "ts",
        config=Config.resolve(explicit={"indexer.lock.url": lock}),
    )
    client = WriteClient(table)
    client.insert(rows(keys(0, 30), city="sf"))
    client.insert(rows(keys(100, 130), city="la"))
    pruned = _run("prune", base, "--filter", "fare > 100", *conf)
    assert pruned.returncode == 0 and "column_stats: not used (not built)" in pruned.stderr
    built = _run(
        "init", base, "--partitions", "files,column_stats", "--columns", "fare,city", *conf
    )
    assert built.returncode == 0 and "built files, column_stats" in built.stdout
    dumped = _run("dump", base, "column_stats", "--format", "jsonl", *conf)
    assert dumped.returncode == 0
    records = [json.loads(line) for line in dumped.stdout.splitlines()]
    assert {r["column_name"] for r in records} == {"fare", "city"}
    fare = {
        r["partition"]: (r["min_value"], r["max_value"])
        for r in records
        if r["column_name"] == "fare"
    }
    assert fare == {"sf": (0.0, 29.0), "la": (100.0, 129.0)}
    files = _run("dump", base, "files", *conf)
    assert files.returncode == 0 and "files (completed): 2 records" in files.stdout
    result = _run("prune", base, "--filter", "fare > 100 AND city = 'la'", "--json", *conf)
    body = json.loads(result.stdout)
    assert (body["total"], body["pruned"], body["used_index"]) == (2, 1, True)
    assert body["candidates"][0].startswith("la/")
    text = _run("prune", base, "--filter", "fare < 0", *conf)
    assert text.stdout == "" and "0 of 2 files may match; 2 pruned" in text.stderr

    everything = _run("lookup", base, "--keys", "k0105,nope", "--json", *conf)
    assert json.loads(everything.stdout)["indexes"] == []  # no key index yet: every file
    assert len(json.loads(everything.stdout)["keys"]["nope"]) == 2
    assert _run("init", base, "--partitions", "bloom_filters", *conf).returncode == 0
    found = json.loads(_run("lookup", base, "--keys", "k0105,nope", "--json", *conf).stdout)
    assert found["indexes"] == ["bloom_filters"]
    assert [p.split("/")[0] for p in found["keys"]["k0105"]] == ["la"]
    assert found["keys"]["nope"] == []
    shown = _run("lookup", base, "--keys", "k0105", "--partition", "sf", *conf)
    assert shown.stdout == "k0105: (no file)\n" and "answered by bloom_filters" in shown.stderr


def test_errors(tmp_path: Path) -> None:
    base = str(tmp_path / "t")
    Table.create(
        base, "trips", ["uuid"], config=Config.resolve(explicit={"indexer.lock.url": "inprocess"})
    )
    bad = _run("prune", base, "--filter", "fare >> 3")
    assert bad.returncode == 1 and "filter 'fare >> 3'" in bad.stderr
    unknown = _run("dump", base, "nope")
    assert unknown.returncode == 1 and "unknown metadata partition 'nope'" in unknown.stderr
    assert _run("lookup", base, "--keys", ",").returncode == 1  # no key named
    missing = _run("dump", str(tmp_path / "none"), "files")
    assert missing.returncode == 1 and "no Hudi table" in missing.stderr


def test_lookup_and_dump_through_the_record_and_secondary_indexes(tmp_path: Path) -> None:
    lock = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    conf = ["--conf", f"indexer.lock.url={lock}"]
    base = str(tmp_path / "t")
    config = Config.resolve(explicit={"indexer.lock.url": lock})
    table = Table.create(base, "trips", ["uuid"], ["city"], "ts", config=config)
    client = WriteClient(table)
    client.insert(rows(keys(0, 30)))
    client.insert(rows(keys(30, 60)))
    # without the record index: the files that may hold the keys
    before = json.loads(_run("lookup", base, "--keys", "k0007", "--json", *conf).stdout)
    assert before["exact"] is False and len(before["keys"]["k0007"]) == 6
    built = _run("init", base, "--partitions", "record_index,secondary_index_fare", *conf)
    assert built.returncode == 0, built.stderr
    found = json.loads(_run("lookup", base, "--keys", "k0007,k0999", "--json", *conf).stdout)
    assert found["exact"] is True and found["indexes"] == ["record_index"]
    [path] = found["keys"]["k0007"]
    where = found["locations"]["k0007"]
    assert path.startswith("la/") and path.split("/")[1].startswith(where["file_id"])
    assert found["keys"]["k0999"] == [] and "k0999" not in found["locations"]
    text = _run("lookup", base, "--keys", "k0007", *conf)
    assert "answered by record_index (exact)" in text.stderr
    by_value = json.loads(
        _run("lookup", base, "--column", "fare", "--values", "7,42.0,1000", "--json", *conf).stdout
    )
    assert by_value["exact"] is True
    assert by_value["indexes"] == ["secondary_index_fare", "record_index"]
    assert {v: sorted(r) for v, r in by_value["values"].items()} == {
        "7": ["k0007"],
        "42.0": ["k0042"],
        "1000": [],
    }
    unindexed = _run("lookup", base, "--column", "ts", "--values", "1", *conf)
    assert unindexed.returncode == 0 and "(files that may hold them)" in unindexed.stderr
    bad = _run("lookup", base, "--column", "fare", "--values", "lots", *conf)
    assert bad.returncode != 0 and "fare" in bad.stderr and "lots" in bad.stderr
    dumped = _run("dump", base, "record_index", "--format", "jsonl", *conf)
    lines = [json.loads(line) for line in dumped.stdout.splitlines()]
    assert len(lines) == 60
    assert set(lines[0]) == {"record_key", "partition_path", "file_id", "instant"}
    assert {line["record_key"]: line["partition_path"] for line in lines}["k0007"] == "la"
    assert all(line["instant"] for line in lines)


def test_lookup_takes_keys_of_any_key_generator(tmp_path: Path) -> None:
    """A complex key holds commas: --key takes one whole, --keys-from one a line (stdin too),
    --where makes keys from the key fields; --keys, which splits at commas, says so."""
    import pyarrow as pa

    from metadata_table.maintenance import initialize

    lock = f"sqlite:///{tmp_path / 'locks.sqlite'}"
    conf = ["--conf", f"indexer.lock.url={lock}"]
    base = str(tmp_path / "t")
    config = Config.resolve(explicit={"indexer.lock.url": lock})
    table = Table.create(base, "lines", ["order", "line"], ["mode"], config=config)
    WriteClient(table).insert(
        pa.table(
            {
                "order": pa.array([i // 4 for i in range(40)], pa.int64()),
                "line": pa.array([i % 4 + 1 for i in range(40)], pa.int32()),
                "mode": [["AIR", "RAIL"][i % 2] for i in range(40)],
            }
        )
    )
    initialize(table, ["files", "record_index"])
    key = "order:7,line:2"

    def found(*args: str, stdin: str | None = None) -> dict[str, list[str]]:
        done = subprocess.run(
            [sys.executable, "-m", "metadata_table", "lookup", base, *args, "--json", *conf],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        answer: dict[str, list[str]] = json.loads(done.stdout)["keys"]
        return answer

    by_key = found("--key", key, "--key", "order:99,line:1")
    assert len(by_key[key]) == 1 and by_key["order:99,line:1"] == []
    assert by_key[key][0].startswith("RAIL/")  # row 29: order 7, line 2, mode RAIL
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text(f"{key}\n\norder:8,line:1\n")
    from_file = found("--keys-from", str(keys_file))
    assert list(from_file) == [key, "order:8,line:1"] and from_file[key] == by_key[key]
    assert found("--keys-from", "-", stdin=f"{key}\n") == {key: by_key[key]}
    where = found("--where", "order = 7 AND line IN (2, 3)")
    assert sorted(where) == [key, "order:7,line:3"] and where[key] == by_key[key]
    split = _run("lookup", base, "--keys", key, *conf)
    assert split.returncode == 1 and split.stdout == ""
    assert "record keys hold commas" in split.stderr and "--key" in split.stderr
    assert len(split.stderr.strip().splitlines()) == 1
    partial = _run("lookup", base, "--where", "order = 7", *conf)
    assert partial.returncode == 1 and "order and line" in partial.stderr
    missing = _run("lookup", base, "--keys-from", str(tmp_path / "nope.txt"), *conf)
    assert missing.returncode == 1 and "nope.txt" in missing.stderr

"""The command family as a whole: every command on a table takes the same flags (``--config``,
``--conf``, ``--storage-option``, ``--json``, ``-v``), reads the one config file, and answers JSON
with lowercase states."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from indexer.cli import build_parser as indexer_parser
from metadata_table.cli import build_parser as metadata_parser
from timeline import Table
from timeline.cli import build_parser as table_parser
from timeline.cli import spark_conf_from_args, spark_master_from_args
from timeline.config import Config
from writer.cli import build_parser as write_parser

from .metadata_table.test_metadata_table import keys, rows

SHARED = {"--config", "--conf", "--storage-option", "--json", "-v"}


def _commands() -> list[tuple[str, argparse.ArgumentParser]]:
    found: list[tuple[str, argparse.ArgumentParser]] = [("indexer-write", write_parser())]
    for script, parser in (
        ("indexer", indexer_parser()),
        ("indexer-table", table_parser()),
        ("indexer-metadata", metadata_parser()),
    ):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                found += [(f"{script} {name}", sub) for name, sub in action.choices.items()]
    return found


def test_every_command_on_a_table_takes_the_same_flags() -> None:
    on_a_table = 0
    for name, parser in _commands():
        dests = {a.dest for a in parser._actions}
        options = {o for a in parser._actions for o in a.option_strings}
        if "base" not in dests:
            continue
        on_a_table += 1
        if name == "indexer request":  # writes to the daemon's store: --config is required
            assert {"--config", "--json", "-v"} <= options
            continue
        assert options >= SHARED, f"{name} lacks {sorted(SHARED - options)}"
    assert on_a_table >= 16


def _run(module: str, *args: str, env: dict[str, str] | None = None) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    return done


def _write_config(path: Path, base: Path, lock: Path, extra: str = "") -> Path:
    path.write_text(
        f'[spark]\nmaster = "local[1]"\nconf = {{ "spark.ui.enabled" = "false" }}\n\n'
        f'[[tables]]\nbase = "{base}"\nlock_url = "sqlite:///{lock}"\n{extra}'
    )
    return path


def test_the_config_file_applies_to_every_command_below_env_and_conf(tmp_path: Path) -> None:
    base = tmp_path / "t"
    from_file = tmp_path / "from-file.sqlite"
    config = _write_config(tmp_path / "service.toml", base, from_file)
    created = _run(
        "timeline",
        "init",
        str(base),
        "--table-name",
        "t",
        "--record-key",
        "uuid",
        "--partition-field",
        "city",
        "--precombine-field",
        "ts",
        "--config",
        str(config),
        "--json",
    )
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["created"] == "t"
    batch = tmp_path / "batch.parquet"
    pq.write_table(rows(keys(0, 10)), batch)

    # the file's lock_url is the table's lock
    wrote = _run(
        "writer", str(base), "--input", str(batch), "--operation", "insert",
        "--config", str(config), "--json",
    )  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr
    outcome = json.loads(wrote.stdout)
    assert outcome["operation"] == "insert" and outcome["inserts"] == 10
    assert outcome["files"] == 3 and outcome["updates"] == outcome["deletes"] == 0
    assert from_file.exists()
    from_file.unlink()

    # the environment overrides the file, and --conf overrides both
    from_env = tmp_path / "from-env.sqlite"
    env = {"INDEXER_LOCK_URL": f"sqlite:///{from_env}"}
    upsert = ["--input", str(batch), "--operation", "upsert", "--config", str(config)]
    assert _run("writer", str(base), *upsert, env=env).returncode == 0
    assert from_env.exists() and not from_file.exists()
    explicit = tmp_path / "explicit.sqlite"
    conf = ["--conf", f"indexer.lock.url=sqlite:///{explicit}"]
    assert _run("writer", str(base), *upsert, *conf, env=env).returncode == 0
    assert explicit.exists() and not from_file.exists()

    # a table the file does not list, a key it does not know: one line naming them
    other = _run("timeline", "show", str(tmp_path / "other"), "--config", str(config))
    assert other.returncode == 1
    assert (
        other.stderr.strip()
        == f"error: config --config: {tmp_path / 'other'} is not a table of {config}"
    )
    bad = _write_config(tmp_path / "bad.toml", base, from_file, 'conf = { "indexer.nope" = "1" }\n')
    refused = _run("metadata_table", "dump", str(base), "files", "--config", str(bad))
    assert refused.returncode == 1 and "indexer.nope" in refused.stderr


def test_the_config_files_spark_section_is_the_default_for_spark_commands(tmp_path: Path) -> None:
    config = _write_config(tmp_path / "c.toml", tmp_path / "t", tmp_path / "l.sqlite")
    parser = indexer_parser()
    args = parser.parse_args(["run", str(tmp_path / "t"), "--index-types", "files"])
    args.config = str(config)
    assert spark_master_from_args(args) == "local[1]"
    assert spark_conf_from_args(args) == {"spark.ui.enabled": "false"}
    args = parser.parse_args(
        ["run", str(tmp_path / "t"), "--index-types", "files", "--config", str(config),
         "--spark-master", "local[2]", "--spark-conf", "spark.ui.enabled=true"]
    )  # fmt: skip
    assert spark_master_from_args(args) == "local[2]"
    assert spark_conf_from_args(args) == {"spark.ui.enabled": "true"}


def _table(base: Path) -> tuple[Table, list[str]]:
    lock = f"sqlite:///{base.parent / 'locks.sqlite'}"
    config = Config.resolve(explicit={"indexer.lock.url": lock})
    table = Table.create(str(base), "t", ["uuid"], ["city"], "ts", config=config)
    return table, ["--conf", f"indexer.lock.url={lock}"]


def _files(table: Table) -> list[Any]:
    from timeline.fs_view import FileSystemView

    return FileSystemView(table.timeline, table.timeline.load()).latest_base_files()


def test_commands_without_spark_answer_json_with_lowercase_states(tmp_path: Path) -> None:
    from writer.client import WriteClient

    table, lock = _table(tmp_path / "t")
    WriteClient(table).insert(rows(keys(0, 30)))
    base = table.base_uri

    def as_json(module: str, *args: str) -> Any:
        done = _run(module, *args, "--json", *lock)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        return json.loads(done.stdout)

    built = as_json("metadata_table", "init", base, "--partitions", "files,column_stats")
    assert built == {"built": ["files", "column_stats"]}
    assert as_json("metadata_table", "init", base, "--partitions", "files") == {"built": []}
    dumped = as_json("metadata_table", "dump", base, "files")
    assert (dumped["partition"], dumped["state"]) == ("files", "completed")
    assert sorted(r["partition"] for r in dumped["records"] if r["file_name"]) == sorted(
        f.partition_path for f in _files(table)
    )
    cleaned = as_json("timeline", "clean", base)
    assert (cleaned["rolled_back"], cleaned["pending"], cleaned["cleaned"]) == ([], [], [])
    assert cleaned["policy"].startswith("KEEP_LATEST_COMMITS (hoodie.cleaner.commits.retained=10")
    assert as_json("indexer", "migrate", base)["migrated"] is False

    # two more commits give each file group logs to merge
    WriteClient(table).upsert(rows(keys(0, 5), ts=2))
    WriteClient(table).upsert(rows(keys(5, 10), ts=2))
    compacted = as_json("indexer", "compact", base)
    assert sorted(compacted["compacted"]) == ["column_stats", "files"]
    assert compacted["skipped"] == []
    again = as_json("indexer", "compact", base, "--index-types", "files")
    assert (again["compacted"], again["skipped"], again["removed_files"]) == ({}, ["files"], 0)
    status = as_json("indexer", "status", base)
    assert set(status["partitions"].values()) == {"completed"}
    # storage by kind, and what the services last did (none cleaned: one version per group)
    files = sum(1 for p in Path(base).rglob("*") if p.is_file())
    assert sum(u["files"] for u in status["storage"].values()) == files
    from timeline.fs_view import FileSystemView

    versions = FileSystemView(table.timeline, table.timeline.load()).all_base_files
    assert status["storage"]["data"]["files"] == len(versions) + 3  # and partition metadata
    compaction = status["services"]["compaction"]
    assert compaction["instant"] == max(compacted["compacted"].values())
    for partition, lag in status["lag"].items():
        assert lag["state"] == "completed" and lag["unapplied_instants"] == 0, partition


def test_compaction_reports_progress_per_file_group(tmp_path: Path) -> None:
    from indexer.indexer import AsyncIndexer, IndexerOptions
    from metadata_table.maintenance import initialize
    from writer.client import WriteClient

    table, _ = _table(tmp_path / "t")
    client = WriteClient(table)
    client.insert(rows(keys(0, 30)))
    initialize(table, ["files", "column_stats", "bloom_filters"])
    client.upsert(rows(keys(0, 5), ts=2))
    calls: list[tuple[str, int, int]] = []
    options = IndexerOptions(progress=lambda step, done, total: calls.append((step, done, total)))
    compacted, skipped = AsyncIndexer(table, options).compact()
    assert sorted(compacted) == ["bloom_filters", "column_stats", "files"] and skipped == []
    total = 1 + 2 + 4  # the default file groups of files, column_stats, bloom_filters
    assert {step for step, _, _ in calls} == {"compact"}
    assert {t for _, _, t in calls} == {total}
    done = [d for _, d, _ in calls]
    assert done == sorted(done) and done[-1] == total and set(range(1, total + 1)) <= set(done)


def test_output_commands_exit_0_quietly_when_their_reader_closes_the_pipe(
    tmp_path: Path,
) -> None:
    from writer.client import WriteClient

    table, lock = _table(tmp_path / "t")
    WriteClient(table).insert(rows(keys(0, 3000)))  # about 400 KB of JSON: more than a pipe holds
    python = sys.executable
    for module, args in (
        ("metadata_table", ["query", table.base_uri, "--format", "json"]),
        ("metadata_table", ["query", table.base_uri, "--format", "csv"]),
        ("metadata_table", ["changes", table.base_uri, "--begin", "0" * 17, "--format", "json"]),
    ):
        command = " ".join([python, "-m", module, *args, *lock])
        done = subprocess.run(
            ["bash", "-c", f"set -o pipefail; {command} | head -1"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, (args, done.stderr)
        assert done.stderr == "", (args, done.stderr)
        assert len(done.stdout.splitlines()) == 1


def test_status_names_the_columns_each_index_covers_and_run_refuses_a_column_it_lacks(
    tmp_path: Path,
) -> None:
    from writer.client import WriteClient

    table, lock = _table(tmp_path / "t")
    WriteClient(table).insert(rows(keys(0, 30)))
    base = table.base_uri

    def indexer(*args: str) -> subprocess.CompletedProcess[str]:
        return _run("indexer", *args, base, *lock)

    built = indexer("run", "--index-types", "column_stats,partition_stats", "--columns", "fare,ts")
    assert built.returncode == 0, built.stderr
    built = indexer("run", "--index-types", "record_index,secondary_index", "--columns", "when")
    assert built.returncode == 0, built.stderr
    status = json.loads(indexer("status", "--json").stdout)
    assert status["columns"] == {
        "column_stats": ["fare", "ts"],
        "partition_stats": ["fare", "ts"],
        "secondary_index_when": ["when"],
    }
    text = indexer("status").stdout
    assert text.count("columns: fare, ts") == 2 and "columns: when" in text

    more = indexer("run", "--index-types", "column_stats", "--columns", "city")
    assert more.returncode == 1 and more.stdout == ""
    [line] = more.stderr.strip().splitlines()
    assert "already index fare, ts, not city" in line
    assert f"indexer drop {base} --index-types column_stats,partition_stats" in line
    assert "--columns fare,ts,city" in line
    same = indexer("run", "--index-types", "column_stats", "--columns", "fare")
    assert same.returncode == 0 and same.stdout.startswith("nothing to build")


def test_the_health_checks_name_a_corrupt_commit(tmp_path: Path) -> None:
    """With the latest commit file corrupted, reads and writes fail naming it; validate, sync,
    status and show say so too (they answered ok, in sync and completed)."""
    from metadata_table.maintenance import initialize
    from writer.client import WriteClient

    table, lock = _table(tmp_path / "t")
    client = WriteClient(table)
    client.insert(rows(keys(0, 30)))
    initialize(table, ["files", "column_stats"])
    latest = client.upsert(rows(keys(0, 5), ts=2)).timestamp
    Path(table.storage.uri(f".hoodie/{latest}.commit")).write_text("garbage")
    named = f".hoodie/{latest}.commit: the completed commit cannot be read"
    for module, *args in (
        ("indexer", "validate"),
        ("indexer", "sync"),
        ("indexer", "status"),
        ("timeline", "show"),
    ):
        done = _run(module, *args, table.base_uri, *lock)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert f"problem: {named}" in done.stderr, (args, done.stderr)
        assert "restore the file" in done.stderr
        assert "in sync" not in done.stdout
    shown = json.loads(_run("timeline", "show", table.base_uri, "--json", *lock).stdout)
    assert [r["problem"] is not None for r in shown] == [False, True]
    checked = _run("indexer", "validate", table.base_uri, "--json", *lock)
    assert json.loads(checked.stdout)["problems"][0]["path"] == f".hoodie/{latest}.commit"

"""The daemon end to end, as real processes: requests, retries, bad input, SIGTERM mid-build and
restart, two daemons on one table (one executes; the other takes over when it is killed)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from indexer.requests_store import RequestStore
from indexer.service_config import load_service_config, parse_service_config
from metadata_table.layout import (
    BLOOM_FILTERS,
    COLUMN_STATS,
    FILES,
    RECORD_INDEX,
    secondary_index_partition,
)
from timeline import Action, Table
from timeline.config import LOCK_URL
from timeline.errors import ConfigError

from .test_indexer import assert_exact, make_table

pytestmark = pytest.mark.slow  # the daemon in a process of its own, starting Spark

HTTP = urllib3.PoolManager()


def _setup(tmp_path: Path, desired: list[str], lease: int = 30) -> tuple[Table, Path]:
    table = make_table(tmp_path / "t")
    lock = table.config.get(LOCK_URL)
    config = tmp_path / "service.toml"
    config.write_text(f"""
[service]
request_store = "sqlite:///{tmp_path / "service.sqlite"}"
http_port = 0
reconcile_interval_seconds = 0.5
lease_seconds = {lease}
backoff_seconds = 0.5
max_attempts = 3

[spark]
master = "local[2]"

[[tables]]
base = "{table.base_uri}"
index_types = {json.dumps(desired)}
lock_url = "{lock}"
""")
    return table, config


class Daemon:
    """``indexer serve`` in a process of its own. Its log (stderr: its warnings, Spark's) goes to
    a file beside its config, never to a pipe: a pipe nobody reads fills after 64 KB, and the
    daemon then blocks in its next log line, with its scheduler's lock held, so it never stops."""

    def __init__(self, config: Path, failpoint: str | None = None) -> None:
        env = dict(os.environ)
        env.pop("AIX_FAILPOINT", None)
        if failpoint:
            env["AIX_FAILPOINT"] = failpoint
        self.log = config.with_name(f"daemon-{time.time_ns()}.log")
        with self.log.open("w") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(
                [sys.executable, "-m", "indexer", "serve", "--config", str(config)],
                stdout=subprocess.PIPE,  # a few lines: "serving ... API at", "stopping", "stopped"
                stderr=log,
                text=True,
                env=env,
            )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        match = re.search(r"API at (http://\S+)", line)
        assert match, f"daemon did not start: {line!r}\n{self.log_tail()}"
        self.url = match.group(1)

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def get(self, path: str) -> Any:
        return json.loads(HTTP.request("GET", self.url + path).data)

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = HTTP.request(
            "POST", self.url + path, body=raw, headers={"Content-Type": "application/json"}
        )
        return response.status, json.loads(response.data)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 120) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            tail = self.log_tail()
            raise AssertionError(f"the daemon did not stop in {timeout:.0f} s:\n{tail}") from e


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for daemon in started:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait()


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def _completed(table: Table, partitions: list[str]) -> Callable[[], bool]:
    return lambda: all(p in table.reload_index_state().completed for p in partitions)


def test_desired_and_requested_indexes_are_built(tmp_path: Path, daemons: list[Daemon]) -> None:
    table, config = _setup(tmp_path, [COLUMN_STATS])
    daemon = Daemon(config)
    daemons.append(daemon)
    _wait(_completed(table, [COLUMN_STATS]), 90, "the desired column_stats")
    status, created = daemon.post(
        "/requests",
        {
            "table": table.base_uri,
            "index_types": [BLOOM_FILTERS, FILES, RECORD_INDEX, "secondary_index"],
            "columns": ["fare"],
        },
    )
    assert status == 201 and created["state"] == "pending"
    _wait(
        lambda: daemon.get(f"/requests/{created['id']}")["state"] == "completed", 90, "the request"
    )
    done = daemon.get(f"/requests/{created['id']}")
    assert done["attempts"] == 1 and done["instant"]
    fare = secondary_index_partition("fare")
    assert_exact(table, [COLUMN_STATS, BLOOM_FILTERS, FILES, RECORD_INDEX, fare])
    metrics = HTTP.request("GET", daemon.url + "/metrics").data.decode()
    assert "async_indexer_builds_completed_total 2" in metrics
    for partition in (RECORD_INDEX, fare):  # a gauge of each partition's size and lag
        sized = rf'async_indexer_partition_bytes{{table="[^"]+",partition="{partition}"}} (\d+)'
        assert int(re.findall(sized, metrics)[0]) > 0, partition
        assert (
            f'async_indexer_partition_unapplied_instants{{table="{table.base_uri}",partition="{partition}"}} 0'
            in metrics
        )
    status_body = daemon.get("/status")["tables"][table.base_uri]
    assert status_body["leader"] is True and status_body["partitions"][FILES] == "completed"
    assert status_body["partitions"][fare] == "completed"
    assert daemon.stop() == 0


def test_bad_requests_are_rejected_and_schedule_nothing(
    tmp_path: Path, daemons: list[Daemon]
) -> None:
    table, config = _setup(tmp_path, [])
    daemon = Daemon(config)
    daemons.append(daemon)
    cases = [
        (b"{not json", 400, "JSON object"),
        ({"table": str(tmp_path / "other"), "index_types": ["files"]}, 404, "unknown table"),
        (
            {"table": table.base_uri, "index_types": ["record_idx"]},
            400,
            "unknown metadata partition",
        ),
        ({"table": table.base_uri, "index_types": ["secondary_index"]}, 400, "--columns"),
        ({"table": table.base_uri, "index_types": []}, 400, "non-empty list"),
        (
            {"table": table.base_uri, "index_types": ["files"], "columns": "fare"},
            400,
            "list of column",
        ),
        ({"index_types": ["files"]}, 400, "'table'"),
    ]
    for body, status, reason in cases:
        got, answer = daemon.post("/requests", body)
        assert (got, reason in answer["error"]) == (status, True), (body, answer)
    assert HTTP.request("GET", daemon.url + "/requests/nope").status == 404
    assert RequestStore(f"sqlite:///{tmp_path / 'service.sqlite'}").list() == []
    bad_cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "indexer",
            "request",
            table.base_uri,
            "--index-types",
            "nope",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
    )
    assert bad_cli.returncode == 1 and "unknown metadata partition" in bad_cli.stderr
    assert daemon.stop() == 0
    assert table.reload_index_state().completed == ()


def test_an_aborted_build_is_retried_then_completes(tmp_path: Path, daemons: list[Daemon]) -> None:
    table, config = _setup(tmp_path, [])
    daemon = Daemon(config, failpoint="execute.after_build:once")
    daemons.append(daemon)
    request = subprocess.run(
        [
            sys.executable,
            "-m",
            "indexer",
            "request",
            table.base_uri,
            "--index-types",
            "files,column_stats",
            "--config",
            str(config),
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    assert request.returncode == 0, request.stderr
    request_id = json.loads(request.stdout)["id"]
    _wait(
        lambda: daemon.get(f"/requests/{request_id}")["state"] == "completed",
        120,
        "the retried request",
    )
    done = daemon.get(f"/requests/{request_id}")
    assert done["attempts"] == 2, "the first attempt was aborted, the second completed"
    assert_exact(table, [FILES, COLUMN_STATS])
    metrics = HTTP.request("GET", daemon.url + "/metrics").data.decode()
    assert "async_indexer_builds_aborted_total 1" in metrics
    assert "async_indexer_builds_retried_total 1" in metrics
    assert 'async_indexer_build_duration_seconds_bucket{le="+Inf"} 2' in metrics
    assert "async_indexer_build_duration_seconds_count 2" in metrics
    assert [b["outcome"] for b in daemon.get("/status")["builds"]] == ["aborted", "completed"]
    assert daemon.stop() == 0


def test_sigterm_mid_build_then_restart_completes(tmp_path: Path, daemons: list[Daemon]) -> None:
    table, config = _setup(tmp_path, [COLUMN_STATS, BLOOM_FILTERS])
    daemon = Daemon(config, failpoint="build.mid:sleep=4")  # the build stalls: stop it midway
    daemons.append(daemon)
    _wait(
        lambda: (
            (daemon.get("/status")["tables"][table.base_uri]["running"] or {}).get("phase")
            == "building"
        ),
        60,
        "the build to start",
    )
    assert daemon.stop() == 0
    state = table.reload_index_state()
    assert state.completed == () and state.inflight == (), "aborted cleanly"
    assert not table.timeline.load().with_actions(Action.INDEXING).pending()
    restarted = Daemon(config)
    daemons.append(restarted)
    _wait(_completed(table, [COLUMN_STATS, BLOOM_FILTERS]), 120, "the restarted daemon's build")
    assert_exact(table, [COLUMN_STATS, BLOOM_FILTERS])
    assert restarted.stop() == 0


def test_two_daemons_one_executes_and_the_other_takes_over(
    tmp_path: Path, daemons: list[Daemon]
) -> None:
    table, config = _setup(tmp_path, [], lease=4)
    first = Daemon(config)
    daemons.append(first)
    _wait(
        lambda: first.get("/status")["tables"][table.base_uri]["leader"],
        30,
        "the first daemon to lead",
    )
    second = Daemon(config)
    daemons.append(second)
    time.sleep(2.0)
    assert second.get("/status")["tables"][table.base_uri]["leader"] is False
    first.stop(signal.SIGKILL)
    killed_at = time.monotonic()
    _wait(lambda: second.get("/status")["tables"][table.base_uri]["leader"], 30, "the takeover")
    assert time.monotonic() - killed_at < 4 + 2 + 1  # within the lease (plus one reconcile period)
    status, created = second.post("/requests", {"table": table.base_uri, "index_types": [FILES]})
    assert status == 201
    _wait(
        lambda: second.get(f"/requests/{created['id']}")["state"] == "completed", 90, "the request"
    )
    assert_exact(table, [FILES])
    assert second.stop() == 0


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    cases = [
        ("[service]\nhttp_prot = 1\n[[tables]]\nbase = '/t'\n", "service.http_prot"),
        ("[[tables]]\nindex_types = ['files']\n", "tables[0].base"),
        ("[[tables]]\nbase = '/t'\nindex_types = ['nope']\n", "tables[0].index_types"),
        ("[service]\nhttp_host = '0.0.0.0'\n[[tables]]\nbase = '/t'\n", "service.token"),
        ("[service]\nlease_seconds = -1\n[[tables]]\nbase = '/t'\n", "service.lease_seconds"),
        ("[service]\n", "tables"),
    ]
    for text, key in cases:
        bad.write_text(text)
        with pytest.raises(ConfigError) as err:
            load_service_config(str(bad))
        assert err.value.key == key, text
        if "nope" in text:  # the known types are named once
            assert str(err.value).count("record_index") == 1, str(err.value)
    bad.write_text("not = [toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_service_config(str(bad))
    served = subprocess.run(
        [sys.executable, "-m", "indexer", "serve", "--config", str(tmp_path / "none.toml")],
        capture_output=True,
        text=True,
    )
    assert served.returncode == 1 and "no such file" in served.stderr
    ok = parse_service_config(
        {"service": {"http_host": "10.0.0.5", "token": "s3cret"}, "tables": [{"base": "/t"}]}
    )
    assert not ok.loopback


def test_mutating_endpoints_need_the_token_off_loopback(tmp_path: Path) -> None:
    from indexer.http_api import make_app
    from indexer.service import IndexerService
    from timeline.http_server import BackgroundHttpServer

    table, _ = _setup(tmp_path, [])
    config = parse_service_config(
        {
            "service": {
                "http_host": "10.1.2.3",
                "token": "s3cret",
                "request_store": f"sqlite:///{tmp_path / 's.sqlite'}",
            },
            "tables": [
                {"base": table.base_uri, "lock_url": f"sqlite:///{tmp_path / 'locks.sqlite'}"}
            ],
        }
    )
    service = IndexerService(config)  # not started: only its API is served, on loopback here
    server = BackgroundHttpServer(lambda: make_app(service), "127.0.0.1", 0, "test-api").start()
    try:
        body = json.dumps({"table": table.base_uri, "index_types": ["files"]}).encode()
        denied = HTTP.request("POST", server.url + "/requests", body=body)
        assert denied.status == 401
        wrong = HTTP.request(
            "POST", server.url + "/requests", body=body, headers={"Authorization": "Bearer nope"}
        )
        assert wrong.status == 401
        allowed = HTTP.request(
            "POST", server.url + "/requests", body=body, headers={"Authorization": "Bearer s3cret"}
        )
        assert allowed.status == 201
        assert HTTP.request("GET", server.url + "/metrics").status == 200  # reads need no token
    finally:
        server.stop()
        service.store.close()


def test_the_daemon_applies_foreign_commits_on_its_next_tick(
    tmp_path: Path, daemons: list[Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit that wrote nothing to the index (Apache Hudi's own writer, say) is applied by
    the daemon within a tick or two, and counted."""
    from metadata_table.validate import validate

    from ..metadata_table.test_metadata_table import keys, rows
    from .test_foreign_commits import foreign_write

    table, config = _setup(tmp_path, [FILES, COLUMN_STATS])
    daemon = Daemon(config)
    daemons.append(daemon)
    _wait(_completed(table, [FILES, COLUMN_STATS]), 90, "the desired indexes")
    foreign = foreign_write(table, rows(keys(1000, 1005), city="tokyo"), monkeypatch)
    _wait(lambda: all(r.ok for r in validate(table)), 30, f"the daemon to apply {foreign}")
    metrics = HTTP.request("GET", daemon.url + "/metrics").data.decode()
    assert "async_indexer_synced_instants_total 1" in metrics
    gauge = f'async_indexer_partition_unapplied_instants{{table="{table.base_uri}",partition="files"}} 0'
    assert gauge in metrics
    assert (
        daemon.get("/status")["tables"][table.base_uri]["lag"]["files"]["unapplied_instants"] == 0
    )
    assert_exact(table, [FILES, COLUMN_STATS])
    assert daemon.stop() == 0


def test_the_daemon_rebuilds_a_lost_partition(tmp_path: Path, daemons: list[Daemon]) -> None:
    import shutil

    from metadata_table.validate import validate
    from timeline.index_state import INDEX_FOLDER

    table, config = _setup(tmp_path, [FILES, COLUMN_STATS])
    daemon = Daemon(config)
    daemons.append(daemon)
    _wait(_completed(table, [FILES, COLUMN_STATS]), 90, "the desired indexes")
    shutil.rmtree(Path(table.base_uri, INDEX_FOLDER, COLUMN_STATS))
    _wait(
        lambda: [r.partition for r in validate(table) if r.ok] == [COLUMN_STATS, FILES],
        120,
        "the daemon to rebuild column_stats",
    )
    metrics = HTTP.request("GET", daemon.url + "/metrics").data.decode()
    assert "async_indexer_lost_partitions_total 1" in metrics
    assert_exact(table, [FILES, COLUMN_STATS])
    assert daemon.stop() == 0


def _png_colours(png: bytes) -> int:
    """Distinct byte values in a PNG's pixel data (1 for a blank, single-colour image)."""
    import struct
    import zlib

    assert png.startswith(b"\x89PNG\r\n\x1a\n"), "not a PNG"
    position, data = 8, b""
    while position < len(png):
        (length,) = struct.unpack(">I", png[position : position + 4])
        kind = png[position + 4 : position + 8]
        if kind == b"IDAT":
            data += png[position + 8 : position + 8 + length]
        position += 12 + length
    return len(set(zlib.decompress(data)))


def test_the_status_page_renders_in_a_real_browser(tmp_path: Path, daemons: list[Daemon]) -> None:
    """``GET /`` is a self-contained page: Chromium (installed by scripts/ensure-system-deps.sh)
    renders it headless; its text names the table, partitions, states and the last build, and
    its screenshot is not blank."""
    import shutil

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Chromium is missing: scripts/ensure-system-deps.sh installs it"
    table, config = _setup(tmp_path, [FILES, COLUMN_STATS, RECORD_INDEX])
    daemon = Daemon(config)
    daemons.append(daemon)
    _wait(_completed(table, [FILES, COLUMN_STATS, RECORD_INDEX]), 90, "the desired indexes")
    _wait(lambda: bool(daemon.get("/status")["builds"]), 30, "the build's record")

    page = HTTP.request("GET", daemon.url + "/")
    assert page.status == 200 and page.headers["Content-Type"].startswith("text/html")
    html = page.data.decode()
    assert "http://" not in html.replace(daemon.url, "") and "<script src" not in html
    browser = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chromium'}",
    ]
    dom = subprocess.run(
        [*browser, "--dump-dom", daemon.url + "/"], capture_output=True, text=True, timeout=120
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    for text in (
        table.base_uri,
        "files",
        "column_stats",
        "record_index",
        "completed",
        "Last builds",
        "No build running",
        "Storage and table services",
        "storage: data",
        "last index compaction",
    ):
        assert text in dom.stdout, text
    shot = tmp_path / "status.png"
    done = subprocess.run(
        [*browser, f"--screenshot={shot}", "--window-size=1000,900", daemon.url + "/"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    assert _png_colours(shot.read_bytes()) > 20, "the screenshot is blank"
    assert daemon.stop() == 0

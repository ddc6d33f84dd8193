"""Shared fixtures: real backends started by the tests themselves.

* ``s3_endpoint``: moto's S3 server over HTTP on 127.0.0.1 (a free port), with a bucket, its
  conditional writes made atomic as S3's are.
* ``postgres_url``: a throwaway PostgreSQL server (initdb + pg_ctl) on a free loopback port.
* ``storage``: a fresh :class:`Storage` on each backend (local, memory, s3).
* Tests marked ``soak`` are exhaustive variants of a test that CI runs in one form: they are
  skipped unless ``AIX_SOAK=1`` (``make soak``), which keeps ``make test`` within CI's budget.
* ``hudi``: Apache Hudi 0.15 itself (its Spark writer, readers, table services and async indexer),
  driven in its own environment as a subprocess (tests/hudi_peer/). Tests that use it are marked
  ``hudi``; if the environment cannot be built, they fail with the reason, never skip.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from timeline.storage import Storage

BUCKET = "async-indexer-test"
logging.getLogger("werkzeug").setLevel(logging.WARNING)

# Credentials for moto; set before any boto client is created, inherited by child processes.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

#: Options of the run's JVMs: each lives seconds to minutes on CI's two cores, where C2's
#: compiler threads and G1's collector threads took CPU from the work itself; with the C1
#: compiler alone and the serial collector a write on the Spark cluster took 28% less time.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# read by spark-submit, which starts every Spark driver here (a test's own, the CLIs' and
# Apache Hudi's); set before any starts, inherited by the processes that start one
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)


SOAK = os.environ.get("AIX_SOAK") == "1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


_CONDITIONAL_WRITE_LOCK = threading.RLock()  # a DynamoDB transaction calls put_item itself


def atomic_conditional_writes() -> None:
    """Make moto's conditional writes atomic, as S3's and DynamoDB's are.

    moto's server answers each request on its own thread, and checks a write's condition and then
    writes with no lock between: S3's PUT (and multipart completion) with ``If-None-Match: *`` or
    ``If-Match``, and DynamoDB's conditional PutItem, UpdateItem and DeleteItem. Two racing
    creates of one key could both succeed, which neither service allows (CI saw two winners of
    eight processes on S3, and two holders of one DynamoDB lock). One lock around each such write
    closes that window; S3's unconditional writes are left as they are."""
    from moto.dynamodb.models import DynamoDBBackend
    from moto.s3.responses import S3Response

    def conditional(response: Any) -> bool:
        return bool(response.headers.get("If-None-Match") or response.headers.get("If-Match"))

    for name in ("put_object", "_key_response_post"):
        _serialize(S3Response, name, conditional)
    for name in ("put_item", "update_item", "delete_item", "transact_write_items"):
        _serialize(DynamoDBBackend, name, lambda backend: True)


def _serialize(cls: type, name: str, when: Callable[[Any], bool]) -> None:
    """Run ``cls.name`` under :data:`_CONDITIONAL_WRITE_LOCK` when ``when(self)`` holds (once)."""
    original = getattr(cls, name)
    if getattr(original, "_atomic_conditional", False):
        return

    def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
        if when(self):
            with _CONDITIONAL_WRITE_LOCK:
                return original(self, *args, **kwargs)
        return original(self, *args, **kwargs)

    locked._atomic_conditional = True  # type: ignore[attr-defined]
    setattr(cls, name, locked)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    import boto3
    from moto.server import ThreadedMotoServer

    atomic_conditional_writes()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
    yield endpoint
    server.stop()


@pytest.fixture(scope="session")
def s3_options(s3_endpoint: str) -> dict[str, Any]:
    return {"endpoint_url": s3_endpoint, "key": "testing", "secret": "testing"}


@pytest.fixture
def s3_storage(s3_options: dict[str, Any]) -> Storage:
    return Storage(f"s3://{BUCKET}/{uuid.uuid4().hex}", s3_options)


@pytest.fixture(params=["local", "memory", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Any) -> Storage:
    """A fresh, empty storage root on each backend."""
    if request.param == "local":
        return Storage(str(tmp_path / "table"))
    if request.param == "memory":
        return Storage(f"memory://{uuid.uuid4().hex}")
    options = request.getfixturevalue("s3_options")
    return Storage(f"s3://{BUCKET}/{uuid.uuid4().hex}", options)


def _pg_binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server of our own: initdb in a temp folder, started on a free loopback port."""
    initdb, pg_ctl = _pg_binary("initdb"), _pg_binary("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.fail(
            "PostgreSQL server binaries not found: `make test` installs them (apt postgresql)"
        )
    root = tempfile.mkdtemp(prefix="aix-pg-")
    data, log = os.path.join(root, "data"), os.path.join(root, "server.log")
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        shutil.chown(root, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    subprocess.run(
        [*as_user, initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"],
        check=True,
        capture_output=True,
    )
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    started = subprocess.run(
        [*as_user, pg_ctl, "-D", data, "-o", options, "-l", log, "-w", "-t", "60", "start"],
        capture_output=True,
        text=True,
    )
    if started.returncode != 0:
        server_log = Path(log).read_text() if os.path.exists(log) else ""
        pytest.fail(f"PostgreSQL did not start: {started.stderr}\n{server_log}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, pg_ctl, "-D", data, "-m", "immediate", "stop"], capture_output=True
        )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession for the whole test run (starting one takes ~8 s)."""
    from timeline.spark import spark_session

    session = spark_session("local[2]", {"spark.default.parallelism": "4"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def hudi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Apache Hudi as a peer: one driver process (one JVM) for the whole run, built on first use."""
    from tests.hudi_peer.peer import HudiPeerError, start_peer

    try:
        peer = start_peer(tmp_path_factory.mktemp("hudi-peer"))
    except HudiPeerError as e:
        pytest.fail(f"Apache Hudi's peer environment is unavailable: {e}", pytrace=False)
    yield peer
    peer.close()


#: fixtures that make a test slow: a JVM (Spark, Apache Hudi) or a Spark cluster
SLOW_FIXTURES = {"spark", "hudi", "spark_cluster"}
#: folders whose every test is slow (crash matrix, concurrency and fault suites, the cluster)
SLOW_FOLDERS = ("tests/reliability/", "tests/spark/")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Markers from what a test uses, so they cannot drift from the code: ``hudi`` (Apache Hudi
    itself; ``make test-hudi``), ``s3`` (moto's server), ``postgres`` (a throwaway server) and
    ``slow`` (a JVM, a cluster, the reliability suites; ``make test-fast`` leaves them out). And
    the variants marked ``soak`` are skipped unless ``AIX_SOAK=1``."""
    root = Path(__file__).resolve().parent.parent
    soak_only = pytest.mark.skip(reason="an exhaustive variant: make soak (AIX_SOAK=1) runs it")
    for item in items:
        if not SOAK and item.get_closest_marker("soak") is not None:
            item.add_marker(soak_only)
        fixtures = set(getattr(item, "fixturenames", ()))
        params = {str(v) for v in getattr(getattr(item, "callspec", None), "params", {}).values()}
        if "hudi" in fixtures:
            item.add_marker(pytest.mark.hudi)
        if fixtures & {"s3_endpoint", "s3_options", "s3_storage"} or any(
            p == "s3" or p.endswith("-s3") for p in params
        ):
            item.add_marker(pytest.mark.s3)
        if "postgres_url" in fixtures or "postgres" in params:
            item.add_marker(pytest.mark.postgres)
        where = item.path.resolve().relative_to(root).as_posix()
        if fixtures & SLOW_FIXTURES or where.startswith(SLOW_FOLDERS):
            item.add_marker(pytest.mark.slow)
    items[:] = _longest_files_first(items, root)


def _longest_files_first(items: list[pytest.Item], root: Path) -> list[pytest.Item]:
    """Test files in the order of their expected length (the cluster and reliability suites,
    then files that run Apache Hudi, then those with other slow tests, then the rest), each
    file's tests in their own order: `make test`'s workers (pytest-xdist, a file at a time) then
    start the longest files first instead of ending on one of them while the other worker idles."""
    weight: dict[Path, int] = {}
    for item in items:
        where = item.path.resolve().relative_to(root).as_posix()
        rank = 0 if where.startswith(SLOW_FOLDERS) else 3
        if item.get_closest_marker("hudi") is not None:
            rank = min(rank, 1)
        elif item.get_closest_marker("slow") is not None:
            rank = min(rank, 2)
        weight[item.path] = min(weight.get(item.path, rank), rank)
    return sorted(items, key=lambda item: weight[item.path])  # stable: files stay whole

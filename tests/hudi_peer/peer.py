"""The product-side handle on Apache Hudi: builds Hudi's environment when missing, runs the driver
(driver.py, in that environment) as one long-lived subprocess, and turns Python calls into its JSON
requests. Tests get one :class:`HudiPeer` per session from the ``hudi`` fixture."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
ENV_SCRIPT = ROOT / "scripts" / "hudi-peer-env.sh"
DRIVER = Path(__file__).resolve().parent / "driver.py"
MANIFEST = Path(os.environ.get("HUDI_PEER_VENV", ROOT / ".venv-hudi")) / "hudi-peer.json"

# Environment variables of the product's own Spark that must not reach Hudi's pyspark 3.5.
_FOREIGN_ENV = ("SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")
_FOREIGN_PREFIXES = ("PYSPARK_GATEWAY", "SPARK_CONF", "PYSPARK_SUBMIT")

KEY_GENERATORS = {
    "simple": "org.apache.hudi.keygen.SimpleKeyGenerator",
    "complex": "org.apache.hudi.keygen.ComplexKeyGenerator",
    "nonpartitioned": "org.apache.hudi.keygen.NonpartitionedKeyGenerator",
    "timestamp": "org.apache.hudi.keygen.TimestampBasedKeyGenerator",
    "custom": "org.apache.hudi.keygen.CustomKeyGenerator",
}


class HudiPeerError(Exception):
    """Apache Hudi's peer could not be built, started, or answered a request with an error."""


def build_environment() -> dict[str, Any]:
    """Builds Hudi's environment if it is missing (scripts/hudi-peer-env.sh) and returns its
    manifest. Raises HudiPeerError with the script's own output when it cannot."""
    done = subprocess.run(["bash", str(ENV_SCRIPT)], capture_output=True, text=True)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()[-4000:]
        raise HudiPeerError(f"{ENV_SCRIPT.name} failed (exit {done.returncode}):\n{output}")
    try:
        manifest: dict[str, Any] = json.loads(MANIFEST.read_text())
    except (OSError, ValueError) as e:
        raise HudiPeerError(f"{MANIFEST} unreadable after {ENV_SCRIPT.name}: {e}") from e
    return manifest


@dataclass(frozen=True)
class HudiTable:
    """A table as Hudi's writer is told about it: its path and the write options every write to
    it carries (Hudi keeps most in hoodie.properties, but its datasource wants them on each write).

    ``partition_fields`` for the custom key generator are ``field:SIMPLE`` / ``field:TIMESTAMP``;
    ``timestamp`` holds the ``hoodie.keygen.timebased.*`` settings without that prefix."""

    path: str
    name: str = "hudi_peer_table"
    table_type: str = "COPY_ON_WRITE"
    record_key: Sequence[str] = ("id",)
    partition_fields: Sequence[str] = ("part",)
    precombine: str | None = "ts"
    keygen: str = "simple"
    hive_style: bool = False
    url_encode: bool = False
    metadata: bool = True
    timestamp: dict[str, str] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)

    def options(self) -> dict[str, str]:
        if self.keygen not in KEY_GENERATORS:
            raise ValueError(f"unknown key generator {self.keygen!r} ({sorted(KEY_GENERATORS)})")
        options = {
            "hoodie.table.name": self.name,
            "hoodie.datasource.write.table.type": self.table_type,
            "hoodie.datasource.write.recordkey.field": ",".join(self.record_key),
            "hoodie.datasource.write.partitionpath.field": ",".join(self.partition_fields),
            "hoodie.datasource.write.keygenerator.class": KEY_GENERATORS[self.keygen],
            "hoodie.datasource.write.hive_style_partitioning": str(self.hive_style).lower(),
            "hoodie.datasource.write.partitionpath.urlencode": str(self.url_encode).lower(),
            "hoodie.metadata.enable": str(self.metadata).lower(),
            # Small test tables: a few tasks, not Spark's 200.
            "hoodie.insert.shuffle.parallelism": "2",
            "hoodie.upsert.shuffle.parallelism": "2",
            "hoodie.bulkinsert.shuffle.parallelism": "2",
            "hoodie.delete.shuffle.parallelism": "2",
        }
        if self.precombine:
            options["hoodie.datasource.write.precombine.field"] = self.precombine
        for key, value in self.timestamp.items():
            options[f"hoodie.keygen.timebased.{key}"] = value
        options.update(self.extra)
        return options


class HudiPeer:
    """One driver process in Hudi's environment (one JVM), answering requests in order."""

    def __init__(self, manifest: dict[str, Any], scratch: Path, timeout: float = 900.0) -> None:
        self.manifest = manifest
        self.scratch = scratch
        self.timeout = timeout
        self.log_path = scratch / "hudi-peer.log"
        self._lock = threading.Lock()
        self._answers: queue.Queue[str | None] = queue.Queue()
        self._log: IO[str] = open(self.log_path, "w")  # noqa: SIM115 (closed in close())
        self._process = subprocess.Popen(
            [manifest["python"], str(DRIVER), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=self.environment(),
        )
        threading.Thread(target=self._read_answers, daemon=True).start()

    def environment(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in _FOREIGN_ENV and not k.startswith(_FOREIGN_PREFIXES)
        }
        env["HUDI_PEER_JARS"] = os.pathsep.join(self.manifest["jars"])
        env["JAVA_HOME"] = self.manifest["java_home"]
        # Hudi 0.15's DynamoDB lock client takes its region from here only (not from its config)
        env.setdefault("AWS_REGION", "us-east-1")
        env["PATH"] = f"{self.manifest['java_home']}/bin{os.pathsep}{env.get('PATH', '')}"
        return env

    def _read_answers(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._answers.put(line)
        self._answers.put(None)

    def log_tail(self, chars: int = 3000) -> str:
        self._log.flush()
        text = self.log_path.read_text(errors="replace")
        return text[-chars:]

    def request(self, op: str, **arguments: Any) -> dict[str, Any]:
        """Sends one request and waits for its answer; raises HudiPeerError on an error answer,
        a dead driver, or no answer within the timeout."""
        with self._lock:
            if self._process.poll() is not None:
                raise HudiPeerError(
                    f"the Hudi driver exited ({self._process.returncode}):\n{self.log_tail()}"
                )
            assert self._process.stdin is not None
            self._process.stdin.write(json.dumps({"op": op, **arguments}) + "\n")
            self._process.stdin.flush()
            try:
                line = self._answers.get(timeout=self.timeout)
            except queue.Empty:
                self._process.kill()
                raise HudiPeerError(
                    f"no answer to {op} within {self.timeout:.0f} s:\n{self.log_tail()}"
                ) from None
            if line is None:
                raise HudiPeerError(f"the Hudi driver died during {op}:\n{self.log_tail()}")
        answer: dict[str, Any] = json.loads(line)
        if not answer.get("ok"):
            raise HudiPeerError(f"{op}: {answer.get('error')}\n{answer.get('detail', '')}")
        result: dict[str, Any] = answer["result"]
        result["seconds"] = answer["seconds"]
        return result

    # -- the calls tests make --------------------------------------------------------------

    def _parquet(self, rows: pa.Table) -> str:
        path = str(self.scratch / f"input-{uuid.uuid4().hex}.parquet")
        pq.write_table(rows, path)
        return path

    def write(
        self,
        table: HudiTable,
        operation: str,
        rows: pa.Table | None = None,
        *,
        partitions: Sequence[str] = (),
        options: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """One write by Hudi's Spark datasource (the first one creates the table). Answers
        ``instants``: what it added to Hudi's timeline."""
        return self.request(
            "write",
            path=table.path,
            operation=operation,
            options={**table.options(), **(options or {})},
            input=self._parquet(rows) if rows is not None else None,
            partitions=list(partitions),
        )

    def read(
        self,
        table: HudiTable,
        *,
        metadata: bool = True,
        columns: Sequence[str] = (),
        query_type: str = "snapshot",
        filter: str = "",
        options: dict[str, str] | None = None,
    ) -> pa.Table:
        """The rows Hudi's Spark reader returns (with Hudi's metadata table used or not), with
        ``filter`` (Spark SQL) applied, and read ``options`` such as ``as.of.instant``."""
        output = str(self.scratch / f"read-{uuid.uuid4().hex}.parquet")
        self.request(
            "read",
            path=table.path,
            output=output,
            metadata=metadata,
            columns=list(columns),
            query_type=query_type,
            filter=filter,
            options=options or {},
        )
        try:
            return pq.read_table(output)
        finally:
            os.remove(output)

    def files_read(
        self, table: HudiTable, filter: str, options: dict[str, str] | None = None
    ) -> tuple[pa.Table, int]:
        """The rows of a snapshot read with ``filter`` and the data files its scan read (Spark's
        ``numFiles``: what Hudi's file index kept), the metadata table on for the read."""
        output = str(self.scratch / f"read-{uuid.uuid4().hex}.parquet")
        answer = self.request(
            "read",
            path=table.path,
            output=output,
            metadata=True,
            filter=filter,
            options=options or {},
            files_read=True,
        )
        try:
            return pq.read_table(output), int(answer["files_read"])
        finally:
            os.remove(output)

    def lock(self, table: HudiTable, *, wait_ms: int = 0) -> bool:
        """Takes the table's lock with the provider Hudi's writers use (the table's
        ``hoodie.write.lock.*`` options), as Hudi's lock manager does before a commit: whether it
        was granted within ``wait_ms``. Held until :meth:`unlock`."""
        answer = self.request(
            "lock", path=table.path, action="acquire", options=table.options(), wait_ms=wait_ms
        )
        return bool(answer["granted"])

    def unlock(self, table: HudiTable) -> None:
        self.request("lock", path=table.path, action="release")

    def instants(self, table: HudiTable, archived: bool = False) -> list[dict[str, str]]:
        """Hudi's active timeline (``archived``: its archived timeline) as Hudi loads it:
        ``{timestamp, action, state}``, oldest first."""
        answer = self.request("instants", path=table.path, archived=archived)
        instants: list[dict[str, str]] = answer["instants"]
        return instants

    def service(
        self,
        table: HudiTable,
        service: str,
        *,
        instant: str | None = None,
        options: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """clean, cluster, schedule_cluster, execute_cluster, compact, schedule_compact,
        execute_compact, log_compact, savepoint, restore or rollback, through Hudi's write
        client."""
        return self.request(
            "service",
            path=table.path,
            service=service,
            instant=instant,
            options={**table.options(), **(options or {})},
        )

    def index(
        self, table: HudiTable, index_types: Sequence[str], options: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Hudi's async indexer (HoodieIndexer's schedule + execute) in a JVM of its own.
        Answers ``built``, ``wall_seconds`` (JVM start included) and ``index_seconds``."""
        return self.request(
            "index",
            path=table.path,
            index_types=list(index_types),
            options={**table.options(), **(options or {})},
        )

    def close(self) -> None:
        if self._process.poll() is None:
            assert self._process.stdin is not None
            try:
                self._process.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self._process.stdin.close()
                self._process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait()
        self._log.close()


def start_peer(scratch: Path | None = None) -> HudiPeer:
    """Builds the environment when missing, starts the driver and checks it answers."""
    manifest = build_environment()
    scratch = scratch or Path(tempfile.mkdtemp(prefix="hudi-peer-"))
    started = time.monotonic()
    peer = HudiPeer(manifest, scratch)
    try:
        pong = peer.request("ping")
    except HudiPeerError:
        peer.close()
        raise
    if not pong.get("hudi_loaded"):
        peer.close()
        raise HudiPeerError(f"Hudi's classes did not load: {pong}")
    peer.manifest = {**manifest, **pong, "start_seconds": time.monotonic() - started}
    return peer

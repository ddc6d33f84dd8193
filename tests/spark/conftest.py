"""A real Spark standalone cluster on loopback, started from pyspark's own ``bin/spark-class``:
one master and two workers (1 core, 1 GiB each). The workers advertise different loopback
addresses (127.0.0.1 and 127.0.0.2), so Spark sees two hosts: a speculative copy of a task is
only launched on a host where no attempt of it runs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import TEST_JVM_OPTIONS, free_port

WORKER_HOSTS = ("127.0.0.1", "127.0.0.2")


class SparkCluster:
    def __init__(self, folder: Path) -> None:
        import pyspark

        self.home = Path(pyspark.__file__).parent
        self.folder = folder
        self.port = free_port()
        self.ui_port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.master: subprocess.Popen[bytes] | None = None
        self.workers: dict[int, subprocess.Popen[bytes]] = {}

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        env = dict(os.environ, SPARK_HOME=str(self.home), SPARK_LOG_DIR=str(self.folder))
        env["SPARK_WORKER_DIR"] = str(self.folder / f"{name}-work")
        env["SPARK_DAEMON_JAVA_OPTS"] = TEST_JVM_OPTIONS
        log = open(self.folder / f"{name}.log", "ab")  # noqa: SIM115 (the child owns it)
        return subprocess.Popen(
            [str(self.home / "bin" / "spark-class"), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # one process group: the JVM and the executors it starts
        )

    def start(self) -> SparkCluster:
        try:
            return self._start()
        except BaseException:
            self.stop()  # no JVM left behind
            raise

    def _start(self) -> SparkCluster:
        self.master = self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        for i in range(len(WORKER_HOSTS)):
            self.start_worker(i)
        self.wait_for_workers(len(WORKER_HOSTS))
        return self

    def start_worker(self, i: int) -> None:
        self.workers[i] = self._spawn(
            f"worker{i}",
            "org.apache.spark.deploy.worker.Worker",
            self.url,
            "--host",
            WORKER_HOSTS[i],
            "--cores",
            "1",
            "--memory",
            "1g",
            "--webui-port",
            "0",
        )

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                state = json.load(r)
        except (OSError, ValueError):  # not up yet: no answer, or not the JSON yet
            return 0
        return int(state.get("aliveworkers", 0))

    def wait_for_workers(self, count: int, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while self.alive_workers() < count:
            if time.monotonic() > deadline:
                logs = "\n".join(
                    p.read_text(errors="replace")[-2000:] for p in self.folder.glob("*.log")
                )
                raise RuntimeError(f"the Spark cluster did not start {count} workers:\n{logs}")
            time.sleep(0.5)

    def executor_logs(self, i: int) -> set[Path]:
        """The stderr files of every executor worker ``i`` has started (one per app and executor)."""
        return set((self.folder / f"worker{i}-work").glob("app-*/*/stderr"))

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker ``i`` with its executors (a machine lost)."""
        process = self.workers.pop(i)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def stop(self) -> None:
        for process in [*self.workers.values(), *([self.master] if self.master else [])]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self.workers.clear()
        self.master = None


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster")).start()
    try:
        yield cluster
    finally:
        cluster.stop()

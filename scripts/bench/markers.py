"""Markers benchmark: direct vs timeline-server-based markers, on local files and S3 (moto).

16 client threads (like a job's tasks) create 10,000 markers for one instant. Direct markers cost
one storage request each; timeline-server markers go over HTTP to a marker server (its own process,
as in production) that writes them in batches to MARKERS<i> files. Measured side by side in one run:
wall time, storage requests issued (counted by the storage facade), create latency p50/p99, and the
ratios. S3 is moto's server in its own process over HTTP, so absolute numbers are moto's, not AWS's.

    python scripts/bench/markers.py [--markers 10000] [--threads 16] [--backends local,s3]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass

from timeline import Table
from timeline.config import Config
from timeline.markers import DirectMarkers, IOType, Marker, MarkerWriter
from timeline.markers.client import TimelineServerMarkers

INSTANT = "20261121101500123"


@dataclass
class Result:
    backend: str
    mode: str
    markers: int
    seconds: float
    requests: int
    p50_ms: float
    p99_ms: float


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def _run_clients(make: callable, total: int, threads: int) -> tuple[float, list[float]]:  # type: ignore[valid-type]
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []

    def task(n: int) -> None:
        markers: MarkerWriter = make()
        try:
            for i in range(n * total // threads, (n + 1) * total // threads):
                marker = Marker(
                    f"part={i % 20:02d}",
                    f"{uuid.uuid4()}-0_{i}-0-0_{INSTANT}.parquet",
                    IOType.CREATE,
                )
                started = time.perf_counter()
                markers.create(marker)
                latencies[n].append(time.perf_counter() - started)
        except BaseException as e:
            errors.append(e)

    started = time.perf_counter()
    workers = [threading.Thread(target=task, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started, [x for lat in latencies for x in lat]


def _table(base: str, options: dict[str, str]) -> Table:
    explicit = {
        "indexer.lock.url": "inprocess",
        **{f"indexer.storage.{k}": v for k, v in options.items()},
    }
    return Table.create(base, "bench", ["id"], config=Config.resolve(explicit=explicit))


def bench_direct(
    backend: str, base: str, options: dict[str, str], total: int, threads: int
) -> Result:
    table = _table(base, options)
    storage = table.storage
    before = sum(storage.requests.values())
    seconds, lat = _run_clients(lambda: DirectMarkers(storage, INSTANT), total, threads)
    requests = sum(storage.requests.values()) - before
    assert len(DirectMarkers(storage, INSTANT).all()) == total
    return Result(
        backend, "direct", total, seconds, requests, _percentile(lat, 0.5), _percentile(lat, 0.99)
    )


def bench_server(
    backend: str, base: str, options: dict[str, str], total: int, threads: int, interval_ms: int
) -> Result:
    table = _table(base, options)
    args = [
        sys.executable,
        "-m",
        "timeline",
        "marker-server",
        base,
        "--batch-interval-ms",
        str(interval_ms),
    ]
    for k, v in options.items():
        args += ["--storage-option", f"{k}={v}"]
    server = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    url = re.search(r"at (http://\S+)", server.stdout.readline())
    assert url, "the marker server did not start"
    seconds, lat = _run_clients(
        lambda: TimelineServerMarkers(url.group(1), table.storage, INSTANT), total, threads
    )
    server.send_signal(signal.SIGTERM)
    summary = server.stdout.read()
    server.wait()
    counts = re.search(r"storage requests: (.*)", summary)
    requests = sum(int(n) for n in re.findall(r"=(\d+)", counts.group(1))) if counts else -1
    from timeline.markers import read_markers

    assert len(read_markers(table.storage, INSTANT)) == total
    return Result(
        backend,
        f"timeline-server {interval_ms} ms",
        total,
        seconds,
        requests,
        _percentile(lat, 0.5),
        _percentile(lat, 0.99),
    )


def _moto() -> tuple[subprocess.Popen[bytes], str]:
    """moto's S3 server in its own process, with a 'bench' bucket, and test credentials."""
    for key, value in (
        ("AWS_ACCESS_KEY_ID", "bench"),
        ("AWS_SECRET_ACCESS_KEY", "bench"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        os.environ.setdefault(key, value)
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from moto.server import main; main()",
            "-H",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    for _ in range(100):
        try:
            client.create_bucket(Bucket="bench")
            return process, endpoint
        except Exception:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("moto's S3 server did not start")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--markers", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--backends", default="local,s3")
    parser.add_argument("--intervals", default="50,5", help="server batch intervals to run, in ms")
    args = parser.parse_args()
    results: list[Result] = []
    for backend in args.backends.split(","):
        moto = None
        if backend == "local":
            root, options = tempfile.mkdtemp(prefix="bench-markers-"), {}
            bases = [os.path.join(root, f"run{i}") for i in range(8)]
        elif backend == "s3":
            moto, endpoint = _moto()
            options = {"endpoint_url": endpoint, "key": "bench", "secret": "bench"}
            bases = [f"s3://bench/{uuid.uuid4().hex}" for _ in range(8)]
        else:
            raise SystemExit(f"unknown backend {backend!r}")
        try:
            print(f"[{backend}] direct markers ...", flush=True)
            results.append(bench_direct(backend, bases[0], options, args.markers, args.threads))
            for n, interval in enumerate(int(x) for x in args.intervals.split(",")):
                print(f"[{backend}] timeline-server markers, {interval} ms batches ...", flush=True)
                results.append(
                    bench_server(
                        backend, bases[n + 1], options, args.markers, args.threads, interval
                    )
                )
        finally:
            if moto is not None:
                moto.kill()
    print()
    print(
        f"{args.markers} markers, {args.threads} client threads, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}"
    )
    print("| storage | markers | wall s | storage requests | create p50 ms | create p99 ms |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r.backend} | {r.mode} | {r.seconds:.2f} | {r.requests} | {r.p50_ms:.1f} | {r.p99_ms:.1f} |"
        )
    print()
    for r in results:
        if r.mode == "direct":
            continue
        direct = next(d for d in results if d.backend == r.backend and d.mode == "direct")
        print(
            f"{r.backend}, direct / {r.mode}: wall time {direct.seconds / r.seconds:.2f}x, "
            f"storage requests {direct.requests / max(1, r.requests):.1f}x, "
            f"create p50 {direct.p50_ms / r.p50_ms:.2f}x, p99 {direct.p99_ms / r.p99_ms:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

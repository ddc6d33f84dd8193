"""Apache Hudi as a peer: a small driver that runs Hudi 0.15's own Spark writer, readers, table
services and async indexer on a table, for the tests of the product.

It runs in its own virtualenv (pyspark 3.5, Hudi's Spark 3.5 bundle; see scripts/hudi-peer-env.sh),
never in the product's, and imports nothing but the standard library and that pyspark. The product's
tests drive it as a subprocess (tests/hudi_peer/peer.py):

    python driver.py serve                 JSON requests on stdin, one per line; JSON answers on
                                           stdout, one per line (one JVM for a whole test session)
    python driver.py call '<request>'      one request, its answer printed; exit 0 or 1

A request is ``{"op": NAME, ...}``; an answer is ``{"ok": true, "result": {...}, "seconds": s}`` or
``{"ok": false, "error": "...", "detail": "..."}``. The ops are the ``op_*`` functions below; each
says what it takes. Table options are Hudi's own keys (``hoodie.*``), built by the caller.

Everything the JVM or Spark prints goes to stderr: stdout carries answers only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))

# Hudi's Spark quick-start settings (the bundle's Kryo registrar, SQL extension and catalog).
SPARK_CONF = {
    "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
    "spark.kryo.registrator": "org.apache.spark.HoodieSparkKryoRegistrar",
    "spark.sql.extensions": "org.apache.spark.sql.hudi.HoodieSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.hudi.catalog.HoodieCatalog",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    # Rows handed back to the tests: timestamps as INT64 microseconds, which pyarrow reads as is.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # Java 17: Kryo serializes Hudi's lock-holding objects (a record-index upsert under a lock
    # provider), which needs this package open beside the ones Spark opens itself
    "spark.driver.extraJavaOptions": "--add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED",
}

WRITE_OPERATIONS = {
    "bulk_insert",
    "insert",
    "upsert",
    "delete",
    "insert_overwrite",
    "insert_overwrite_table",
    "delete_partition",
}


class RequestError(Exception):
    """A request the driver refuses (unknown op, missing or bad argument)."""


class Peer:
    """One SparkSession with Hudi's bundle, created on first use."""

    def __init__(self, jars: list[str], master: str) -> None:
        self.jars = jars
        self.master = master
        self._spark: Any = None
        self.locks: dict[str, Any] = {}  # held lock providers by table path (op_lock)

    @property
    def spark(self) -> Any:
        if self._spark is None:
            from pyspark.sql import SparkSession

            builder = SparkSession.builder.appName("hudi-peer").master(self.master)
            builder = builder.config("spark.jars", ",".join(self.jars))
            # Hudi's Avro classes on the driver's own class path too: from spark.jars alone,
            # Avro decodes a metadata table's delete blocks as generic records, which Hudi's
            # reader cannot cast to its own (HUDI-MDT.md)
            builder = builder.config("spark.driver.extraClassPath", ":".join(self.jars))
            for key, value in SPARK_CONF.items():
                builder = builder.config(key, value)
            self._spark = builder.getOrCreate()
            self._spark.sparkContext.setLogLevel("WARN")
        return self._spark

    @property
    def jvm(self) -> Any:
        return self.spark._jvm

    # -- helpers over Hudi's Java API (py4j) --------------------------------------------------

    def gateway_classes(self, *names: str) -> Any:
        """A Java Class[] of these class names (for Hudi's ReflectionUtils)."""
        gateway = self.spark.sparkContext._gateway
        array = gateway.new_array(self.jvm.java.lang.Class, len(names))
        for i, name in enumerate(names):
            array[i] = self.jvm.java.lang.Class.forName(name)
        return array

    def gateway_objects(self, *values: Any) -> Any:
        """A Java Object[] of these objects."""
        gateway = self.spark.sparkContext._gateway
        array = gateway.new_array(self.jvm.java.lang.Object, len(values))
        for i, value in enumerate(values):
            array[i] = value
        return array

    def meta_client(self, path: str) -> Any:
        jvm = self.jvm
        conf = jvm.org.apache.hudi.storage.hadoop.HadoopStorageConfiguration(
            self.spark._jsc.hadoopConfiguration()
        )
        return (
            jvm.org.apache.hudi.common.table.HoodieTableMetaClient.builder()
            .setConf(conf)
            .setBasePath(path)
            .setLoadActiveTimelineOnLoad(True)
            .build()
        )

    def write_client(self, path: str, options: dict[str, str]) -> Any:
        """Hudi's SparkRDDWriteClient for the table, configured as HoodieIndexer and Hudi's SQL
        procedures configure theirs: the table's latest schema plus the given options."""
        jvm = self.jvm
        props = jvm.java.util.Properties()
        for key, value in options.items():
            props.setProperty(key, str(value))
        schema = (
            jvm.org.apache.hudi.common.table.TableSchemaResolver(self.meta_client(path))
            .getTableAvroSchema()
            .toString()
        )
        config = (
            jvm.org.apache.hudi.config.HoodieWriteConfig.newBuilder()
            .withPath(path)
            .withSchema(schema)
            .withProps(props)
            .build()
        )
        context = jvm.org.apache.hudi.client.common.HoodieSparkEngineContext(self.spark._jsc)
        return jvm.org.apache.hudi.client.SparkRDDWriteClient(context, config)

    def none(self) -> Any:
        return self.jvm.org.apache.hudi.common.util.Option.empty()

    def instants(self, path: str) -> list[dict[str, str]]:
        timeline = self.meta_client(path).getActiveTimeline()
        return [
            {"timestamp": i.getTimestamp(), "action": i.getAction(), "state": i.getState().name()}
            for i in timeline.getInstants()
        ]

    def last_completed(self, path: str, actions: set[str] | None = None) -> dict[str, str] | None:
        done = [
            i
            for i in self.instants(path)
            if i["state"] == "COMPLETED" and (actions is None or i["action"] in actions)
        ]
        return done[-1] if done else None

    def new_instants(self, path: str, before: list[dict[str, str]]) -> list[dict[str, str]]:
        seen = {(i["timestamp"], i["action"], i["state"]) for i in before}
        return [
            i for i in self.instants(path) if (i["timestamp"], i["action"], i["state"]) not in seen
        ]


def _required(request: dict[str, Any], key: str) -> Any:
    if key not in request or request[key] in (None, ""):
        raise RequestError(f"{request.get('op')}: missing argument {key!r}")
    return request[key]


def _options(request: dict[str, Any]) -> dict[str, str]:
    options = request.get("options") or {}
    if not isinstance(options, dict):
        raise RequestError("options must be an object of Hudi config keys to values")
    return {str(k): str(v) for k, v in options.items()}


# -- ops ----------------------------------------------------------------------------------------


def op_ping(peer: Peer, request: dict[str, Any]) -> dict[str, Any]:
    """Starts the session if needed; answers Spark's and Java's versions, and loads one of Hudi's
    classes (an error here means the bundle is not on Spark's class path)."""
    jvm = peer.jvm
    table_type = jvm.org.apache.hudi.common.model.HoodieTableType.valueOf("COPY_ON_WRITE")
    return {
        "spark": peer.spark.version,
        "java": jvm.java.lang.System.getProperty("java.version"),
        "hudi_loaded": table_type.name() == "COPY_ON_WRITE",
    }


def op_write(peer: Peer, request: dict[str, Any]) -> dict[str, Any]:
    """{path, operation, options, input?: parquet file, partitions?: [..] (delete_partition)}:
    one write through Hudi's Spark datasource (the first write creates the table). Answers the
    instants it added."""
    path = _required(request, "path")
    operation = _required(request, "operation")
    if operation not in WRITE_OPERATIONS:
        raise RequestError(f"write: unknown operation {operation!r} ({sorted(WRITE_OPERATIONS)})")
    options = _options(request)
    options["hoodie.datasource.write.operation"] = operation
    spark = peer.spark
    if request.get("input"):
        frame = spark.read.parquet(request["input"])
    elif operation == "delete_partition":
        frame = spark.read.format("hudi").load(path).limit(0)
        frame = frame.drop(*[c for c in frame.columns if c.startswith("_hoodie_")])
    else:
        raise RequestError(f"write {operation}: missing argument 'input'")
    if operation == "delete_partition":
        partitions = request.get("partitions")
        if not partitions:
            raise RequestError("write delete_partition: missing argument 'partitions'")
        options["hoodie.datasource.write.partitions.to.delete"] = ",".join(partitions)
    exists = os.path.exists(os.path.join(path, ".hoodie", "hoodie.properties"))
    before = peer.instants(path) if exists else []
    frame.write.format("hudi").options(**options).mode("append").save(path)
    return {"instants": peer.new_instants(path, before), "rows": frame.count()}


def op_read(peer: Peer, request: dict[str, Any]) -> dict[str, Any]:
    """{path, output: parquet file, metadata: bool, query_type?: snapshot|read_optimized|
    incremental, columns?: [..], filter?: Spark SQL, options?, files_read?: bool}: reads the
    table with Hudi's Spark reader (time travel and incremental reads through its options) and
    writes the rows to one Parquet file. Answers the row count (and the data files the scan
    read)."""
    path = _required(request, "path")
    output = _required(request, "output")
    options = _options(request)
    options.setdefault("hoodie.metadata.enable", str(bool(request.get("metadata", True))).lower())
    options.setdefault("hoodie.datasource.query.type", request.get("query_type") or "snapshot")
    frame = peer.spark.read.format("hudi").options(**options).load(path)
    if request.get("filter"):
        frame = frame.filter(request["filter"])
    if request.get("columns"):
        frame = frame.select(*request["columns"])
    _write_one_parquet(frame, output)
    answer: dict[str, Any] = {"rows": frame.count()}
    if request.get("files_read"):
        answer["files_read"] = _files_read(peer, frame)
    return answer


def _files_read(peer: Peer, frame: Any) -> int:
    """The data files the scan of ``frame`` read (its file-scan nodes' ``numFiles``, with
    adaptive execution off so the plan run is the plan walked): what data skipping left."""
    spark = peer.spark
    adaptive = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        execution = frame._jdf.queryExecution()
        execution.toRdd().count()
        total, nodes = 0, [execution.executedPlan()]
        while nodes:
            node = nodes.pop()
            metric = node.metrics().get("numFiles")
            if metric.isDefined():
                total += int(metric.get().value())
            children = node.children()
            nodes.extend(children.apply(i) for i in range(children.size()))
        return total
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", adaptive)


def _write_one_parquet(frame: Any, output: str) -> None:
    scratch = tempfile.mkdtemp(prefix="hudi-peer-read-", dir=os.path.dirname(output) or None)
    try:
        frame.coalesce(1).write.mode("overwrite").parquet(scratch)
        parts = [n for n in os.listdir(scratch) if n.endswith(".parquet")]
        if len(parts) != 1:
            raise RuntimeError(f"expected one Parquet part in {scratch}, found {parts}")
        shutil.move(os.path.join(scratch, parts[0]), output)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def op_instants(peer: Peer, request: dict[str, Any]) -> dict[str, Any]:
    """{path, archived?}: Hudi's active timeline, oldest first, as Hudi itself loads it; with
    ``archived``, its archived timeline's instants (every state Hudi keeps there), as Hudi's
    HoodieArchivedTimeline reads its archive files."""
    path = _required(request, "path")
    if not request.get("archived"):
        return {"instants": peer.instants(path)}
    archived = peer.meta_client(path).getArchivedTimeline()
    return {
        "instants": [
            {"timestamp": i.getTimestamp(), "action": i.getAction(), "state": i.getState().name()}
            for i in archived.getInstants()
        ]
    }


def op_service(peer: Peer, request: dict[str, Any]) -> dict[str, Any]:
    """{path, service, options, instant?}: one of Hudi's table services through its write client:
    clean; cluster (schedule and execute); schedule_cluster; execute_cluster (instant?: the
    earliest pending); compact (schedule and execute a merge-on-read compaction);
    schedule_compact; execute_compact (instant?: the earliest pending); log_compact (schedule
    and execute a log compaction: a slice's log blocks merged into one new log file); savepoint
    (instant?: the latest completed commit); restore (instant: a savepoint); rollback (instant?:
    the latest completed write). Answers the instants it added."""
    path = _required(request, "path")
    service = _required(request, "service")
    options = _options(request)
    handlers: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
        "clean": _clean,
        "cluster": _cluster,
        "schedule_cluster": _schedule_cluster,
        "execute_cluster": _execute_cluster,
        "compact": _compact,
        "schedule_compact": _schedule_compact,
        "execute_compact": _execute_compact,
        "log_compact": _log_compact,
        "savepoint": _savepoint,
        "restore": _restore,
        "rollback": _rollback,
    }
    if service not in handlers:
        raise RequestError(f"service: unknown service {service!r} ({sorted(handlers)})")
    before = peer.instants(path)
    client = peer.write_client(path, options)
    try:
        detail = handlers[service](peer, {**request, "client": client, "path": path})
    finally:
        client.close()
    return {"instants": peer.new_instants(path, before), "detail": detail}


def _clean(peer: Peer, request: dict[str, Any]) -> Any:
    metadata = request["client"].clean()
    return None if metadata is None else {"deleted_files": metadata.getTotalFilesDeleted()}


def _schedule_cluster(peer: Peer, request: dict[str, Any]) -> Any:
    instant = request["client"].scheduleClustering(peer.none())
    if not instant.isPresent():
        raise RequestError("schedule_cluster: Hudi scheduled nothing (no file group to cluster)")
    return {"instant": instant.get()}


def _instant_or_earliest_pending(peer: Peer, request: dict[str, Any], action: str) -> str:
    """The request's instant, else the earliest pending ``action`` of the table."""
    if request.get("instant"):
        return str(request["instant"])
    for i in peer.instants(request["path"]):
        if i["action"] == action and i["state"] != "COMPLETED":
            return str(i["timestamp"])
    raise RequestError(f"{request['service']}: no pending {action}")


def _execute_cluster(peer: Peer, request: dict[str, Any]) -> Any:
    instant = _instant_or_earliest_pending(peer, request, "replacecommit")
    request["client"].cluster(instant, True)
    return {"instant": instant}


def _cluster(peer: Peer, request: dict[str, Any]) -> Any:
    scheduled = _schedule_cluster(peer, request)
    return _execute_cluster(peer, {**request, "instant": scheduled["instant"]})


def _schedule_compact(peer: Peer, request: dict[str, Any]) -> Any:
    instant = request["client"].scheduleCompaction(peer.none())
    if not instant.isPresent():
        raise RequestError(
            "compact: Hudi scheduled nothing (a copy-on-write table, or no log files; set "
            "hoodie.compact.inline.max.delta.commits)"
        )
    return {"instant": instant.get()}


def _execute_compact(peer: Peer, request: dict[str, Any]) -> Any:
    instant = _instant_or_earliest_pending(peer, request, "compaction")
    request["client"].compact(instant)  # completes the instant too (Hudi's hoodie.auto.commit)
    return {"instant": instant}


def _log_compact(peer: Peer, request: dict[str, Any]) -> Any:
    client = request["client"]
    instant = client.scheduleLogCompaction(peer.none())
    if not instant.isPresent():
        raise RequestError(
            "log_compact: Hudi scheduled nothing (set hoodie.log.compaction.blocks.threshold "
            "below the slices' log block counts)"
        )
    client.logCompact(instant.get())  # completes it too (Hudi's hoodie.auto.commit)
    return {"instant": instant.get()}


def _compact(peer: Peer, request: dict[str, Any]) -> Any:
    scheduled = _schedule_compact(peer, request)
    return _execute_compact(peer, {**request, "instant": scheduled["instant"]})


def _instant_or_latest(peer: Peer, request: dict[str, Any]) -> str:
    """The request's instant, else the latest completed write of the table."""
    if request.get("instant"):
        return str(request["instant"])
    last = peer.last_completed(request["path"], {"commit", "deltacommit", "replacecommit"})
    if last is None:
        raise RequestError(f"{request['service']}: the table has no completed commit")
    return last["timestamp"]


def _savepoint(peer: Peer, request: dict[str, Any]) -> Any:
    instant = _instant_or_latest(peer, request)
    request["client"].savepoint(instant, "hudi-peer", "savepoint for a test")
    return {"instant": instant}


def _restore(peer: Peer, request: dict[str, Any]) -> Any:
    instant = _required(request, "instant")
    request["client"].restoreToSavepoint(instant)
    return {"instant": instant}


def _rollback(peer: Peer, request: dict[str, Any]) -> Any:
    instant = _instant_or_latest(peer, request)
    if not request["client"].rollback(instant):
        raise RequestError(f"rollback: Hudi did not roll back {instant}")
    return {"instant": instant}


# The options HoodieIndexer's documentation gives for async indexing, per index type.
INDEX_TYPES = {
    "column_stats": ("COLUMN_STATS", "hoodie.metadata.index.column.stats.enable"),
    "bloom_filters": ("BLOOM_FILTERS", "hoodie.metadata.index.bloom.filter.enable"),
    "record_index": ("RECORD_INDEX", "hoodie.metadata.record.index.enable"),
}
INDEXER_OPTIONS = {
    "hoodie.metadata.enable": "true",
    "hoodie.metadata.index.async": "true",
    "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
    "hoodie.write.lock.provider": "org.apache.hudi.client.transaction.lock.InProcessLockProvider",
}


def op_index(peer: Peer, request: dict[str, Any]) -> dict[str, Any]:
    """{path, index_types: [column_stats, bloom_filters, record_index], options?}: Hudi's
    asynchronous indexer,
    run as org.apache.hudi.utilities.HoodieIndexer runs it (--mode scheduleAndExecute): for each
    type in turn (HoodieIndexer takes one at a time), the write client's scheduleIndexing, then
    index on that instant. It runs in a JVM of its own, started for this request, so that
    ``wall_seconds`` counts the JVM's start as a user's spark-submit would; ``index_seconds`` is
    the time inside it."""
    path = _required(request, "path")
    types = _required(request, "index_types")
    unknown = [t for t in types if t not in INDEX_TYPES]
    if unknown:
        raise RequestError(f"index: unknown index types {unknown} ({sorted(INDEX_TYPES)})")
    inner = {"op": "index_here", "path": path, "index_types": types, "options": _options(request)}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "call", json.dumps(inner)],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
    )
    wall = time.monotonic() - started
    sys.stderr.write(done.stderr)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    answer = json.loads(lines[-1]) if lines else {"ok": False, "error": "no answer"}
    if not answer.get("ok"):
        raise RuntimeError(
            f"HoodieIndexer run failed: {answer.get('error')}\n{answer.get('detail')}"
        )
    return {**answer["result"], "wall_seconds": wall}


def op_index_here(peer: Peer, request: dict[str, Any]) -> dict[str, Any]:
    path = _required(request, "path")
    options = {**INDEXER_OPTIONS, **_options(request)}
    started = time.monotonic()
    built: list[dict[str, Any]] = []
    for name in request["index_types"]:
        partition_type, enable_key = INDEX_TYPES[name]
        options[enable_key] = "true"
        client = peer.write_client(path, options)
        try:
            types = peer.jvm.java.util.ArrayList()
            types.add(
                peer.jvm.org.apache.hudi.metadata.MetadataPartitionType.valueOf(partition_type)
            )
            instant = client.scheduleIndexing(types)
            if not instant.isPresent():
                raise RuntimeError(f"HoodieIndexer scheduled nothing for {name}")
            metadata = client.index(instant.get())
            if not metadata.isPresent():
                raise RuntimeError(f"HoodieIndexer's index({instant.get()}) returned no metadata")
            infos = metadata.get().getIndexPartitionInfos()
            built.append(
                {
                    "index_type": name,
                    "instant": instant.get(),
                    "partitions": [info.getMetadataPartitionPath() for info in infos],
                }
            )
        finally:
            client.close()
    return {"built": built, "index_seconds": time.monotonic() - started}


def op_lock(peer: Peer, request: dict[str, Any]) -> dict[str, Any]:
    """{path, action: "acquire"|"release", options, wait_ms?}: takes or gives up the table's lock
    with the lock provider Hudi's writers use (``hoodie.write.lock.provider`` in options), as
    Hudi's LockManager does around a commit: the provider's tryLock(wait_ms) (default 0). Answers
    whether it was granted. One held lock per table path."""
    path = _required(request, "path")
    action = _required(request, "action")
    jvm = peer.jvm
    if action == "release":
        provider = peer.locks.pop(path, None)
        if provider is None:
            raise RequestError(f"lock release: no lock held on {path}")
        provider.unlock()
        provider.close()
        return {"released": True}
    if action != "acquire":
        raise RequestError(f"lock: unknown action {action!r} (acquire, release)")
    if path in peer.locks:
        raise RequestError(f"lock acquire: a lock is held on {path} already")
    props = jvm.java.util.Properties()
    for key, value in _options(request).items():
        props.setProperty(key, str(value))
    provider_class = props.getProperty("hoodie.write.lock.provider")
    if not provider_class:
        raise RequestError("lock acquire: options need hoodie.write.lock.provider")
    conf = jvm.org.apache.hudi.storage.hadoop.HadoopStorageConfiguration(
        peer.spark._jsc.hadoopConfiguration()
    )
    lock_config = jvm.org.apache.hudi.common.config.LockConfiguration(props)
    provider = jvm.org.apache.hudi.common.util.ReflectionUtils.loadClass(
        provider_class,
        peer.gateway_classes(
            "org.apache.hudi.common.config.LockConfiguration",
            "org.apache.hudi.storage.StorageConfiguration",
        ),
        peer.gateway_objects(lock_config, conf),
    )
    unit = jvm.java.util.concurrent.TimeUnit.MILLISECONDS
    granted = bool(provider.tryLock(int(request.get("wait_ms", 0)), unit))
    if granted:
        peer.locks[path] = provider
    else:
        provider.close()
    return {"granted": granted}


OPS: dict[str, Callable[[Peer, dict[str, Any]], dict[str, Any]]] = {
    "ping": op_ping,
    "write": op_write,
    "read": op_read,
    "instants": op_instants,
    "service": op_service,
    "index": op_index,
    "index_here": op_index_here,
    "lock": op_lock,
}


def handle(peer: Peer, request: Any) -> dict[str, Any]:
    started = time.monotonic()
    try:
        if not isinstance(request, dict) or request.get("op") not in OPS:
            known = sorted(OPS)
            raise RequestError(f"a request is an object whose 'op' is one of {known}")
        result = OPS[request["op"]](peer, request)
        return {"ok": True, "result": result, "seconds": time.monotonic() - started}
    except Exception as e:  # every failure becomes an answer; the session lives on
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        java = getattr(e, "java_exception", None)
        if java is not None:
            message = str(java.toString())
        return {
            "ok": False,
            "error": f"{type(e).__name__}: {message}",
            "detail": traceback.format_exc(),
            "seconds": time.monotonic() - started,
        }


def main(argv: list[str]) -> int:
    # Answers go to the real stdout; everything else (Spark's JVM inherits fd 1) to stderr.
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    jars = [j for j in os.environ.get("HUDI_PEER_JARS", "").split(os.pathsep) if j]
    if not jars:
        answers.write(json.dumps({"ok": False, "error": "HUDI_PEER_JARS names no jar"}) + "\n")
        return 2
    peer = Peer(jars, os.environ.get("HUDI_PEER_MASTER", "local[2]"))
    if len(argv) == 3 and argv[1] == "call":
        answer = handle(peer, json.loads(argv[2]))
        answers.write(json.dumps(answer) + "\n")
        return 0 if answer["ok"] else 1
    if len(argv) == 2 and argv[1] == "serve":
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
            except json.JSONDecodeError as e:
                answers.write(json.dumps({"ok": False, "error": f"not JSON: {e}"}) + "\n")
                continue
            if request == {"op": "exit"}:
                break
            answers.write(json.dumps(handle(peer, request)) + "\n")
        return 0
    answers.write(__doc__ or "")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))

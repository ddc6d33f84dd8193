"""The daemon's reading of the configuration file (TOML, ``timeline/config_file.py``), validated
at start; errors name the key at fault.

Example (``service.toml``)::

    [service]
    request_store = "sqlite:////var/lib/async-indexer/service.sqlite"  # or postgresql://...
    http_host = "127.0.0.1"          # a non-loopback address requires `token`
    http_port = 8765
    token = ""
    reconcile_interval_seconds = 10  # desired indexes, requests, pending plans
    compaction_interval_seconds = 300  # the index's upkeep: compact by count, delete replaced
    clean_interval_seconds = 60      # roll back failed writes; clean and archive
    lease_seconds = 30               # one active daemon per table
    max_attempts = 3                 # per request, then it is marked failed
    backoff_seconds = 10             # doubled after every aborted attempt
    timeout_seconds = 900            # catch-up deadline of a build

    [spark]
    master = "local[*]"
    conf = { "spark.executor.memory" = "2g" }

    [[tables]]
    base = "/data/trips"
    index_types = ["column_stats", "bloom_filters"]   # desired: built when missing
    format = "native"     # or "hudi": in Apache Hudi's own metadata table (docs/hudi.md)
    columns = ["fare", "ts"]                            # for column_stats (default all)
    lock_url = ""                                       # default: see docs/operations.md, "Locks"
    storage_options = { endpoint_url = "http://127.0.0.1:9000" }
    conf = { "hoodie.client.heartbeat.interval_in_ms" = "60000" }
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metadata_table.layout import expand_index_types
from timeline.config_file import ConfigFile, TableSpec, find_table
from timeline.errors import ConfigError, UnknownPartitionError

__all__ = ["ServiceConfig", "TableSpec", "load_service_config", "parse_service_config"]


def default_store_url() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return f"sqlite:///{os.path.join(state, 'async-indexer', 'service.sqlite')}"


@dataclass(frozen=True)
class ServiceConfig:
    tables: tuple[TableSpec, ...]
    request_store: str = field(default_factory=default_store_url)
    http_host: str = "127.0.0.1"
    http_port: int = 8765
    token: str = ""
    reconcile_interval: float = 10.0
    compaction_interval: float = 300.0
    clean_interval: float = 60.0
    lease_seconds: float = 30.0
    max_attempts: int = 3
    backoff_seconds: float = 10.0
    timeout_seconds: float = 900.0
    spark_master: str | None = None
    spark_conf: dict[str, str] = field(default_factory=dict)

    @property
    def loopback(self) -> bool:
        try:
            return ipaddress.ip_address(self.http_host).is_loopback
        except ValueError:
            return self.http_host == "localhost"

    def table(self, base: str) -> TableSpec | None:
        return find_table(self.tables, base)


_SERVICE_KEYS = {
    "request_store": str,
    "http_host": str,
    "http_port": int,
    "token": str,
    "reconcile_interval_seconds": float,
    "compaction_interval_seconds": float,
    "clean_interval_seconds": float,
    "lease_seconds": float,
    "max_attempts": int,
    "backoff_seconds": float,
    "timeout_seconds": float,
}


def _typed(key: str, value: Any, kind: type) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ConfigError(key, f"expected {kind.__name__}, got {value!r}")
    if isinstance(value, int | float) and value <= 0 and key != "service.http_port":
        raise ConfigError(key, "must be positive")
    return value


def parse_service_config(data: Mapping[str, Any], source: str = "<config>") -> ServiceConfig:
    return service_config(ConfigFile.parse(data, source))


def service_config(file: ConfigFile) -> ServiceConfig:
    """The daemon's reading of the shared file: ``[service]`` checked here, at least one table,
    and only index types it can build."""
    source = file.source
    values: dict[str, Any] = {}
    for key, value in file.service.items():
        if key not in _SERVICE_KEYS:
            raise ConfigError(f"service.{key}", f"unknown key in {source}")
        values[key] = _typed(f"service.{key}", value, _SERVICE_KEYS[key])
    port: int = values.get("http_port", 8765)
    if not 0 <= port < 65536:
        raise ConfigError("service.http_port", "must be a port number (0 for any free port)")
    if not file.tables:
        raise ConfigError("tables", f"{source} needs at least one [[tables]] entry with a base")
    for n, spec in enumerate(file.tables):
        try:
            expand_index_types(spec.index_types, spec.columns)
        except (UnknownPartitionError, ConfigError) as e:  # an unknown name's names the known
            raise ConfigError(f"tables[{n}].index_types", str(e)) from e
    config = ServiceConfig(
        tables=file.tables,
        request_store=values.get("request_store") or default_store_url(),
        http_host=values.get("http_host", "127.0.0.1"),
        http_port=values.get("http_port", 8765),
        token=values.get("token", ""),
        reconcile_interval=values.get("reconcile_interval_seconds", 10.0),
        compaction_interval=values.get("compaction_interval_seconds", 300.0),
        clean_interval=values.get("clean_interval_seconds", 60.0),
        lease_seconds=values.get("lease_seconds", 30.0),
        max_attempts=values.get("max_attempts", 3),
        backoff_seconds=values.get("backoff_seconds", 10.0),
        timeout_seconds=values.get("timeout_seconds", 900.0),
        spark_master=file.spark_master,
        spark_conf=file.spark_conf,
    )
    if not config.loopback and not config.token:
        raise ConfigError(
            "service.token", f"required when http_host is {config.http_host} (not loopback)"
        )
    return config


def load_service_config(path: str) -> ServiceConfig:
    return service_config(ConfigFile.load(path))

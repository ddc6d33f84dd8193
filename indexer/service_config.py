"""The daemon's configuration file (TOML), validated at start; errors name the key at fault.

Example (``service.toml``)::

    [service]
    request_store = "sqlite:////var/lib/async-indexer/service.sqlite"  # or postgresql://...
    http_host = "127.0.0.1"          # a non-loopback address requires `token`
    http_port = 8765
    token = ""
    reconcile_interval_seconds = 10  # desired indexes, requests, pending plans
    compaction_interval_seconds = 300
    clean_interval_seconds = 60      # roll back failed writes
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
    columns = ["fare", "ts"]                            # for column_stats (default all)
    lock_url = ""                                       # default: see the README
    storage_options = { endpoint_url = "http://127.0.0.1:9000" }
    conf = { "hoodie.client.heartbeat.interval_in_ms" = "60000" }
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metadata_table.layout import PARTITIONS
from timeline.config import STORAGE_PREFIX, Config
from timeline.errors import ConfigError


def default_store_url() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return f"sqlite:///{os.path.join(state, 'async-indexer', 'service.sqlite')}"


@dataclass(frozen=True)
class TableSpec:
    base: str
    index_types: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    lock_url: str = ""
    storage_options: dict[str, Any] = field(default_factory=dict)
    conf: dict[str, str] = field(default_factory=dict)

    def config(self) -> Config:
        explicit: dict[str, Any] = dict(self.conf)
        if self.lock_url:
            explicit["indexer.lock.url"] = self.lock_url
        explicit.update({STORAGE_PREFIX + k: v for k, v in self.storage_options.items()})
        return Config.resolve(explicit=explicit)


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
        from timeline.storage import normalize_base_uri

        wanted = normalize_base_uri(base)
        return next((t for t in self.tables if normalize_base_uri(t.base) == wanted), None)


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
_TABLE_KEYS = {"base", "index_types", "columns", "lock_url", "storage_options", "conf"}


def _typed(key: str, value: Any, kind: type) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ConfigError(key, f"expected {kind.__name__}, got {value!r}")
    if isinstance(value, int | float) and value <= 0 and key != "service.http_port":
        raise ConfigError(key, "must be positive")
    return value


def parse_service_config(data: dict[str, Any], source: str = "<config>") -> ServiceConfig:
    unknown = set(data) - {"service", "spark", "tables"}
    if unknown:
        raise ConfigError(sorted(unknown)[0], f"unknown section in {source}")
    service = data.get("service", {})
    values: dict[str, Any] = {}
    for key, value in service.items():
        if key not in _SERVICE_KEYS:
            raise ConfigError(f"service.{key}", f"unknown key in {source}")
        values[key] = _typed(f"service.{key}", value, _SERVICE_KEYS[key])
    port: int = values.get("http_port", 8765)
    if not 0 <= port < 65536:
        raise ConfigError("service.http_port", "must be a port number (0 for any free port)")
    spark = data.get("spark", {})
    for key in spark:
        if key not in ("master", "conf"):
            raise ConfigError(f"spark.{key}", f"unknown key in {source}")
    tables = []
    raw_tables = data.get("tables", [])
    if not isinstance(raw_tables, list) or not raw_tables:
        raise ConfigError("tables", f"{source} needs at least one [[tables]] entry with a base")
    for n, raw in enumerate(raw_tables):
        where = f"tables[{n}]"
        for key in raw:
            if key not in _TABLE_KEYS:
                raise ConfigError(f"{where}.{key}", f"unknown key in {source}")
        if not isinstance(raw.get("base"), str) or not raw["base"]:
            raise ConfigError(f"{where}.base", "required: the table base path")
        types = tuple(raw.get("index_types", ()))
        for t in types:
            if t not in PARTITIONS:
                raise ConfigError(
                    f"{where}.index_types",
                    f"unknown index type {t!r}; known: {', '.join(PARTITIONS)}",
                )
        tables.append(
            TableSpec(
                raw["base"],
                types,
                tuple(raw.get("columns", ())),
                str(raw.get("lock_url", "")),
                dict(raw.get("storage_options", {})),
                {k: str(v) for k, v in raw.get("conf", {}).items()},
            )
        )
    config = ServiceConfig(
        tables=tuple(tables),
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
        spark_master=spark.get("master"),
        spark_conf={k: str(v) for k, v in spark.get("conf", {}).items()},
    )
    if not config.loopback and not config.token:
        raise ConfigError(
            "service.token", f"required when http_host is {config.http_host} (not loopback)"
        )
    return config


def load_service_config(path: str) -> ServiceConfig:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError("--config", f"no such file: {path}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("--config", f"{path} is not valid TOML: {e}") from None
    return parse_service_config(data, path)

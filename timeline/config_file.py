"""The configuration file (TOML): one file for the daemon and for every command.

``indexer serve --config`` reads all of it. Every other command takes the same file with
``--config`` and reads the parts that concern it: ``[spark]`` (master and settings for the
commands that start Spark) and the ``[[tables]]`` entry whose ``base`` is the command's table
(its ``lock_url``, ``storage_options`` and ``conf``). The file's values sit between the built-in
defaults and the environment (defaults < file < environment < ``--conf``)::

    [spark]
    master = "local[*]"
    conf = { "spark.executor.memory" = "2g" }

    [[tables]]
    base = "s3://bucket/trips"
    index_types = ["column_stats"]          # the daemon's desired indexes
    columns = ["fare"]
    lock_url = "postgresql://indexer@db/locks"
    storage_options = { endpoint_url = "https://s3.example.internal" }
    conf = { "hoodie.client.heartbeat.interval_in_ms" = "60000" }

``[service]`` is the daemon's alone (``indexer/service_config.py``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from timeline.config import STORAGE_PREFIX, Config
from timeline.errors import ConfigError
from timeline.storage import normalize_base_uri

SECTIONS = ("service", "spark", "tables")
TABLE_KEYS = ("base", "index_types", "columns", "format", "lock_url", "storage_options", "conf")
#: where a table's indexes are built: this project's index, or Apache Hudi's metadata table
INDEX_FORMATS = ("native", "hudi")
SPARK_KEYS = ("master", "conf")


@dataclass(frozen=True)
class TableSpec:
    """One ``[[tables]]`` entry."""

    base: str
    index_types: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    #: "native" (this project's index) or "hudi" (Apache Hudi's own metadata table)
    format: str = "native"
    lock_url: str = ""
    storage_options: dict[str, Any] = field(default_factory=dict)
    conf: dict[str, str] = field(default_factory=dict)

    def file_values(self) -> dict[str, Any]:
        """This entry's settings as configuration keys."""
        values: dict[str, Any] = dict(self.conf)
        if self.lock_url:
            values["indexer.lock.url"] = self.lock_url
        values.update({STORAGE_PREFIX + k: v for k, v in self.storage_options.items()})
        return values

    def config(self, explicit: Mapping[str, Any] | None = None) -> Config:
        return Config.resolve(file_values=self.file_values(), explicit=explicit)


@dataclass(frozen=True)
class ConfigFile:
    source: str
    tables: tuple[TableSpec, ...]
    spark_master: str | None = None
    spark_conf: dict[str, str] = field(default_factory=dict)
    service: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str) -> ConfigFile:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError("--config", f"no such file: {path}") from None
        except IsADirectoryError:
            raise ConfigError("--config", f"{path} is a folder, not a TOML file") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError("--config", f"{path} is not valid TOML: {e}") from None
        return cls.parse(data, path)

    @classmethod
    def parse(cls, data: Mapping[str, Any], source: str = "<config>") -> ConfigFile:
        """Check the sections every command shares; ``[service]`` is passed on unchecked."""
        unknown = set(data) - set(SECTIONS)
        if unknown:
            raise ConfigError(sorted(unknown)[0], f"unknown section in {source}")
        service = data.get("service", {})
        if not isinstance(service, dict):
            raise ConfigError("service", f"must be a table in {source}")
        spark = data.get("spark", {})
        if not isinstance(spark, dict):
            raise ConfigError("spark", f"must be a table in {source}")
        for key in spark:
            if key not in SPARK_KEYS:
                raise ConfigError(f"spark.{key}", f"unknown key in {source}")
        raw_tables = data.get("tables", [])
        if not isinstance(raw_tables, list):
            raise ConfigError("tables", f"must be [[tables]] entries in {source}")
        return cls(
            source=source,
            tables=tuple(_table(n, raw, source) for n, raw in enumerate(raw_tables)),
            spark_master=_optional_str("spark.master", spark.get("master")),
            spark_conf=_str_map("spark.conf", spark.get("conf", {})),
            service=dict(service),
        )

    def table(self, base: str) -> TableSpec | None:
        return find_table(self.tables, base)

    def require_table(self, base: str) -> TableSpec:
        spec = self.table(base)
        if spec is None:
            raise ConfigError("--config", f"{base} is not a table of {self.source}")
        return spec


def find_table(tables: Iterable[TableSpec], base: str) -> TableSpec | None:
    """The entry for ``base``, however its path is spelled (``file://``, a trailing slash)."""
    wanted = normalize_base_uri(base)
    return next((t for t in tables if normalize_base_uri(t.base) == wanted), None)


def _table(n: int, raw: Any, source: str) -> TableSpec:
    where = f"tables[{n}]"
    if not isinstance(raw, dict):
        raise ConfigError(where, f"must be a table in {source}")
    for key in raw:
        if key not in TABLE_KEYS:
            raise ConfigError(f"{where}.{key}", f"unknown key in {source}")
    if not isinstance(raw.get("base"), str) or not raw["base"]:
        raise ConfigError(f"{where}.base", "required: the table base path")
    for key in ("index_types", "columns"):
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}.{key}", f"expected a list of strings, got {value!r}")
    storage_options = raw.get("storage_options", {})
    if not isinstance(storage_options, dict):
        raise ConfigError(f"{where}.storage_options", "expected a table of options")
    form = raw.get("format", "native")
    if form not in INDEX_FORMATS:
        raise ConfigError(f"{where}.format", f"{form!r} is not one of {', '.join(INDEX_FORMATS)}")
    return TableSpec(
        raw["base"],
        tuple(raw.get("index_types", ())),
        tuple(raw.get("columns", ())),
        form,
        _optional_str(f"{where}.lock_url", raw.get("lock_url")) or "",
        dict(storage_options),
        _str_map(f"{where}.conf", raw.get("conf", {})),
    )


def _optional_str(key: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(key, f"expected a string, got {value!r}")
    return value


def _str_map(key: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ConfigError(key, f"expected a table of key = value, got {value!r}")
    return {k: str(v) for k, v in value.items()}

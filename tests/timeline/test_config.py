"""Configuration: one registry, fixed resolution order, clear errors."""

from __future__ import annotations

import pytest

from timeline.config import (
    HEARTBEAT_INTERVAL_MS,
    LOCK_URL,
    LOCK_WAIT_MS,
    Config,
    parse_assignments,
)
from timeline.errors import ConfigError


def test_defaults() -> None:
    config = Config.resolve(env={})
    assert config.get(LOCK_WAIT_MS) == 60_000
    assert config.get(LOCK_URL) == ""
    assert config.lock_timeout_seconds == 60.0
    assert config.storage_options == {}


def test_resolution_order_defaults_file_env_explicit() -> None:
    key = "hoodie.write.lock.wait_time_ms"
    assert Config.resolve({key: "1000"}, env={}).get(LOCK_WAIT_MS) == 1000
    env = {"HOODIE_WRITE_LOCK_WAIT_TIME_MS": "2000"}
    assert Config.resolve({key: "1000"}, env=env).get(LOCK_WAIT_MS) == 2000
    assert Config.resolve({key: "1000"}, env=env, explicit={key: 3000}).get(LOCK_WAIT_MS) == 3000


def test_storage_options_from_every_layer() -> None:
    config = Config.resolve(
        {"indexer.storage.endpoint_url": "http://file"},
        env={"INDEXER_STORAGE_KEY": "k", "INDEXER_STORAGE_ANON": "false"},
        explicit={"indexer.storage.secret": "s"},
    )
    assert config.storage_options == {
        "endpoint_url": "http://file",
        "key": "k",
        "secret": "s",
        "anon": False,
    }


@pytest.mark.parametrize(
    ("values", "key", "message"),
    [
        ({"indexer.lock.urll": "x"}, "indexer.lock.urll", "unknown key"),
        (
            {"hoodie.write.lock.wait_time_ms": "soon"},
            "hoodie.write.lock.wait_time_ms",
            "invalid value",
        ),
        (
            {"hoodie.write.lock.wait_time_ms": "-5"},
            "hoodie.write.lock.wait_time_ms",
            "must be positive",
        ),
        (
            {"hoodie.client.heartbeat.interval_in_ms": "10"},
            HEARTBEAT_INTERVAL_MS.key,
            "at least 100",
        ),
        ({"indexer.storage.": "x"}, "indexer.storage.", "missing the storage option"),
    ],
)
def test_errors_name_the_key(values: dict[str, str], key: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        Config.resolve(values, env={})
    assert err.value.key == key


def test_foreign_hoodie_keys_are_kept() -> None:
    config = Config.resolve({"hoodie.datasource.write.operation": "upsert"}, env={})
    assert config.extra == {"hoodie.datasource.write.operation": "upsert"}


def test_parse_assignments() -> None:
    assert parse_assignments(["a=1", "b==2", "c="]) == {"a": "1", "b": "=2", "c": ""}
    with pytest.raises(ConfigError, match="key=value"):
        parse_assignments(["novalue"])


def test_marker_type_spellings() -> None:
    from timeline.config import MARKERS_TYPE

    for spelling in ("timeline-server", "TIMELINE_SERVER_BASED", "timeline_server"):
        assert Config.resolve({"hoodie.write.markers.type": spelling}, env={}).get(
            MARKERS_TYPE
        ) == ("timeline_server_based")
    with pytest.raises(ConfigError, match="unknown marker type"):
        Config.resolve({"hoodie.write.markers.type": "zookeeper"}, env={})


def test_a_key_is_declared_once() -> None:
    """Two declarations of one key would each keep a default and a meaning of their own, and
    --help-config would list the last one only."""
    from timeline.config import REGISTRY, ConfigKey, _key

    existing = next(iter(REGISTRY.values()))
    with pytest.raises(ValueError, match="declared twice"):
        _key(ConfigKey(existing.key, str, "", "again"))

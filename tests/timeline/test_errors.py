"""Errors keep their message and context attributes across processes (pickling)."""

from __future__ import annotations

import pickle

import pytest

from timeline import errors
from timeline.instant import Action, Instant, State

CASES: list[errors.IndexerError] = [
    errors.StorageFileNotFoundError(".hoodie/x", "list"),
    errors.FileAlreadyExistsError(".hoodie/x"),
    errors.InvalidPathError("../x", "path segment '..' is not allowed"),
    errors.InvalidInstantError("x.commit", "bad"),
    errors.CorruptInstantError("/t/.hoodie/1.commit", "not JSON"),
    errors.InstantAlreadyExistsError(
        Instant("20261121101500123", Action.COMMIT, State.COMPLETED), "/t/.hoodie/x"
    ),
    errors.TableNotFoundError("/t"),
    errors.TableConfigError("/t/.hoodie/hoodie.properties", "missing keys"),
    errors.ConfigError("indexer.lock.url", "unknown"),
    errors.LockTimeoutError("table:/t", 1.5, "host:1:2"),
    errors.LockLostError("table:/t", "me", "expired"),
    errors.HeartbeatExpiredError("20261121101500123", 130.0),
]


@pytest.mark.parametrize("error", CASES, ids=lambda e: type(e).__name__)
def test_errors_survive_pickling(error: errors.IndexerError) -> None:
    clone = pickle.loads(pickle.dumps(error))
    assert type(clone) is type(error)
    assert str(clone) == str(error)
    assert clone.__dict__ == error.__dict__
    assert isinstance(clone, errors.IndexerError)


def test_messages_carry_context() -> None:
    assert str(errors.LockTimeoutError("table:/t", 1.5, None)) == (
        "timed out after 1.5s waiting for lock 'table:/t' (held by unknown holder)"
    )
    assert "missing" in str(errors.HeartbeatExpiredError("20261121101500123", None))

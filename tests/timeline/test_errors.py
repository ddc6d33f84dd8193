"""Errors keep their message and context attributes across processes (pickling)."""

from __future__ import annotations

import pickle

import pytest

from timeline import errors
from timeline.instant import Action, Instant, State

CASES: list[errors.TableError] = [
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
def test_errors_survive_pickling(error: errors.TableError) -> None:
    clone = pickle.loads(pickle.dumps(error))
    assert type(clone) is type(error)
    assert str(clone) == str(error)
    assert clone.__dict__ == error.__dict__
    assert isinstance(clone, errors.TableError)


def test_messages_carry_context() -> None:
    assert str(errors.LockTimeoutError("table:/t", 1.5, None)) == (
        "timed out after 1.5s waiting for lock 'table:/t' (held by unknown holder)"
    )
    assert "missing" in str(errors.HeartbeatExpiredError("20261121101500123", None))


def test_every_error_class_is_gathered_in_timeline_errors() -> None:
    """One place to look: every exception the packages define lives in ``timeline/errors.py``
    and derives from the one root (a private class that never leaves its module aside)."""
    import importlib
    import inspect
    import pkgutil

    defined_elsewhere = []
    for package in ("timeline", "metadata_table", "writer", "indexer"):
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            if info.name.endswith("__main__") or info.name == "timeline.errors":
                continue
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if (
                    inspect.isclass(value)
                    and issubclass(value, BaseException)
                    and value.__module__ == info.name
                    and not name.startswith("_")
                ):
                    defined_elsewhere.append(f"{info.name}.{name}")
    assert defined_elsewhere == []
    leaves = [v for v in vars(errors).values() if inspect.isclass(v) and issubclass(v, Exception)]
    assert len(leaves) > 30 and all(issubclass(v, errors.TableError) for v in leaves)


MOVED: list[errors.TableError] = [
    errors.MarkerServerError("http://127.0.0.1:1", "refused", 503),
    errors.BadRecordsError("uuid", "null key"),
    errors.InputFileError("in.csv", "no such file"),
    errors.CommitStateUnknownError(
        Instant("20261121101500123", Action.COMMIT, State.INFLIGHT), OSError("reset")
    ),
    errors.SparkWriteError("20261121101500123", "task failed"),
    errors.UnknownPartitionError("nope", ["files"]),
    errors.BloomFilterFormatError("short"),
    errors.FilterSyntaxError("a >", 3, "value expected"),
    errors.BuildCancelledError(),
    errors.InjectedFailure("build.mid"),
]


@pytest.mark.parametrize("error", MOVED, ids=lambda e: type(e).__name__)
def test_gathered_errors_survive_pickling(error: errors.TableError) -> None:
    clone = pickle.loads(pickle.dumps(error))
    assert type(clone) is type(error) and str(clone) == str(error)
    assert isinstance(clone, errors.TableError)

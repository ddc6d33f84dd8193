"""A lock provider on a SQL database through SQLAlchemy: SQLite (embedded default) or PostgreSQL.

One row per lock in ``async_indexer_locks``. Acquisition is a single atomic statement, an upsert
that takes the row only when it is absent or its lease has expired, followed by a read of the row
to see whose token won. Lease times are the *database's* clock, so hosts with skewed clocks agree.
Releasing expires the row instead of deleting it, so the fence number keeps increasing.

SQLite is safe across processes on one machine (its file locking); it is not for several hosts,
use PostgreSQL there. The default SQLite file is ``$XDG_STATE_HOME/async-indexer/locks.sqlite``
(``~/.local/state/async-indexer/locks.sqlite``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from timeline.errors import LockError
from timeline.locks.base import DEFAULT_LEASE_SECONDS, Lease, LockProvider

TABLE_NAME = "async_indexer_locks"
_DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE_NAME} ("
    " name VARCHAR(1024) PRIMARY KEY,"
    " owner VARCHAR(1024) NOT NULL,"
    " token VARCHAR(64) NOT NULL,"
    " fence BIGINT NOT NULL,"
    " expires_at DOUBLE PRECISION NOT NULL)"
)

_NOW = {
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
    "postgresql": "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)",
}


def default_sqlite_url() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return f"sqlite:///{os.path.join(state, 'async-indexer', 'locks.sqlite')}"


def normalize_sql_url(url: str) -> str:
    """``postgresql://`` means the psycopg 3 driver (the one the project installs)."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets a busy timeout and its folder created."""
    url = normalize_sql_url(url)
    parsed = sa.engine.make_url(url)
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(parsed.database)), exist_ok=True)
        kwargs["connect_args"] = {"timeout": 30}
        kwargs["poolclass"] = sa.pool.NullPool
    return sa.create_engine(url, **kwargs)


class SqlLockProvider(LockProvider):
    def __init__(self, url: str, lease_seconds: float = DEFAULT_LEASE_SECONDS) -> None:
        super().__init__(lease_seconds)
        self.url = normalize_sql_url(url)
        self._engine: Engine | None = None
        self._pid = 0
        backend = sa.engine.make_url(self.url).get_backend_name()
        if backend not in _NOW:
            raise LockError(f"lock database {backend!r} is not supported (sqlite or postgresql)")
        self._now = _NOW[backend]

    def __repr__(self) -> str:
        return (
            f"SqlLockProvider({sa.engine.make_url(self.url).render_as_string(hide_password=True)})"
        )

    @property
    def engine(self) -> Engine:
        # Connections must not cross a fork: a child process builds its own engine.
        if self._engine is None or self._pid != os.getpid():
            self._engine = make_engine(self.url)
            self._pid = os.getpid()
            self._create_table()
        return self._engine

    def _create_table(self) -> None:
        assert self._engine is not None
        try:
            with self._engine.begin() as conn:
                conn.execute(sa.text(_DDL))
        except sa.exc.SQLAlchemyError as e:
            # Processes creating it at the same moment race in PostgreSQL's catalog even with IF
            # NOT EXISTS: the loser gets a duplicate key (IntegrityError) or a duplicate type
            # (ProgrammingError). Either way the table is there, which is all that is needed.
            if self._table_exists():
                return
            raise LockError(f"cannot prepare the lock table at {self!r}: {e}") from e

    def _table_exists(self) -> bool:
        assert self._engine is not None
        try:
            return bool(sa.inspect(self._engine).has_table(TABLE_NAME))
        except sa.exc.SQLAlchemyError:
            return False

    def _run(self, fn: Any) -> Any:
        try:
            with self.engine.begin() as conn:
                return fn(conn)
        except sa.exc.SQLAlchemyError as e:
            raise LockError(f"lock database {self!r} failed: {e}") from e

    def try_acquire(self, name: str, owner: str, token: str) -> Lease | None:
        upsert = sa.text(
            f"INSERT INTO {TABLE_NAME} (name, owner, token, fence, expires_at) "
            f"VALUES (:name, :owner, :token, 1, {self._now} + :lease) "
            "ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, token = excluded.token, "
            f"fence = {TABLE_NAME}.fence + 1, expires_at = excluded.expires_at "
            f"WHERE {TABLE_NAME}.expires_at < {self._now}"
        )
        select = sa.text(f"SELECT token, fence FROM {TABLE_NAME} WHERE name = :name")

        def attempt(conn: Connection) -> Lease | None:
            conn.execute(
                upsert, {"name": name, "owner": owner, "token": token, "lease": self.lease_seconds}
            )
            row = conn.execute(select, {"name": name}).one()
            return Lease(name, owner, token, int(row.fence)) if row.token == token else None

        result: Lease | None = self._run(attempt)
        return result

    def renew(self, lease: Lease) -> bool:
        stmt = sa.text(
            f"UPDATE {TABLE_NAME} SET expires_at = {self._now} + :lease "
            "WHERE name = :name AND token = :token"
        )

        def attempt(conn: Connection) -> bool:
            params = {"name": lease.name, "token": lease.token, "lease": self.lease_seconds}
            return conn.execute(stmt, params).rowcount == 1

        return bool(self._run(attempt))

    def release(self, lease: Lease) -> None:
        stmt = sa.text(
            f"UPDATE {TABLE_NAME} SET expires_at = 0, owner = '' "
            "WHERE name = :name AND token = :token"
        )
        self._run(lambda conn: conn.execute(stmt, {"name": lease.name, "token": lease.token}))

    def holder(self, name: str) -> str | None:
        stmt = sa.text(
            f"SELECT owner FROM {TABLE_NAME} WHERE name = :name AND expires_at >= {self._now}"
        )
        row = self._run(lambda conn: conn.execute(stmt, {"name": name}).first())
        return str(row.owner) if row is not None and row.owner else None

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

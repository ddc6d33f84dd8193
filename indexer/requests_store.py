"""Index build requests, kept in a SQL database (SQLite by default, PostgreSQL at scale).

A request is created by ``indexer request``, ``POST /requests`` or by the daemon itself for a
desired index that is missing. States: ``pending`` -> ``running`` -> ``completed``, or back to
``pending`` with a later ``next_attempt_at`` after an aborted build (exponential backoff), or
``failed`` once ``max_attempts`` builds were aborted; ``last_error`` says why. Claiming a request
is one conditional UPDATE, so two daemons never run the same request.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa

from timeline.errors import TableError
from timeline.locks.sql import make_engine

_metadata = sa.MetaData()
REQUESTS = sa.Table(
    "async_indexer_requests",
    _metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("table_uri", sa.String(1024), nullable=False, index=True),
    sa.Column("index_types", sa.Text, nullable=False),
    sa.Column("columns", sa.Text, nullable=False),
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column("state", sa.String(16), nullable=False, index=True),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("instant", sa.String(32), nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("next_attempt_at", sa.Float, nullable=False),
)

ACTIVE = ("pending", "running")


@dataclass(frozen=True)
class IndexRequest:
    id: str
    table: str
    index_types: list[str]
    columns: list[str]
    source: str
    state: str
    attempts: int
    last_error: str | None
    instant: str | None
    created_at: float
    updated_at: float
    next_attempt_at: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _row(row: Any) -> IndexRequest:
    return IndexRequest(
        row.id,
        row.table_uri,
        json.loads(row.index_types),
        json.loads(row.columns),
        row.source,
        row.state,
        row.attempts,
        row.last_error,
        row.instant,
        row.created_at,
        row.updated_at,
        row.next_attempt_at,
    )


class RequestStore:
    def __init__(self, url: str) -> None:
        self.url = url
        try:
            self.engine = make_engine(url)
            _metadata.create_all(self.engine)
        except sa.exc.SQLAlchemyError as e:
            raise TableError(f"request store {url}: {e}") from e

    def close(self) -> None:
        self.engine.dispose()

    def create(
        self, table: str, index_types: list[str], columns: list[str], source: str = "manual"
    ) -> IndexRequest:
        now = time.time()
        request_id = str(uuid.uuid4())
        values: dict[str, Any] = {
            "id": request_id,
            "table_uri": table,
            "index_types": json.dumps(index_types),
            "columns": json.dumps(columns),
            "source": source,
            "state": "pending",
            "attempts": 0,
            "last_error": None,
            "instant": None,
            "created_at": now,
            "updated_at": now,
            "next_attempt_at": now,
        }
        with self.engine.begin() as conn:
            conn.execute(REQUESTS.insert().values(**values))
        found = self.get(request_id)
        assert found is not None
        return found

    def get(self, request_id: str) -> IndexRequest | None:
        with self.engine.connect() as conn:
            row = conn.execute(REQUESTS.select().where(REQUESTS.c.id == request_id)).first()
        return _row(row) if row is not None else None

    def list(
        self, table: str | None = None, states: tuple[str, ...] | None = None
    ) -> list[IndexRequest]:
        query = REQUESTS.select().order_by(REQUESTS.c.created_at)
        if table is not None:
            query = query.where(REQUESTS.c.table_uri == table)
        if states:
            query = query.where(REQUESTS.c.state.in_(states))
        with self.engine.connect() as conn:
            return [_row(r) for r in conn.execute(query)]

    def claim(self, table: str) -> IndexRequest | None:
        """The oldest due pending request of ``table``, now running (atomically)."""
        now = time.time()
        for candidate in self.list(table, ("pending",)):
            if candidate.next_attempt_at > now:
                continue
            with self.engine.begin() as conn:
                claimed = conn.execute(
                    REQUESTS.update()
                    .where(REQUESTS.c.id == candidate.id, REQUESTS.c.state == "pending")
                    .values(state="running", attempts=REQUESTS.c.attempts + 1, updated_at=now)
                ).rowcount
            if claimed == 1:
                return self.get(candidate.id)
        return None

    def _update(self, request_id: str, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                REQUESTS.update()
                .where(REQUESTS.c.id == request_id)
                .values(updated_at=time.time(), **values)
            )

    def completed(self, request_id: str, instant: str | None) -> None:
        self._update(request_id, state="completed", instant=instant, last_error=None)

    def aborted(
        self, request: IndexRequest, error: str, max_attempts: int, backoff: float
    ) -> IndexRequest:
        """Back to pending after ``backoff * 2^(attempts-1)`` seconds, or failed at the limit."""
        if request.attempts >= max_attempts:
            self._update(request.id, state="failed", last_error=error)
        else:
            delay = backoff * 2 ** (request.attempts - 1)
            self._update(
                request.id, state="pending", last_error=error, next_attempt_at=time.time() + delay
            )
        found = self.get(request.id)
        assert found is not None
        return found

    def requeue_running(self, table: str) -> int:
        """Requests left running by a daemon that died: pending again (its lease was taken over)."""
        with self.engine.begin() as conn:
            return int(
                conn.execute(
                    REQUESTS.update()
                    .where(REQUESTS.c.table_uri == table, REQUESTS.c.state == "running")
                    .values(state="pending", updated_at=time.time())
                ).rowcount
            )

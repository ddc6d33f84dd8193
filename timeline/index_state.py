"""Where our index lives, and the state of its partitions.

Our metadata table is ours, not Apache Hudi's: it lives in a folder of its own under ``.hoodie/``
(:data:`INDEX_FOLDER`, a name Hudi does not use), and the state of its partitions is a file of its
own there (:data:`STATE_FILE`), never Hudi's ``hoodie.table.metadata.*`` keys in
``hoodie.properties``. Hudi's readers act on those keys and on ``.hoodie/metadata`` (Hudi's own,
HFile-based metadata table), and Hudi's writers delete or re-initialize ``.hoodie/metadata`` when
their settings differ: anything of ours there would be read as Hudi's or destroyed by Hudi.

The state is three things, rewritten atomically (one overwrite) under the table lock:

* ``completed``: partitions readers use;
* ``inflight``: partitions being built, which writers update and readers ignore;
* ``columnStatsColumns``: the columns the column_stats partition indexes (empty: all).

A missing file is the empty state (no index).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from timeline.errors import IndexStateError

INDEX_FOLDER = ".hoodie/.async-indexer"
STATE_FILE = f"{INDEX_FOLDER}/partitions.json"
FORMAT_VERSION = 1

_PARTITION_NAME = re.compile(r"^[a-z][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class IndexState:
    completed: tuple[str, ...] = ()
    inflight: tuple[str, ...] = ()
    column_stats_columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in (*self.completed, *self.inflight):
            if not _PARTITION_NAME.match(name):
                raise IndexStateError(STATE_FILE, f"invalid metadata partition name {name!r}")
        both = set(self.completed) & set(self.inflight)
        if both:
            raise IndexStateError(
                STATE_FILE, f"metadata partitions both completed and inflight: {sorted(both)}"
            )

    @property
    def partitions(self) -> tuple[str, ...]:
        """Completed and inflight partitions: the ones a writer keeps up to date."""
        return (*self.completed, *self.inflight)

    def with_partitions(
        self,
        *,
        add_inflight: Iterable[str] = (),
        complete: Iterable[str] = (),
        remove: Iterable[str] = (),
    ) -> IndexState:
        """The state after moving partitions between states.

        ``add_inflight`` skips partitions already completed or inflight; ``complete`` requires the
        partition to be inflight (or already completed: idempotent); ``remove`` drops it from both.
        """
        completed = list(self.completed)
        inflight = list(self.inflight)
        for name in add_inflight:
            if name not in completed and name not in inflight:
                inflight.append(name)
        for name in complete:
            if name in completed:
                continue
            if name not in inflight:
                raise IndexStateError(
                    STATE_FILE, f"metadata partition {name!r} is not inflight, cannot complete it"
                )
            inflight.remove(name)
            completed.append(name)
        dropped = set(remove)
        return replace(
            self,
            completed=tuple(sorted(p for p in completed if p not in dropped)),
            inflight=tuple(sorted(p for p in inflight if p not in dropped)),
        )

    def to_bytes(self) -> bytes:
        document = {
            "version": FORMAT_VERSION,
            "completed": list(self.completed),
            "inflight": list(self.inflight),
            "columnStatsColumns": list(self.column_stats_columns),
        }
        return json.dumps(document, indent=1).encode()

    @classmethod
    def parse(cls, data: bytes, path: str = STATE_FILE) -> IndexState:
        """Parse the state file; raises :class:`IndexStateError` naming ``path``."""
        try:
            document = json.loads(data)
            if not isinstance(document, dict):
                raise ValueError("not a JSON object")
            version = document.get("version")
            if version != FORMAT_VERSION:
                raise IndexStateError(path, f"format version {version!r} is not {FORMAT_VERSION}")
            lists = {}
            for key in ("completed", "inflight", "columnStatsColumns"):
                value = document.get(key, [])
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise ValueError(f"{key} must be a list of strings")
                lists[key] = tuple(value)
        except ValueError as e:
            raise IndexStateError(path, f"not a valid index state file: {e}") from e
        try:
            return cls(lists["completed"], lists["inflight"], lists["columnStatsColumns"])
        except IndexStateError as e:
            raise IndexStateError(path, e.reason) from None

"""Where our index lives, and the state of its partitions.

Our metadata table is ours, not Apache Hudi's: it lives in a folder of its own under ``.hoodie/``
(:data:`INDEX_FOLDER`, a name Hudi does not use), and the state of its partitions is a file of its
own there (:data:`STATE_FILE`), never Hudi's ``hoodie.table.metadata.*`` keys in
``hoodie.properties``. Hudi's readers act on those keys and on ``.hoodie/metadata`` (Hudi's own,
HFile-based metadata table), and Hudi's writers delete or re-initialize ``.hoodie/metadata`` when
their settings differ: anything of ours there would be read as Hudi's or destroyed by Hudi.

The state is four things, rewritten atomically (one overwrite) under the table lock:

* ``completed``: partitions readers use;
* ``inflight``: partitions being built, which writers update and readers ignore;
* ``columnStatsColumns``: the columns the column_stats partition indexes (empty: all);
* ``layouts``: the layout of each partition's files (:data:`LAYOUT`), which it keeps from when
  it is made until it is dropped; a partition not named has layout 1.

A missing file is the empty state (no index). A state with layouts is format 2, which releases
that know only format 1 refuse to read (rather than write a partition in a layout they do not
know); one without is written as format 1.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from timeline.errors import IndexStateError

INDEX_FOLDER = ".hoodie/.async-indexer"
STATE_FILE = f"{INDEX_FOLDER}/partitions.json"
FORMAT_VERSION = 2
#: the format of a state that records no layout (what releases before layouts read and write)
_FORMAT_WITHOUT_LAYOUTS = 1

#: the layout of the files of a partition made now. 1: column_stats' records are routed to file
#: groups by their own key (column, data partition, data file); 2: by their data file's key, as
#: bloom_filters' are, so the stats a commit adds for one data file are one log file, however
#: many file groups the partition has. The other index types route alike in both.
LAYOUT = 2

_PARTITION_NAME = re.compile(r"^[a-z][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class IndexState:
    completed: tuple[str, ...] = ()
    inflight: tuple[str, ...] = ()
    column_stats_columns: tuple[str, ...] = ()
    #: partition -> its layout, for the partitions not at layout 1
    layouts: Mapping[str, int] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        for name in (*self.completed, *self.inflight):
            if not _PARTITION_NAME.match(name):
                raise IndexStateError(STATE_FILE, f"invalid metadata partition name {name!r}")
        for name, layout in self.layouts.items():
            if name not in (*self.completed, *self.inflight):
                raise IndexStateError(
                    STATE_FILE, f"a layout for metadata partition {name!r}, which is not there"
                )
            if layout not in range(1, LAYOUT + 1):
                raise IndexStateError(
                    STATE_FILE,
                    f"metadata partition {name!r} has layout {layout!r}; this release knows "
                    f"layouts 1 to {LAYOUT} (a newer release wrote it?)",
                )
        both = set(self.completed) & set(self.inflight)
        if both:
            raise IndexStateError(
                STATE_FILE, f"metadata partitions both completed and inflight: {sorted(both)}"
            )

    def layout(self, partition: str) -> int:
        """The layout of ``partition``'s files (:data:`LAYOUT`)."""
        return self.layouts.get(partition, 1)

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

        ``add_inflight`` skips partitions already completed or inflight, and gives those it adds
        the current :data:`LAYOUT`; ``complete`` requires the partition to be inflight (or
        already completed: idempotent); ``remove`` drops it from both, with its layout.
        """
        completed = list(self.completed)
        inflight = list(self.inflight)
        layouts = dict(self.layouts)
        for name in add_inflight:
            if name not in completed and name not in inflight:
                inflight.append(name)
                layouts[name] = LAYOUT
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
            layouts={p: n for p, n in sorted(layouts.items()) if p not in dropped and n != 1},
        )

    def to_bytes(self) -> bytes:
        document: dict[str, object] = {
            "version": FORMAT_VERSION if self.layouts else _FORMAT_WITHOUT_LAYOUTS,
            "completed": list(self.completed),
            "inflight": list(self.inflight),
            "columnStatsColumns": list(self.column_stats_columns),
        }
        if self.layouts:
            document["layouts"] = dict(sorted(self.layouts.items()))
        return json.dumps(document, indent=1).encode()

    @classmethod
    def parse(cls, data: bytes, path: str = STATE_FILE) -> IndexState:
        """Parse the state file; raises :class:`IndexStateError` naming ``path``."""
        try:
            document = json.loads(data)
            if not isinstance(document, dict):
                raise ValueError("not a JSON object")
            version = document.get("version")
            if version not in (_FORMAT_WITHOUT_LAYOUTS, FORMAT_VERSION):
                raise IndexStateError(
                    path,
                    f"format version {version!r} is not {_FORMAT_WITHOUT_LAYOUTS} or "
                    f"{FORMAT_VERSION} (a newer release wrote it?)",
                )
            lists = {}
            for key in ("completed", "inflight", "columnStatsColumns"):
                value = document.get(key, [])
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise ValueError(f"{key} must be a list of strings")
                lists[key] = tuple(value)
            layouts = document.get("layouts", {}) if version == FORMAT_VERSION else {}
            if not isinstance(layouts, dict) or not all(
                isinstance(n, int) and not isinstance(n, bool) for n in layouts.values()
            ):
                raise ValueError("layouts must map partitions to layout numbers")
        except ValueError as e:
            raise IndexStateError(path, f"not a valid index state file: {e}") from e
        try:
            return cls(lists["completed"], lists["inflight"], lists["columnStatsColumns"], layouts)
        except IndexStateError as e:
            raise IndexStateError(path, e.reason) from None

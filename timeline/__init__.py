"""The table kernel shared by writers and the indexer.

Storage, instants and the timeline, ``hoodie.properties``, locks, heartbeats. It imports none of
the other packages, and no Spark.
"""

from timeline.config import Config
from timeline.errors import TableError
from timeline.heartbeat import Heartbeat
from timeline.instant import WRITE_ACTIONS, Action, Instant, State
from timeline.instant_time import InstantTimeGenerator
from timeline.storage import FileInfo, Storage
from timeline.table import Table
from timeline.table_config import TableConfig, TableType
from timeline.timeline import ActiveTimeline, Timeline

__all__ = [
    "WRITE_ACTIONS",
    "Action",
    "ActiveTimeline",
    "Config",
    "FileInfo",
    "Heartbeat",
    "Instant",
    "InstantTimeGenerator",
    "State",
    "Storage",
    "Table",
    "TableConfig",
    "TableError",
    "TableType",
    "Timeline",
]

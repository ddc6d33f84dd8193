"""Write markers (docs/architecture.md §7.3): "this data file is being written by instant T".

A marker is created before its data file. Finalize uses them to delete files of failed or
duplicate task attempts that the commit does not name; rollback uses them to delete every file a
failed write created. The marker folder of instant T is ``.hoodie/.temp/<T>/``.
"""

from timeline.markers.base import (
    MARKER_ROOT,
    IOType,
    Marker,
    MarkerWriter,
    marker_folder,
    read_markers,
)
from timeline.markers.direct import DirectMarkers

__all__ = [
    "MARKER_ROOT",
    "DirectMarkers",
    "IOType",
    "Marker",
    "MarkerWriter",
    "marker_folder",
    "read_markers",
]

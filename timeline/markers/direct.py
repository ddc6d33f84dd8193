"""Direct markers: one empty file per data file, created write-once before the data file."""

from __future__ import annotations

import logging

from timeline.errors import FileAlreadyExistsError, MarkerAlreadyExistsError
from timeline.markers.base import Marker, marker_folder, read_markers
from timeline.storage import Storage

logger = logging.getLogger(__name__)


class DirectMarkers:
    """The direct markers of one instant."""

    def __init__(self, storage: Storage, instant_time: str) -> None:
        self.storage = storage
        self.instant_time = instant_time
        self.folder = marker_folder(instant_time)

    def create(self, marker: Marker) -> None:
        """Create the marker (write-once); raises :class:`MarkerAlreadyExistsError`."""
        try:
            self.storage.create(f"{self.folder}/{marker.name}")
        except FileAlreadyExistsError as e:
            raise MarkerAlreadyExistsError(marker.name, self.instant_time) from e

    def all(self) -> list[Marker]:
        return read_markers(self.storage, self.instant_time)

    def exists(self) -> bool:
        return bool(self.storage.list(self.folder))

    def delete_all(self) -> None:
        self.storage.delete(self.folder, recursive=True)
        logger.debug("markers of %s deleted", self.instant_time)

"""The writer's side of timeline-server-based markers: an HTTP client with the interface of
:class:`~timeline.markers.direct.DirectMarkers`.

Creating a marker is a POST that returns once the server has flushed it to ``MARKERS<i>``.
Requests have timeouts and a bounded number of retries with backoff; a retry that finds the
marker already there means an earlier attempt of ours landed (marker names carry the task's
write token, so no one else creates the same name). Listing and cleanup read and delete the
``MARKERS*`` files on storage directly, so finalize and rollback work with the server gone.
"""

from __future__ import annotations

import json
import logging
import random
import time
from typing import Any
from urllib.parse import urlencode

import urllib3

from timeline.errors import (
    MarkerAlreadyExistsError,
    MarkerServerError,
    WriteConflictError,
)
from timeline.instant import Action, Instant, State
from timeline.markers.base import Marker, marker_folder, read_markers
from timeline.markers.server import API
from timeline.storage import Storage

logger = logging.getLogger(__name__)


class TimelineServerMarkers:
    def __init__(
        self,
        url: str,
        storage: Storage,
        instant_time: str,
        timeout: float = 30.0,
        retries: int = 3,
    ) -> None:
        self.url = url.rstrip("/")
        self.storage = storage
        self.instant_time = instant_time
        self.folder = marker_folder(instant_time)
        self.timeout = timeout
        self.retries = retries
        self._http = urllib3.PoolManager(
            maxsize=32,
            timeout=urllib3.Timeout(connect=min(5.0, timeout), read=timeout),
            retries=False,
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_http"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._http = urllib3.PoolManager(
            maxsize=32, timeout=urllib3.Timeout(connect=5.0, read=self.timeout), retries=False
        )

    def _call(self, method: str, endpoint: str, **params: str) -> tuple[int, Any, int]:
        """(status, JSON body, attempt that answered); retries connection failures and 5xx."""
        fields = {"markerdirpath": self.storage.uri(self.folder), **params}
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(2.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.5))
            try:
                response = self._http.request(
                    method, f"{self.url}{API}/{endpoint}?{urlencode(fields)}"
                )
            except urllib3.exceptions.HTTPError as e:
                last = e
                continue
            if response.status >= 500:
                last = MarkerServerError(
                    self.url, response.data.decode(errors="replace"), response.status
                )
                continue
            try:
                body = json.loads(response.data or b"null")
            except json.JSONDecodeError as e:
                raise MarkerServerError(
                    self.url, f"not JSON: {response.data[:200]!r}", response.status
                ) from e
            return response.status, body, attempt
        raise MarkerServerError(self.url, f"unreachable after {self.retries + 1} attempts: {last}")

    def ping(self) -> None:
        """Raise :class:`MarkerServerError` unless the server answers."""
        status, body, _ = self._call("GET", "dir/exists")
        if status != 200:
            raise MarkerServerError(self.url, str(body), status)

    def create(self, marker: Marker) -> None:
        status, body, attempt = self._call("POST", "create", markername=marker.name)
        if status == 200 and body is True:
            return
        if status == 200 and body is False:
            if attempt > 0:
                return  # our earlier attempt landed before its answer was lost
            raise MarkerAlreadyExistsError(marker.name, self.instant_time)
        if status == 409:
            own = Instant(self.instant_time, Action.COMMIT, State.INFLIGHT)
            other = Instant(str(body.get("otherInstant")), Action.COMMIT, State.INFLIGHT)
            raise WriteConflictError(own, other, list(body.get("fileIds") or []))
        reason = body.get("error") if isinstance(body, dict) else body
        raise MarkerServerError(self.url, str(reason), status)

    def all(self) -> list[Marker]:
        return read_markers(self.storage, self.instant_time)

    def exists(self) -> bool:
        return bool(self.storage.list(self.folder))

    def delete_all(self) -> None:
        try:
            self._call("POST", "dir/delete")
        except MarkerServerError as e:
            logger.warning(
                "marker server could not delete %s (%s); deleting from storage", self.folder, e
            )
        self.storage.delete(self.folder, recursive=True)

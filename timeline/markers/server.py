"""Timeline-server-based markers (docs/architecture.md §7.3): a batched HTTP marker service.

Writers (or Spark executors) send marker requests over HTTP instead of creating one storage object
per data file. The server keeps every marker folder's markers in memory; requests wait in a queue,
and every batch interval (default 50 ms) a dispatcher hands each folder's pending requests to a
worker thread that owns one *slot* i of that folder exclusively: it appends the new markers to slot
i and rewrites ``MARKERS<i>`` atomically (one storage request for the whole batch), and only then
are the requests answered. So an acknowledged marker is always on storage, and a restarted server
rebuilds a folder's state from its ``MARKERS*`` files, lazily, on the first request for it.
``MARKERS.type`` holds ``TIMELINE_SERVER_BASED``. Files are UTF-8, one marker per line, each line
ending in a newline (Hudi's reload joined lines with commas; we never do).

Endpoints (``markerdirpath`` is the marker folder, ``<base>/.hoodie/.temp/<T>`` or relative):

====== ========================================= ============================================
POST   /v1/hoodie/marker/create?markerdirpath=&markername=  true, false (exists), 409 (conflict)
GET    /v1/hoodie/marker/all?markerdirpath=                 every acknowledged marker
GET    /v1/hoodie/marker/create-and-merge?markerdirpath=    those of IO type CREATE or MERGE
GET    /v1/hoodie/marker/dir/exists?markerdirpath=          true or false
POST   /v1/hoodie/marker/dir/delete?markerdirpath=          deletes the folder; true
====== ========================================= ============================================

Input is validated: a folder must be this table's ``.hoodie/.temp/<instant time>``, a marker name a
relative ``<partition>/<file>.marker.<IOType>`` of at most 1024 characters; anything else gets 400
with the reason. With early conflict detection on, a periodic check compares each folder's
markers (flushed and pending) with other live writers' markers (and optionally with commits
completed since the folder appeared); a conflict answers the folder's next create with 409.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from timeline.errors import FileAlreadyExistsError, InvalidPathError, WriteConflictError
from timeline.http_server import BackgroundHttpServer
from timeline.instant import Action, Instant, State, validate_timestamp
from timeline.markers.base import MARKER_ROOT, MARKER_TYPE_FILE, IOType, Marker, marker_folder

if TYPE_CHECKING:
    from timeline.table import Table

logger = logging.getLogger(__name__)

API = "/v1/hoodie/marker"
MARKER_TYPE = "TIMELINE_SERVER_BASED"
MAX_NAME_LENGTH = 1024
SLOT_PREFIX = "MARKERS"


@dataclass(frozen=True)
class MarkerServerConfig:
    batch_interval: float = 0.05
    threads: int = 20
    conflict_check_interval: float | None = None  # None: no early conflict detection
    check_commits: bool = False
    record_slot_writes: bool = False  # keep (folder, slot, thread, start, end) of every write

    def __post_init__(self) -> None:
        if self.batch_interval <= 0 or self.threads < 1:
            raise ValueError("batch_interval must be positive and threads at least 1")


@dataclass
class _Pending:
    name: str
    answer: asyncio.Future[bool]


@dataclass
class _Folder:
    instant_time: str
    slots: int
    markers: set[str] = field(default_factory=set)  # acknowledged (on storage)
    claimed: set[str] = field(default_factory=set)  # handed to a worker, not yet on storage
    pending: list[_Pending] = field(default_factory=list)
    entries: list[list[str]] = field(default_factory=list)  # slot i's lines; only its owner writes
    busy: set[int] = field(default_factory=set)
    next_slot: int = 0
    type_written: bool = False
    conflict: WriteConflictError | None = None
    start: Any = None  # TxnStart captured when the folder first appeared (commit check)
    loaded: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def path(self) -> str:
        return marker_folder(self.instant_time)

    def names(self) -> set[str]:
        return self.markers | self.claimed | {p.name for p in self.pending}


class _BadRequest(Exception):
    pass


class MarkerServer:
    """The marker service of one table. ``start()`` serves from a background thread."""

    def __init__(
        self,
        table: Table,
        host: str = "127.0.0.1",
        port: int = 0,
        config: MarkerServerConfig | None = None,
    ) -> None:
        self.table = table
        self.storage = table.storage
        self.config = config or MarkerServerConfig()
        self._folders: dict[str, _Folder] = {}
        self._workers = ThreadPoolExecutor(self.config.threads, thread_name_prefix="marker-slot")
        self._io = ThreadPoolExecutor(4, thread_name_prefix="marker-io")
        self._slot_guards: dict[tuple[str, int], threading.Lock] = {}
        self._guards_lock = threading.Lock()
        self.slot_writes: list[tuple[str, int, int, float, float]] = []
        self.slot_violations = 0
        self.batches = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._http = BackgroundHttpServer(self._app, host, port, "marker-server")

    @property
    def url(self) -> str:
        return self._http.url

    @property
    def port(self) -> int:
        return self._http.port

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> MarkerServer:
        self._http.start(timeout)
        logger.info("marker server for %s at %s", self.storage.base_uri, self.url)
        return self

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024)
        app.add_routes(
            [
                web.post(f"{API}/create", self._create),
                web.get(f"{API}/all", self._all),
                web.get(f"{API}/create-and-merge", self._create_and_merge),
                web.get(f"{API}/dir/exists", self._dir_exists),
                web.post(f"{API}/dir/delete", self._dir_delete),
            ]
        )
        app.on_startup.append(self._start_tasks)
        app.on_shutdown.append(self._drain)
        return app

    async def _start_tasks(self, _app: web.Application) -> None:
        self._tasks.append(asyncio.create_task(self._dispatch_forever()))
        if self.config.conflict_check_interval:
            self._tasks.append(asyncio.create_task(self._check_conflicts_forever()))

    async def _drain(self, _app: web.Application) -> None:
        for task in self._tasks:
            task.cancel()
        # answer what is still queued rather than leave writers hanging
        await self._dispatch_once()
        while any(f.busy for f in self._folders.values()):
            await asyncio.sleep(self.config.batch_interval)

    def stop(self) -> None:
        self._http.stop()
        self._workers.shutdown(wait=True)
        self._io.shutdown(wait=True)
        logger.info("marker server at %s stopped", self.url)

    def __enter__(self) -> MarkerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- validation ------------------------------------------------------------------------------

    def _instant_of(self, folder_path: str) -> str:
        if not folder_path:
            raise _BadRequest("markerdirpath is required")
        base = self.storage.base_uri.rstrip("/")
        rel = folder_path
        if folder_path.startswith(base + "/"):
            rel = folder_path[len(base) + 1 :]
        elif "://" in folder_path or folder_path.startswith("/"):
            raise _BadRequest(f"marker folder {folder_path} is not under this table ({base})")
        parts = rel.split("/")
        if len(parts) != 3 or f"{parts[0]}/{parts[1]}" != MARKER_ROOT:
            raise _BadRequest(f"marker folder {folder_path} is not {MARKER_ROOT}/<instant time>")
        try:
            return validate_timestamp(parts[2])
        except ValueError as e:
            raise _BadRequest(f"marker folder {folder_path}: {e}") from None

    @staticmethod
    def _marker_name(name: str) -> str:
        if not name:
            raise _BadRequest("markername is required")
        if len(name) > MAX_NAME_LENGTH:
            raise _BadRequest(f"marker name longer than {MAX_NAME_LENGTH} characters")
        try:
            return Marker.parse(name).name
        except InvalidPathError as e:
            raise _BadRequest(f"invalid marker name: {e.reason}") from None

    # --- folders ---------------------------------------------------------------------------------

    async def _folder(self, instant_time: str) -> _Folder:
        folder = self._folders.get(instant_time)
        if folder is None:
            folder = _Folder(instant_time, self.config.threads)
            self._folders[instant_time] = folder
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(self._io, self._load, folder)
            except BaseException:
                del self._folders[instant_time]
                folder.loaded.set()
                raise
            folder.loaded.set()
        else:
            await folder.loaded.wait()
        return folder

    def _load(self, folder: _Folder) -> None:
        """Rebuild a folder from its MARKERS files (after a restart), and note the writer's start."""
        entries: dict[int, list[str]] = {}
        for entry in self.storage.list(folder.path):
            name = entry.name
            if name == MARKER_TYPE_FILE:
                folder.type_written = True
            elif name.startswith(SLOT_PREFIX) and name[len(SLOT_PREFIX) :].isdigit():
                text = self.storage.read(entry.path).decode("utf-8")
                entries[int(name[len(SLOT_PREFIX) :])] = [x for x in text.split("\n") if x]
        slots = max([folder.slots, *(i + 1 for i in entries)])
        folder.slots = slots
        folder.entries = [entries.get(i, []) for i in range(slots)]
        for lines in folder.entries:
            folder.markers.update(lines)
        if self.config.check_commits:
            from timeline.conflict import TxnStart

            own = Instant(folder.instant_time, Action.COMMIT, State.INFLIGHT)
            folder.start = TxnStart.capture(own, self.table.timeline.load())
        if folder.markers:
            logger.info("reloaded %d markers of %s", len(folder.markers), folder.instant_time)

    # --- handlers --------------------------------------------------------------------------------

    async def _handle(self, request: web.Request, work: Any) -> web.StreamResponse:
        try:
            result = await work(request)
        except _BadRequest as e:
            return web.json_response({"error": str(e)}, status=400)
        except WriteConflictError as e:
            return web.json_response(
                {
                    "error": str(e),
                    "otherInstant": getattr(e.other_instant, "timestamp", str(e.other_instant)),
                    "fileIds": e.file_ids,
                },
                status=409,
            )
        except Exception as e:
            logger.exception("marker request %s failed", request.path_qs)
            return web.json_response({"error": f"{type(e).__name__}: {e}"}, status=500)
        return web.json_response(result)

    async def _create(self, request: web.Request) -> web.StreamResponse:
        async def work(req: web.Request) -> bool:
            instant_time = self._instant_of(req.query.get("markerdirpath", ""))
            name = self._marker_name(req.query.get("markername", ""))
            folder = await self._folder(instant_time)
            if folder.conflict is not None:
                raise folder.conflict
            if name in folder.names():
                return False
            answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            folder.pending.append(_Pending(name, answer))
            return await answer

        return await self._handle(request, work)

    async def _listing(self, request: web.Request, only: set[IOType] | None) -> web.StreamResponse:
        async def work(req: web.Request) -> list[str]:
            folder = await self._folder(self._instant_of(req.query.get("markerdirpath", "")))
            names = sorted(folder.markers)
            if only is not None:
                names = [n for n in names if Marker.parse(n).io_type in only]
            return names

        return await self._handle(request, work)

    async def _all(self, request: web.Request) -> web.StreamResponse:
        return await self._listing(request, None)

    async def _create_and_merge(self, request: web.Request) -> web.StreamResponse:
        return await self._listing(request, {IOType.CREATE, IOType.MERGE})

    async def _dir_exists(self, request: web.Request) -> web.StreamResponse:
        async def work(req: web.Request) -> bool:
            instant_time = self._instant_of(req.query.get("markerdirpath", ""))
            if instant_time in self._folders and self._folders[instant_time].names():
                return True
            loop = asyncio.get_running_loop()
            listing = await loop.run_in_executor(
                self._io, self.storage.list, marker_folder(instant_time)
            )
            return bool(listing)

        return await self._handle(request, work)

    async def _dir_delete(self, request: web.Request) -> web.StreamResponse:
        async def work(req: web.Request) -> bool:
            instant_time = self._instant_of(req.query.get("markerdirpath", ""))
            folder = self._folders.get(instant_time)
            if folder is not None:
                await folder.loaded.wait()
                while folder.busy:  # let workers finish before the files go
                    await asyncio.sleep(self.config.batch_interval)
                for waiting in folder.pending:
                    waiting.answer.set_result(False)
                self._folders.pop(instant_time, None)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(
                self._io, lambda: self.storage.delete(marker_folder(instant_time), recursive=True)
            )
            return True

        return await self._handle(request, work)

    # --- batching --------------------------------------------------------------------------------

    async def _dispatch_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.batch_interval)
            await self._dispatch_once()

    async def _dispatch_once(self) -> None:
        loop = asyncio.get_running_loop()
        for folder in list(self._folders.values()):
            if not folder.pending:
                continue
            free = [i for i in range(folder.slots) if i not in folder.busy]
            if not free:
                continue  # every slot is being written; next tick
            slot = free[folder.next_slot % len(free)]
            folder.next_slot += 1
            batch, folder.pending = folder.pending, []
            folder.busy.add(slot)
            folder.claimed.update(p.name for p in batch)
            self.batches += 1
            future = loop.run_in_executor(self._workers, self._flush, folder, slot, batch)
            future.add_done_callback(
                functools.partial(self._flushed, folder=folder, slot=slot, batch=batch)
            )

    def _guard(self, folder: _Folder, slot: int) -> threading.Lock:
        with self._guards_lock:
            return self._slot_guards.setdefault((folder.instant_time, slot), threading.Lock())

    def _flush(self, folder: _Folder, slot: int, batch: list[_Pending]) -> None:
        """Runs on the worker that owns ``slot``: append, rewrite MARKERS<slot>, then return."""
        guard = self._guard(folder, slot)
        if not guard.acquire(blocking=False):
            self.slot_violations += 1  # never expected: the dispatcher hands a slot to one worker
            guard.acquire()
        started = time.monotonic()
        try:
            if not folder.type_written:
                with contextlib.suppress(FileAlreadyExistsError):
                    self.storage.create(f"{folder.path}/{MARKER_TYPE_FILE}", MARKER_TYPE.encode())
                folder.type_written = True
            lines = folder.entries[slot] + [p.name for p in batch]
            body = "".join(f"{line}\n" for line in lines).encode("utf-8")
            self.storage.overwrite(f"{folder.path}/{SLOT_PREFIX}{slot}", body)
            folder.entries[slot] = lines
        finally:
            if self.config.record_slot_writes:
                self.slot_writes.append(
                    (folder.instant_time, slot, threading.get_ident(), started, time.monotonic())
                )
            guard.release()

    def _flushed(self, done: Any, folder: _Folder, slot: int, batch: list[_Pending]) -> None:
        """Back on the event loop: record and answer the batch."""
        names = [p.name for p in batch]
        folder.busy.discard(slot)
        folder.claimed.difference_update(names)
        error = done.exception()
        if error is None:
            folder.markers.update(names)
        for waiting in batch:
            if waiting.answer.done():
                continue
            if error is None:
                waiting.answer.set_result(True)
            else:
                waiting.answer.set_exception(error)

    # --- early conflict detection ----------------------------------------------------------------

    async def _check_conflicts_forever(self) -> None:
        assert self.config.conflict_check_interval
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.config.conflict_check_interval)
            for folder in list(self._folders.values()):
                if folder.conflict is not None or not folder.loaded.is_set():
                    continue
                markers = [Marker.parse(name) for name in folder.names()]
                groups = {(m.partition_path, m.file_id) for m in markers if not m.is_metadata}
                if not groups:
                    continue
                try:
                    await loop.run_in_executor(self._io, self._check_folder, folder, groups)
                except WriteConflictError as e:
                    folder.conflict = e
                    logger.warning("early conflict detected for %s: %s", folder.instant_time, e)
                except Exception as e:  # a failed check is no verdict; try again next period
                    logger.warning("early conflict check of %s failed: %s", folder.instant_time, e)

    def _check_folder(self, folder: _Folder, groups: set[tuple[str, str]]) -> None:
        from timeline.conflict import TxnStart
        from timeline.conflict.early import check_markers

        start = folder.start or TxnStart(
            Instant(folder.instant_time, Action.COMMIT, State.INFLIGHT), None
        )
        check_markers(self.table, start, groups, check_commits=self.config.check_commits)

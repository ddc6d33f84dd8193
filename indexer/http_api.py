"""The daemon's HTTP API (JSON): requests, status, Prometheus metrics.

=====  ====================  =====================================================================
GET    /                     a self-contained HTML status page (refreshes itself)
POST   /requests             ``{"table": base, "index_types": [...], "columns": [...]}`` -> 201
GET    /requests/<id>        the request: state, attempts, last error, timestamps
GET    /status               per table: partitions, pending instants, the running build's progress
GET    /metrics              Prometheus text format
=====  ====================  =====================================================================

Bad requests (malformed JSON, an unknown table or index type) get 4xx with a reason and schedule
nothing. When the daemon is bound to a non-loopback address, ``POST`` requires
``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import hmac
import json
from typing import Any

from aiohttp import web

from indexer.service import IndexerService
from indexer.status_page import render as render_page
from metadata_table.layout import expand_index_types
from timeline.errors import ConfigError, UnknownPartitionError
from timeline.http_server import BackgroundHttpServer
from timeline.storage import normalize_base_uri


def _error(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


def make_app(service: IndexerService) -> web.Application:
    config = service.config

    def authorized(request: web.Request) -> bool:
        if config.loopback:
            return True
        header = request.headers.get("Authorization", "")
        return header.startswith("Bearer ") and hmac.compare_digest(header[7:], config.token)

    async def create(request: web.Request) -> web.Response:
        if not authorized(request):
            return _error(401, "a bearer token is required")
        try:
            body: Any = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "the body must be a JSON object")
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object")
        table, types, columns = body.get("table"), body.get("index_types"), body.get("columns", [])
        if not isinstance(table, str) or not table:
            return _error(400, "'table' (a base path) is required")
        base = normalize_base_uri(table)
        if base not in service.tables:
            return _error(
                404, f"unknown table {table}; this daemon serves {', '.join(service.tables)}"
            )
        if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
            return _error(400, "'index_types' must be a non-empty list")
        if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
            return _error(400, "'columns' must be a list of column names")
        try:
            expand_index_types(types, columns)
        except (UnknownPartitionError, ConfigError) as e:
            return _error(400, str(e))  # an unknown name's error names the known ones
        created = service.store.create(base, list(dict.fromkeys(types)), columns)
        return web.json_response(created.to_json(), status=201)

    async def get(request: web.Request) -> web.Response:
        found = service.store.get(request.match_info["id"])
        if found is None:
            return _error(404, f"no request {request.match_info['id']}")
        return web.json_response(found.to_json())

    async def status(_request: web.Request) -> web.Response:
        return web.json_response(service.status())

    async def page(_request: web.Request) -> web.Response:
        return web.Response(
            text=render_page(service.status()), content_type="text/html", charset="utf-8"
        )

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(
            text=service.metrics.prometheus() + service.lag_metrics(),
            content_type="text/plain",
            charset="utf-8",
        )

    app = web.Application(client_max_size=64 * 1024)
    app.add_routes(
        [
            web.post("/requests", create),
            web.get("/requests/{id}", get),
            web.get("/", page),
            web.get("/status", status),
            web.get("/metrics", metrics),
        ]
    )
    return app


def start_api(service: IndexerService) -> BackgroundHttpServer:
    return BackgroundHttpServer(
        lambda: make_app(service), service.config.http_host, service.config.http_port, "indexer-api"
    ).start()

"""The cluster fixture's own helper: it waits through a master web UI that answers before its
JSON is ready, and leaves no JVM behind when the cluster does not start."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

from .conftest import SparkCluster


class _NotJsonYet(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_master_ui_without_its_json_yet_counts_no_worker(tmp_path: Path) -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), _NotJsonYet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cluster = SparkCluster(tmp_path)
        cluster.ui_port = server.server_address[1]
        assert cluster.alive_workers() == 0  # (it raised JSONDecodeError, ending a bench run)
    finally:
        server.shutdown()

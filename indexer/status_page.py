"""The daemon's status page (``GET /``): one self-contained HTML document, no external assets,
rendered from the same dictionary as ``GET /status``. It refreshes itself every few seconds.

Per table: its partitions with state and lag, the running build's progress, the active requests,
and the last builds with their durations drawn as bars (the longest fills the width)."""

from __future__ import annotations

import datetime as dt
from html import escape
from typing import Any

REFRESH_SECONDS = 5

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1d2733; background: #f6f8fa; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; }
.muted { color: #5b6875; } section { background: #fff; border: 1px solid #d8dee4;
  border-radius: 6px; padding: 12px 16px; margin-bottom: 16px; }
table { border-collapse: collapse; width: 100%; } th, td { text-align: left;
  padding: 4px 8px; border-bottom: 1px solid #eaeef2; } th { font-weight: 600; color: #3b4753; }
.state { padding: 1px 8px; border-radius: 10px; font-size: 12px; background: #eaeef2; }
.completed { background: #d1f0d9; } .inflight, .running, .queued { background: #fff0c2; }
.lost, .aborted, .failed { background: #ffd7d5; }
.bar { background: #4c8bf5; height: 12px; border-radius: 3px; min-width: 2px; }
.bar.aborted { background: #e5534b; } .bar.interrupted { background: #b0b8c1; }
"""


def _state(value: str | None) -> str:
    text = escape(value or "-")
    return f'<span class="state {text}">{text}</span>'


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.0f} s"


def _when(epoch: float | None) -> str:
    if not epoch:
        return "-"
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _partitions(lag: dict[str, dict[str, Any]]) -> str:
    if not lag:
        return '<p class="muted">No metadata partitions yet.</p>'
    rows = "".join(
        f"<tr><td>{escape(name)}</td><td>{_state(row['state'])}</td>"
        f"<td>{escape(row['reflects_upto'] or '-')}</td><td>{row['unapplied_instants']}</td>"
        f"<td>{_age(row['oldest_unapplied_age_seconds'])}</td><td>{row['files']}</td>"
        f"<td>{row['bytes']:,}</td></tr>"
        for name, row in sorted(lag.items())
    )
    return (
        "<table><tr><th>partition</th><th>state</th><th>reflects up to</th>"
        "<th>instants not applied</th><th>oldest</th><th>files</th><th>bytes</th></tr>"
        f"{rows}</table>"
    )


def _footprint(footprint: dict[str, Any] | None) -> str:
    if not footprint:
        return '<p class="muted">Not measured yet (every clean interval).</p>'
    items = "".join(
        f"<li>{escape(line)}</li>"
        for line in footprint_lines(footprint["storage"], footprint["services"])
    )
    return f"<ul>{items}</ul>"


def _running(running: dict[str, Any] | None) -> str:
    if not running:
        return '<p class="muted">No build running.</p>'
    done, total = running["tasks_done"], running["tasks_total"]
    share = 100 * done / total if total else 0
    return (
        f"<p>Building {escape(', '.join(running['index_types']))} "
        f"(request {escape(running['request'])}): {escape(running['phase'])}, "
        f"{done}/{total} tasks</p>"
        f'<div class="bar" style="width: {share:.0f}%"></div>'
    )


def _requests(requests: list[dict[str, Any]]) -> str:
    if not requests:
        return '<p class="muted">No active requests.</p>'
    rows = "".join(
        f"<tr><td>{escape(r['id'])}</td><td>{escape(', '.join(r['index_types']))}</td>"
        f"<td>{_state(r['state'])}</td><td>{r['attempts']}</td>"
        f"<td>{escape(r['last_error'] or '')}</td></tr>"
        for r in requests
    )
    return (
        "<table><tr><th>request</th><th>index types</th><th>state</th><th>attempts</th>"
        f"<th>last error</th></tr>{rows}</table>"
    )


def _builds(builds: list[dict[str, Any]]) -> str:
    if not builds:
        return '<p class="muted">No builds yet.</p>'
    longest = max(b["seconds"] for b in builds) or 1.0
    rows = "".join(
        f"<tr><td>{_when(b['finished_at'])}</td><td>{escape(', '.join(b['index_types']))}</td>"
        f"<td>{_state(b['outcome'])}</td><td>{b['seconds']:.1f} s</td>"
        f'<td style="width: 40%"><div class="bar {escape(b["outcome"])}" '
        f'style="width: {100 * b["seconds"] / longest:.0f}%"></div></td></tr>'
        for b in reversed(builds)
    )
    return (
        "<table><tr><th>finished</th><th>index types</th><th>outcome</th><th>duration</th>"
        f"<th></th></tr>{rows}</table>"
    )


def footprint_lines(storage: dict[str, Any], services: dict[str, Any]) -> list[str]:
    """The lines on a table's storage and on its last clean, archival and index compaction
    (``indexer status``, the status page)."""

    def usage(kind: str) -> str:
        u = storage[kind]
        return f"{u['files']:,} files ({u['bytes'] / 1e6:,.1f} MB)"

    lines = [
        f"storage: data {usage('data')}, index {usage('index')}, "
        f"timeline {storage['timeline']['files']:,} instant files, archive {usage('archive')}, "
        f"other .hoodie {usage('other')}"
        + (
            f", Hudi's metadata table {usage('hudi_metadata')}"
            if storage["hudi_metadata"]["files"]
            else ""
        )
    ]
    clean, archived, compaction = services["clean"], services["archive"], services["compaction"]
    lines.append(
        f"last clean: {clean['instant']}, {clean['files_deleted']} files deleted"
        if clean
        else "last clean: none on the active timeline"
    )
    lines.append(
        f"last archival: {archived['file']} at {archived['written']}, "
        f"{archived['instant_files']} instant files"
        if archived
        else "last archival: none"
    )
    lines.append(
        f"last index compaction: {compaction['instant']} ({compaction['partition']}, covering "
        f"{compaction['covers_upto']})"
        if compaction
        else "last index compaction: none"
    )
    return lines


def render(status: dict[str, Any]) -> str:
    """The page for a ``/status`` dictionary."""
    sections = []
    for base, table in status["tables"].items():
        leader = "this daemon leads it" if table["leader"] else "another daemon leads it"
        builds = [b for b in status.get("builds", []) if b["table"] == base]
        sections.append(
            f'<section><h2>{escape(base)}</h2><p class="muted">{leader}</p>'
            f"<h3>Partitions</h3>{_partitions(table['lag'])}"
            f"<h3>Storage and table services</h3>{_footprint(table.get('footprint'))}"
            f"<h3>Build</h3>{_running(table['running'])}"
            f"<h3>Requests</h3>{_requests(table['requests'])}"
            f"<h3>Last builds</h3>{_builds(builds)}</section>"
        )
    body = "".join(sections) or '<p class="muted">This daemon serves no tables.</p>'
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">'
        "<title>async-indexer</title>"
        f"<style>{_STYLE}</style></head><body>"
        f'<h1>async-indexer</h1><p class="muted">daemon {escape(status["daemon"])}; '
        f'refreshes every {REFRESH_SECONDS} s; JSON at <a href="/status">/status</a>, '
        f'metrics at <a href="/metrics">/metrics</a></p>{body}</body></html>'
    )


__all__ = ["footprint_lines", "render"]

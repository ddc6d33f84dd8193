"""Draw ``scripts/bench/longrun.py --out`` results as one SVG (no plotting library: four small
line charts against the number of commits, one line per run).

    python -m scripts.bench.plot_longrun alone.json daemon.json --out docs/longrun.svg
"""

from __future__ import annotations

import argparse
import json
from html import escape
from pathlib import Path
from typing import Any

PANELS = (
    ("data_files", "data files on storage"),
    ("hoodie_files", "files under .hoodie/"),
    ("commit_p50_ms", "commit p50 (ms)"),
    ("fresh_read_s", "fresh read in a new process (s)"),
)
COLOURS = ("#1f77b4", "#d62728", "#2ca02c")
WIDTH, HEIGHT, MARGIN = 360, 220, 48


def _panel(runs: list[dict[str, Any]], key: str, title: str, x0: int, y0: int) -> str:
    xs = [p["commits"] for run in runs for p in run["points"]]
    ys = [p[key] for run in runs for p in run["points"]]
    top = max(ys) * 1.1 or 1.0
    right = max(xs) or 1

    def at(x: float, y: float) -> str:
        px = x0 + MARGIN + (WIDTH - MARGIN - 10) * x / right
        py = y0 + HEIGHT - 30 - (HEIGHT - 60) * y / top
        return f"{px:.1f},{py:.1f}"

    out = [
        f'<text x="{x0 + WIDTH / 2}" y="{y0 + 18}" text-anchor="middle" '
        f'font-size="13">{escape(title)}</text>',
        f'<polyline fill="none" stroke="#888" points="{at(0, top)} {at(0, 0)} {at(right, 0)}"/>',
        f'<text x="{x0 + MARGIN - 4}" y="{y0 + 34}" text-anchor="end" font-size="10">'
        f"{top:,.0f}</text>"
        if top >= 10
        else f"{top:.2f}</text>",
        f'<text x="{x0 + MARGIN - 4}" y="{y0 + HEIGHT - 30}" text-anchor="end" '
        'font-size="10">0</text>',
        f'<text x="{x0 + WIDTH - 10}" y="{y0 + HEIGHT - 14}" text-anchor="end" '
        f'font-size="10">{right:,} commits</text>',
    ]
    for colour, run in zip(COLOURS, runs, strict=False):
        points = " ".join(at(p["commits"], p[key]) for p in run["points"])
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>')
    return "\n".join(out)


def render(runs: list[dict[str, Any]]) -> str:
    panels = [
        _panel(runs, key, title, (i % 2) * WIDTH, 30 + (i // 2) * HEIGHT)
        for i, (key, title) in enumerate(PANELS)
    ]
    legend = [
        f'<text x="{10 + 300 * i}" y="18" font-size="12" fill="{colour}">'
        f"{escape(run['label'])}</text>"
        for i, (colour, run) in enumerate(zip(COLOURS, runs, strict=False))
    ]
    width, height = 2 * WIDTH, 30 + 2 * HEIGHT
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>\n'
        + "\n".join(legend + panels)
        + "\n</svg>\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="JSON files written by longrun.py --out")
    parser.add_argument("--out", required=True, help="the SVG to write")
    args = parser.parse_args(argv)
    runs = [json.loads(Path(name).read_text()) for name in args.runs]
    Path(args.out).write_text(render(runs))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

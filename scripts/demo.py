"""`make demo`: the main job on embedded defaults.

Today (kernel milestone): create a local table, walk a commit and a clean through their states
under the table lock (SQLite by default) with a heartbeat, and print the timeline. Later milestones
turn this into writers ingesting while the indexer builds indexes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from timeline import Action, Table
from timeline.config import Config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = os.path.join(ROOT, "demo-output", "trips")


def main() -> int:
    shutil.rmtree(BASE, ignore_errors=True)
    config = Config.resolve(
        explicit={
            "indexer.lock.url": f"sqlite:///{os.path.join(ROOT, 'demo-output', 'locks.sqlite')}"
        }
    )
    table = Table.create(BASE, "trips", ["uuid"], ["city"], precombine_field="ts", config=config)
    print(f"created table at {BASE}")
    for _ in range(3):
        instant = table.timeline.create_requested(Action.COMMIT)
        heartbeat = table.heartbeat(instant.timestamp).start()
        inflight = table.timeline.transition_to_inflight(instant)
        with table.lock(f"demo commit {instant.timestamp}") as lock:
            lock.ensure_valid()
            heartbeat.ensure_alive()
            table.timeline.complete(
                inflight, {"partitionToWriteStats": {}, "operationType": "INSERT"}
            )
        heartbeat.stop()
    table.timeline.create_requested(Action.CLEAN)
    table.close()
    print()
    return subprocess.call([sys.executable, "-m", "timeline", "show", BASE])


if __name__ == "__main__":
    sys.exit(main())

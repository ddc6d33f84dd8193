"""The Spark build's task bodies: bloom filters (about 16 KB per data file) never go through the
shuffle. The read tasks are the bloom_filters file groups: each reads the data files whose
filters go to its group, writes that group's base file itself, and sends on only the other
partitions' records."""

from __future__ import annotations

from pathlib import Path

from metadata_table.layout import BLOOM_FILTERS, COLUMN_STATS, NOTHING, read_records
from metadata_table.partition_writer import PartitionWriter
from metadata_table.spark_build import _records_task, _write_task
from metadata_table.table import MetadataTable
from timeline.index_state import LAYOUT
from timeline.instant import Action, State
from writer.client import WriteClient

from ..metadata_table.test_metadata_table import keys, make_table, rows


def test_read_tasks_write_the_bloom_groups_and_shuffle_only_the_rest(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    client = WriteClient(table)
    for lo in range(0, 90, 10):
        client.insert(rows(keys(lo, lo + 10)))
    writer = PartitionWriter(table)
    types = [COLUMN_STATS, BLOOM_FILTERS]
    with table.lock("test") as lock:
        for partition in types:
            writer.create_partition(partition, 2, lock)
    last = table.timeline.load().last_settled_write()
    upto = last.timestamp if last else NOTHING
    builds = [writer.begin_build(p, upto, 2, (), LAYOUT) for p in types]
    files = writer.visible_files(table.timeline.load(), upto, table.reload_index_state())
    numbered = [(n, g) for n, b in enumerate(builds) for g in range(b.groups)]
    slots = {key: slot for slot, key in enumerate(numbered)}
    marker_instant = table.timeline.generator.next()
    bloom = builds[1]
    assert bloom.written_where_read and not builds[0].written_where_read
    sent: dict[int, list[tuple[str, object]]] = {slot: [] for slot in slots.values()}
    for group in range(bloom.groups):
        mine = [f for f in files if bloom.group_of(f) == group]
        assert mine, "both groups hold data files"
        owner = (1, group, marker_instant)
        for slot, payload in _records_task(iter(mine), table.storage, builds, slots, None, owner):
            sent[slot].append(payload)
    for group in range(bloom.groups):
        payloads = sent[slots[(1, group)]]
        assert [kind for kind, _ in payloads] == ["written"], "no bloom record is shuffled"
    for group in range(builds[0].groups):
        assert {kind for kind, _ in sent[slots[(0, group)]]} == {"records"}
    sizes: dict[str, dict[str, int]] = {p: {} for p in types}
    for slot in slots.values():
        for partition, fg, size in _write_task(
            slot,
            iter((slot, p) for p in sent[slot]),
            table.storage,
            [(builds[n], g) for n, g in numbered],
            marker_instant,
        ):
            sizes[partition][fg] = size
    for build in builds:
        writer.complete_build(build, sizes[build.partition])
    mdt = MetadataTable(table)
    done = mdt.timeline.load().with_actions(Action.COMPACTION)
    assert all(i.state is State.COMPLETED for i in done)
    reader = mdt.reader(table.timeline.load())
    blooms = reader.read(BLOOM_FILTERS)
    assert blooms.num_rows == len(files)
    for base, _ in reader.slices(BLOOM_FILTERS).values():
        assert base is not None
        held, _ = read_records(mdt.storage, base.path, ["key"])
        assert held.num_rows > 0

"""hoodie.properties: keys, checksum, validation, backup, metadata partitions state; the Table."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timeline import properties
from timeline.config import Config
from timeline.errors import (
    IndexStateError,
    LockLostError,
    TableAlreadyExistsError,
    TableConfigError,
    TableNotFoundError,
)
from timeline.index_state import LAYOUT, IndexState
from timeline.storage import Storage
from timeline.table import Table, read_table_config
from timeline.table_config import (
    BACKUP_FILE,
    PROPERTIES_FILE,
    TableConfig,
    TableType,
    table_checksum,
)

INPROCESS = Config.resolve(explicit={"indexer.lock.url": "inprocess"})


def test_checksum_matches_hudi() -> None:
    # docs/architecture.md §7.1: crc32("default.v6_simplekeygen_nonhivestyle") = 616688896
    assert table_checksum("v6_simplekeygen_nonhivestyle", "default") == 616688896


def test_new_config_has_the_required_hudi_keys() -> None:
    config = TableConfig.new("trips", ["uuid"], ["city"], "ts")
    p = config.props
    assert p["hoodie.table.name"] == "trips"
    assert p["hoodie.table.type"] == "COPY_ON_WRITE"
    assert p["hoodie.table.version"] == "6"
    assert p["hoodie.timeline.layout.version"] == "1"
    assert p["hoodie.table.recordkey.fields"] == "uuid"
    assert p["hoodie.table.partition.fields"] == "city"
    assert p["hoodie.table.precombine.field"] == "ts"
    assert p["hoodie.table.keygenerator.class"] == "org.apache.hudi.keygen.SimpleKeyGenerator"
    assert p["hoodie.table.base.file.format"] == "PARQUET"
    assert p["hoodie.populate.meta.fields"] == "true"
    assert p["hoodie.table.checksum"] == str(table_checksum("trips"))
    unpartitioned = TableConfig.new("t", ["a", "b"])
    assert unpartitioned.props["hoodie.table.keygenerator.class"].endswith(
        "NonpartitionedKeyGenerator"
    )
    assert (
        TableConfig.new("t", ["a", "b"], ["p"])
        .props["hoodie.table.keygenerator.class"]
        .endswith("ComplexKeyGenerator")
    )


def test_round_trip_through_bytes() -> None:
    config = TableConfig.new("trips", ["uuid"], ["city"], "ts", TableType.MERGE_ON_READ, "db")
    assert TableConfig.parse(config.to_bytes()) == config


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda p: p.pop("hoodie.table.name"), "missing required keys: hoodie.table.name"),
        (
            lambda p: p.update({"hoodie.table.version": "8"}),
            r"hoodie.table.version=8 \(Apache Hudi 1.x\) is not supported",
        ),
        (
            lambda p: p.update({"hoodie.table.base.file.format": "ORC"}),
            "hoodie.table.base.file.format=ORC is not supported",
        ),
        (
            lambda p: p.update({"hoodie.timeline.layout.version": "2"}),
            "hoodie.timeline.layout.version=2",
        ),
        (lambda p: p.update({"hoodie.table.type": "HEAP"}), "is not a table type"),
        (lambda p: p.update({"hoodie.table.checksum": "1"}), "checksum 1 does not match"),
    ],
)
def test_invalid_properties_name_the_problem(edit: Any, message: str) -> None:
    props = dict(TableConfig.new("trips", ["uuid"]).props)
    edit(props)
    data = properties.dumps(props).encode()
    with pytest.raises(TableConfigError, match=message) as err:
        TableConfig.parse(data, "/t/.hoodie/hoodie.properties")
    assert err.value.path == "/t/.hoodie/hoodie.properties"


def test_optional_keys_default_as_hudi_defaults_them() -> None:
    """A table Apache Hudi wrote may lack keys Hudi treats as optional (hudi-rs's sample tables
    have no base file format, for example): they take Hudi's defaults."""
    props = dict(TableConfig.new("trips", ["uuid"]).props)
    for key in (
        "hoodie.table.type",
        "hoodie.table.base.file.format",
        "hoodie.populate.meta.fields",
        "hoodie.table.checksum",
        "hoodie.table.recordkey.fields",
    ):
        props.pop(key)
    config = TableConfig.parse(properties.dumps(props).encode())
    assert config.table_type is TableType.COPY_ON_WRITE
    assert config.get("hoodie.table.base.file.format") == "PARQUET"
    assert config.populate_meta_fields is True
    assert config.record_key_fields == ()


def test_new_tables_carry_none_of_hudis_metadata_keys() -> None:
    assert not [k for k in TableConfig.new("trips", ["uuid"]).props if "table.metadata" in k]


def test_metadata_partition_transitions() -> None:
    step = IndexState().with_partitions(add_inflight=["column_stats", "files"])
    assert step.inflight == ("column_stats", "files")
    step = step.with_partitions(complete=["files"])
    assert step.completed == ("files",)
    assert step.inflight == ("column_stats",)
    # idempotent: adding a completed partition as inflight is skipped; completing twice is a no-op
    again = step.with_partitions(add_inflight=["files"], complete=["files"])
    assert again == step
    with pytest.raises(IndexStateError, match="is not inflight"):
        step.with_partitions(complete=["bloom_filters"])
    dropped = step.with_partitions(remove=["files", "column_stats"])
    assert dropped.completed == () and dropped.inflight == ()
    assert dropped.layouts == {}


def test_a_partition_keeps_the_layout_it_was_made_with() -> None:
    """A partition added now gets the current layout and keeps it (a partition a state of
    format 1 names has layout 1); dropped, it loses it, and made again it gets the current one.
    A state with layouts is format 2, one without is written as format 1 (which releases before
    layouts read)."""
    old = IndexState.parse(b'{"version": 1, "completed": ["column_stats"]}')
    assert old.layout("column_stats") == 1
    assert json.loads(old.to_bytes())["version"] == 1
    grown = old.with_partitions(add_inflight=["files", "column_stats"])
    assert grown.layout("files") == LAYOUT == 2 and grown.layout("column_stats") == 1
    grown = grown.with_partitions(complete=["files"])
    assert grown.layout("files") == LAYOUT
    document = json.loads(grown.to_bytes())
    assert document["version"] == 2 and document["layouts"] == {"files": LAYOUT}
    assert IndexState.parse(grown.to_bytes()) == grown
    again = grown.with_partitions(remove=["column_stats"]).with_partitions(
        add_inflight=["column_stats"]
    )
    assert again.layout("column_stats") == LAYOUT
    back = again.with_partitions(remove=["files", "column_stats"])
    assert back.layouts == {} and json.loads(back.to_bytes())["version"] == 1


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (b"{not json", "not a valid index state file"),
        (b'{"version": 3}', "format version 3 is not 1 or 2"),
        (b'{"version": 2, "completed": ["files"], "layouts": []}', "layouts must map"),
        (
            b'{"version": 2, "completed": ["files"], "layouts": {"files": 3}}',
            "has layout 3; this release knows layouts 1 to 2",
        ),
        (
            b'{"version": 2, "completed": ["files"], "layouts": {"column_stats": 2}}',
            "a layout for metadata partition 'column_stats', which is not there",
        ),
        (b'{"version": 1, "completed": "files"}', "completed must be a list"),
        (
            b'{"version": 1, "completed": ["files"], "inflight": ["files"]}',
            "both completed and inflight",
        ),
        (b'{"version": 1, "completed": ["../x"]}', "invalid metadata partition name"),
    ],
)
def test_invalid_index_state_names_the_problem(document: bytes, message: str) -> None:
    with pytest.raises(IndexStateError, match=message) as err:
        IndexState.parse(document, "/t/.hoodie/.async-indexer/partitions.json")
    assert err.value.path == "/t/.hoodie/.async-indexer/partitions.json"
    state = IndexState(("files",), ("column_stats",), ("fare",))
    assert IndexState.parse(state.to_bytes()) == state


_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30
)


@given(st.dictionaries(_text.filter(lambda k: k != ""), _text, max_size=8))
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert properties.loads(properties.dumps(props, comment="c")) == props


def test_properties_reads_java_syntax() -> None:
    text = "# comment\n! also\n  a = 1\nb:2\nc 3\nlong = x\\\n    y\nesc=\\u00e9\\:\\=\n"
    assert properties.loads(text) == {"a": "1", "b": "2", "c": "3", "long": "xy", "esc": "é:="}


# --- the Table -----------------------------------------------------------------------------------


def test_create_and_open(storage: Storage) -> None:
    table = Table.create(storage.base_uri, "trips", ["uuid"], ["city"], "ts", config=_cfg(storage))
    opened = Table.open(storage.base_uri, _cfg(storage))
    assert opened.table_config == table.table_config
    with pytest.raises(TableAlreadyExistsError):
        Table.create(storage.base_uri, "other", ["id"], config=_cfg(storage))
    assert Table.open(storage.base_uri, _cfg(storage)).table_config.name == "trips"


def _cfg(storage: Storage) -> Config:
    explicit: dict[str, Any] = {"indexer.lock.url": "inprocess"}
    explicit.update({f"indexer.storage.{k}": v for k, v in storage.options.items()})
    return Config.resolve(explicit=explicit)


def test_open_missing_table(tmp_path: Any) -> None:
    with pytest.raises(TableNotFoundError) as err:
        Table.open(str(tmp_path / "nothing"))
    assert err.value.base_uri.endswith("nothing")


def test_update_metadata_partitions_under_the_lock(storage: Storage) -> None:
    table = Table.create(storage.base_uri, "trips", ["uuid"], config=_cfg(storage))
    properties_before = storage.read(PROPERTIES_FILE)
    with table.lock("test") as lock:
        table.update_metadata_partitions(lock, add_inflight=["files", "column_stats"])
        table.update_metadata_partitions(lock, complete=["files"])
    reread = Table.open(storage.base_uri, _cfg(storage)).reload_index_state()
    assert reread.completed == ("files",)
    assert reread.inflight == ("column_stats",)
    assert storage.read(PROPERTIES_FILE) == properties_before, "hoodie.properties is Hudi's"
    assert not storage.exists(BACKUP_FILE)


def test_update_refuses_to_write_under_a_lost_lock(tmp_path: Any) -> None:
    table = Table.create(str(tmp_path), "trips", ["uuid"], config=INPROCESS)
    lock = table.lock("test")
    lock.release()
    with pytest.raises(LockLostError):
        table.update_metadata_partitions(lock, add_inflight=["files"])
    assert Table.open(str(tmp_path), INPROCESS).reload_index_state().inflight == ()


def test_backup_is_used_when_the_main_file_is_bad(tmp_path: Any) -> None:
    storage = Storage(str(tmp_path))
    table = Table.create(str(tmp_path), "trips", ["uuid"], config=INPROCESS)
    good = storage.read(PROPERTIES_FILE)
    storage.overwrite(BACKUP_FILE, good)
    storage.overwrite(PROPERTIES_FILE, b"hoodie.table.name=tr")  # torn write by another tool
    assert read_table_config(storage) == table.table_config
    storage.delete(PROPERTIES_FILE)
    assert read_table_config(storage) == table.table_config
    storage.delete(BACKUP_FILE)
    with pytest.raises(TableNotFoundError):
        read_table_config(storage)


def test_bad_main_file_without_backup_is_a_config_error(tmp_path: Any) -> None:
    storage = Storage(str(tmp_path))
    storage.create(PROPERTIES_FILE, b"hoodie.table.name=x\n")
    with pytest.raises(TableConfigError, match="missing required keys") as damaged:
        read_table_config(storage)
    assert "restore it from a copy" in str(damaged.value)  # what to do
    good = TableConfig.new("t", ["id"]).props
    storage.overwrite(
        PROPERTIES_FILE, TableConfig({**good, "hoodie.table.version": "8"}).to_bytes()
    )
    with pytest.raises(TableConfigError, match="not supported") as other_kind:
        read_table_config(storage)
    assert "restore" not in str(other_kind.value), "a table of another kind is not damaged"


def test_invalid_table_definitions() -> None:
    with pytest.raises(TableConfigError, match="invalid table name"):
        TableConfig.new("bad name", ["id"])
    with pytest.raises(TableConfigError, match="record key"):
        TableConfig.new("t", [])


def test_an_unchanged_file_is_parsed_once_and_a_changed_one_read_anew(tmp_path: Any) -> None:
    storage = Storage(str(tmp_path))
    table = Table.create(str(tmp_path), "trips", ["uuid"], config=INPROCESS)
    assert Table.open(str(tmp_path), INPROCESS).table_config is read_table_config(storage)
    changed = table.table_config.props | {"hoodie.table.precombine.field": "ts"}
    storage.overwrite(PROPERTIES_FILE, TableConfig(changed).to_bytes())
    assert read_table_config(storage).precombine_field == "ts"

"""The one Arrow type classifier, and the two vocabularies that map it (Avro, column stats)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from metadata_table.records import value_kind
from timeline.arrow_types import ScalarKind, scalar_kind, stored_type
from timeline.errors import UnsupportedTypeError
from writer.avro import avro_schema

CASES = [
    (pa.bool_(), ScalarKind.BOOLEAN, "boolean", "bool"),
    (pa.int8(), ScalarKind.INT, "int", "int"),
    (pa.uint16(), ScalarKind.INT, "int", "int"),
    (pa.int32(), ScalarKind.INT, "int", "int"),
    (pa.int64(), ScalarKind.LONG, "long", "int"),
    (pa.uint32(), ScalarKind.LONG, "long", "int"),
    (pa.uint64(), ScalarKind.UNSIGNED_LONG, None, "int"),
    (pa.float32(), ScalarKind.FLOAT, "float", "float"),
    (pa.float64(), ScalarKind.DOUBLE, "double", "float"),
    (pa.string(), ScalarKind.STRING, "string", "string"),
    (pa.large_string(), ScalarKind.STRING, "string", "string"),
    (pa.binary(), ScalarKind.BINARY, "bytes", "binary"),
    (pa.binary(4), ScalarKind.FIXED_BINARY, None, "binary"),
    (pa.date32(), ScalarKind.DATE, {"type": "int", "logicalType": "date"}, "date"),
    (pa.date64(), ScalarKind.DATE_MILLIS, None, "date"),
    (
        pa.timestamp("ms"),
        ScalarKind.TIMESTAMP,
        {"type": "long", "logicalType": "timestamp-millis"},
        "timestamp",
    ),
    (
        pa.timestamp("us", "UTC"),
        ScalarKind.TIMESTAMP,
        {"type": "long", "logicalType": "timestamp-micros"},
        "timestamp",
    ),
    (
        pa.decimal128(10, 2),
        ScalarKind.DECIMAL,
        {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        "decimal",
    ),
    (pa.list_(pa.int32()), None, {"type": "array", "items": ["null", "int"]}, None),
    (
        pa.struct([("a", pa.int32())]),
        None,
        {
            "type": "record",
            "name": "c",
            "namespace": "hoodie.t.t_record",
            "fields": [{"name": "a", "type": ["null", "int"], "default": None}],
        },
        None,
    ),
    (pa.map_(pa.string(), pa.float64()), None, {"type": "map", "values": ["null", "double"]}, None),
    (pa.map_(pa.int32(), pa.float64()), None, None, None),
    (pa.time32("s"), None, None, None),
]


@pytest.mark.parametrize(("arrow", "kind", "avro", "stats"), CASES, ids=lambda v: str(v))
def test_one_classification_two_vocabularies(
    arrow: pa.DataType, kind: object, avro: object, stats: object
) -> None:
    assert scalar_kind(arrow) == kind
    assert value_kind(arrow) == stats
    schema = pa.schema([pa.field("c", arrow, nullable=False)])
    if avro is None:
        with pytest.raises(UnsupportedTypeError):
            avro_schema(schema, "t")
    else:
        assert json.loads(avro_schema(schema, "t"))["fields"][0]["type"] == avro


# --- the writers' boundary: Arrow's other layouts of a type are written as the table stores it --

LAYOUTS = {
    "string_view": pa.array(["a", "b", None], pa.string_view()),
    "large_string": pa.array(["a", "b", None], pa.large_string()),
    "dictionary": pa.array(["a", "b", None]).dictionary_encode(),
    "binary_view": pa.array([b"a", b"b", None], pa.binary_view()),
    "large_binary": pa.array([b"a", b"b", None], pa.large_binary()),
    "large_list": pa.array([["a"], ["b", "c"], None], pa.large_list(pa.string_view())),
    "list_view": pa.array([[1], [2, 3], None], pa.list_view(pa.int32())),
    "struct": pa.array([{"x": "a"}, {"x": "b"}, None], pa.struct([("x", pa.string_view())])),
    "map": pa.array([[("k", "v")], [], None], pa.map_(pa.string_view(), pa.large_string())),
}


def _write(tmp_path: Path, data: pa.Table, key: str = "k", part: str = "p") -> pa.Table:
    from timeline import Table
    from timeline.config import Config
    from timeline.fs_view import FileSystemView
    from writer.client import WriteClient

    config = Config.resolve(explicit={"indexer.lock.url": "inprocess"})
    table = Table.create(str(tmp_path), "t", [key], [part], config=config)
    WriteClient(table).insert(data)
    WriteClient(table).upsert(data.slice(0, 1))  # tagging reads the stored keys back
    stored = FileSystemView(table.timeline, table.timeline.load()).read_snapshot()
    return stored.drop_columns([c for c in stored.column_names if c.startswith("_hoodie")])


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_data_column_in_any_layout_is_written_as_the_table_stores_it(
    tmp_path: Path, layout: str
) -> None:
    values = LAYOUTS[layout]
    data = pa.table({"k": ["k1", "k2", "k3"], "p": ["x", "y", "x"], "v": values})
    stored = _write(tmp_path, data).sort_by("k")
    assert stored.schema.field("v").type == stored_type(values.type)
    assert stored.column("v").to_pylist() == values.to_pylist()


@pytest.mark.parametrize("layout", ["string_view", "large_string", "dictionary"])
@pytest.mark.parametrize("role", ["key", "partition"])
def test_a_key_or_partition_column_in_any_string_layout_is_written_as_a_string(
    tmp_path: Path, layout: str, role: str
) -> None:
    texts = pa.array(["a", "b", "c"]).cast(LAYOUTS[layout].type)
    columns = {"k": pa.array(["k1", "k2", "k3"]), "p": pa.array(["x", "y", "x"]), "v": [1, 2, 3]}
    columns["k" if role == "key" else "p"] = texts
    stored = _write(tmp_path, pa.table(columns)).sort_by("v")
    assert stored.column("k" if role == "key" else "p").to_pylist() == ["a", "b", "c"]
    assert stored.num_rows == 3  # the upsert found its key: no second copy


@pytest.mark.parametrize(
    ("values", "named"),
    [
        (pa.array([1, 2], pa.time32("s")), "time32[s]"),
        (pa.array([1, 2], pa.duration("s")), "duration[s]"),
        (pa.nulls(2), "null"),
    ],
)
def test_a_type_a_table_cannot_store_is_refused_in_one_line_naming_the_column(
    tmp_path: Path, values: pa.Array, named: str
) -> None:
    from timeline.errors import TableError

    data = pa.table({"k": ["k1", "k2"], "p": ["x", "y"], "odd": values})
    with pytest.raises(TableError) as raised:
        _write(tmp_path, data)
    message = str(raised.value)
    assert "'odd'" in message and named in message and "\n" not in message

"""The one Arrow type classifier, and the two vocabularies that map it (Avro, column stats)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from metadata_table.records import value_kind
from timeline.arrow_types import ScalarKind, scalar_kind
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

"""The Avro schema of a table's records, from its Arrow schema.

Hudi stores the writer schema as an Avro schema JSON string in commit metadata
(``extraMetadata.schema``); readers such as hudi-rs may use it. Nullable fields are unions with
``null`` first and default null, as Hudi writes them.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa

from timeline.arrow_types import ScalarKind, scalar_kind
from timeline.errors import UnsupportedTypeError

_AVRO = {
    ScalarKind.BOOLEAN: "boolean",
    ScalarKind.INT: "int",
    ScalarKind.LONG: "long",
    ScalarKind.FLOAT: "float",
    ScalarKind.DOUBLE: "double",
    ScalarKind.STRING: "string",
    ScalarKind.BINARY: "bytes",
    ScalarKind.DATE: {"type": "int", "logicalType": "date"},
}


def _avro_type(name: str, t: pa.DataType) -> Any:
    kind = scalar_kind(t)
    if kind in _AVRO:
        return _AVRO[kind]
    if kind is ScalarKind.TIMESTAMP:
        unit = "millis" if t.unit in ("s", "ms") else "micros"
        return {"type": "long", "logicalType": f"timestamp-{unit}"}
    if kind is ScalarKind.DECIMAL:
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": t.precision,
            "scale": t.scale,
        }
    raise UnsupportedTypeError(name, t)


def _avro_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return cleaned if cleaned[:1].isalpha() or cleaned[:1] == "_" else f"_{cleaned}"


def avro_schema(schema: pa.Schema, table_name: str) -> str:
    """The Avro record schema JSON string of ``schema`` (meta columns excluded)."""
    fields = []
    for f in schema:
        if f.name.startswith("_hoodie_"):
            continue
        t = _avro_type(f.name, f.type)
        if f.nullable:
            fields.append({"name": f.name, "type": ["null", t], "default": None})
        else:
            fields.append({"name": f.name, "type": t})
    name = _avro_name(table_name)
    record = {
        "type": "record",
        "name": f"{name}_record",
        "namespace": f"hoodie.{name}",
        "fields": fields,
    }
    return json.dumps(record, separators=(",", ":"))

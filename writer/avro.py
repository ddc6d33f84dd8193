"""The Avro schema of a table's records, from its Arrow schema.

Hudi stores the writer schema as an Avro schema JSON string in commit metadata
(``extraMetadata.schema``); its next writer checks its own batch against it, and readers such as
hudi-rs may use it. Nullable fields are unions with ``null`` first and default null, as Hudi writes
them. A struct is a nested record named after its field, in its parent's namespace; a list is an
array and a map a map (string keys), whose elements and values are nullable as in the schemas
Hudi derives from Spark's (a file may still store them as required).
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


def _nullable(t: Any) -> Any:
    return ["null", t]


def _avro_type(name: str, t: pa.DataType, namespace: str) -> Any:
    if pa.types.is_struct(t):
        return _record(name, namespace, list(t))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {"type": "array", "items": _nullable(_avro_type(name, t.value_type, namespace))}
    if pa.types.is_map(t):
        if scalar_kind(t.key_type) is not ScalarKind.STRING:
            raise UnsupportedTypeError(name, t)
        return {"type": "map", "values": _nullable(_avro_type(name, t.item_type, namespace))}
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


def _record(name: str, namespace: str, fields: list[pa.Field]) -> dict[str, Any]:
    inner = f"{namespace}.{name}"
    out = []
    for f in fields:
        t = _avro_type(f.name, f.type, inner)
        if f.nullable:
            out.append({"name": f.name, "type": _nullable(t), "default": None})
        else:
            out.append({"name": f.name, "type": t})
    return {"type": "record", "name": _avro_name(name), "namespace": namespace, "fields": out}


def avro_schema(schema: pa.Schema, table_name: str) -> str:
    """The Avro record schema JSON string of ``schema`` (meta columns excluded)."""
    name = _avro_name(table_name)
    fields = [f for f in schema if not f.name.startswith("_hoodie_")]
    record = _record(f"{name}_record", f"hoodie.{name}", fields)
    return json.dumps(record, separators=(",", ":"))

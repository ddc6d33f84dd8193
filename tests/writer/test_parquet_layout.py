"""The footer rewrite that gives our files a table's list and map layout: the Thrift codec reads
and writes footers byte for byte, and a file rewritten to parquet-avro's two-level layout holds
the same values."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from timeline.errors import BadRecordsError
from writer.parquet_layout import (
    _I32,
    _REPEATED,
    _SE_REPETITION,
    Node,
    _is_list,
    conform_layout,
    decode,
    encode,
    footer_schema,
    split_footer,
)

from ..indexer.test_hudi_rs_samples import DATA, unpack

NESTED = pa.table(
    {
        "id": pa.array(range(4), pa.int64()),
        "tags": pa.array([["a"], [], None, ["b", "c"]], pa.list_(pa.string())),
        "points": pa.array(
            [[{"x": 1, "y": "p"}], None, [], [{"x": 2, "y": None}, {"x": 3, "y": "q"}]],
            pa.list_(pa.struct([("x", pa.int32()), ("y", pa.string())])),
        ),
        "scores": pa.array(
            [[("k", [1, 2])], [], None, [("m", []), ("n", [3])]],
            pa.map_(pa.string(), pa.list_(pa.int64())),
        ),
        "deep": pa.array(
            [{"inner": [[1], []]}, None, {"inner": None}, {"inner": [[2, 3]]}],
            pa.struct([("inner", pa.list_(pa.list_(pa.int64())))]),
        ),
    }
)


def _write(table: pa.Table, **options: object) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **options)  # type: ignore[arg-type]
    return bytes(sink.getvalue().to_pybytes())


def _required_elements(t: pa.DataType) -> pa.DataType:
    """``t`` with every list element required (the only lists the two-level layout holds)."""
    if pa.types.is_list(t):
        return pa.list_(pa.field("array", _required_elements(t.value_type), nullable=False))
    if pa.types.is_map(t):
        return pa.map_(t.key_type, _required_elements(t.item_type))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_required_elements(f.type)) for f in t])
    return t


def test_footers_round_trip_byte_for_byte(tmp_path: Path) -> None:
    for data in (_write(NESTED), _write(NESTED, write_page_index=True, compression="zstd")):
        footer = split_footer(data)[1]
        assert encode(decode(footer)) == footer
    base = unpack(DATA / "cow" / "v6_nonpartitioned.zip", tmp_path)
    for path in base.glob("*.parquet"):  # files parquet-avro wrote (Hudi 0.14)
        footer = split_footer(path.read_bytes())[1]
        assert encode(decode(footer)) == footer


def test_two_level_layout_keeps_every_value() -> None:
    """A parquet-avro-style template (two-level lists): our file takes its layout, and reads back
    the same values; the template itself is made by renaming pyarrow's levels as parquet-avro
    names them."""
    schema = pa.schema([f.with_type(_required_elements(f.type)) for f in NESTED.schema])
    data = _write(NESTED.cast(schema))
    # a template: parquet-mr's two-level layout, built by hand from pyarrow's
    template = footer_schema(data)
    for node in template.children:
        _collapse(node)
    rewritten = conform_layout(data, template)
    stored = str(pq.ParquetFile(io.BytesIO(rewritten)).schema)
    assert "repeated binary field_id=-1 array (String)" in stored
    assert "list" not in stored.replace("(List)", "")
    back = pq.ParquetFile(io.BytesIO(rewritten)).read(use_threads=False)
    assert back.to_pylist() == NESTED.to_pylist()
    assert conform_layout(rewritten, template) == rewritten, "already in the layout: unchanged"


def _collapse(node: Node) -> None:
    """pyarrow's three-level lists below ``node`` made two-level, as parquet-avro writes them."""
    if _is_list(node) and len(node.children[0].children) == 1:
        element = node.children[0].children[0]
        element.element.set(_SE_REPETITION, _I32, _REPEATED)
        element.rename("array")
        node.children = [element]
    for child in node.children:
        _collapse(child)


def test_a_null_element_cannot_go_into_a_two_level_list() -> None:
    required = pa.schema([pa.field("tags", _required_elements(pa.list_(pa.string())))])
    template = footer_schema(_write(pa.table({"tags": [["a"]]}).cast(required)))
    _collapse(template.children[0])
    nullable = _write(pa.table({"tags": pa.array([["a", None]], pa.list_(pa.string()))}))
    with pytest.raises(BadRecordsError, match="two-level layout"):
        conform_layout(nullable, template)

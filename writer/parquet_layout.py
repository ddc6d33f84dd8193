"""Keep a table's Parquet layout of nested columns in the files we write.

Arrow (and so pyarrow's writer) stores a list as three levels, ``<name> (LIST) { repeated group
list { element } }``. Files that parquet-avro writes (Apache Hudi's writers among them) store it
with two, ``<name> (LIST) { repeated <type> array }``, and Spark's legacy writer names the levels
``bag`` and ``array``. Readers that read a table file by file with one schema (hudi-rs) refuse to
mix the layouts, so a file we add to a table takes the layout of the table's newest base file.

The root of the schema takes the table's name too (parquet-avro names it after the Avro record,
``hoodie.<table>.<table>_record``; pyarrow calls it ``schema``).

The layouts differ only in the footer: for a list whose elements are required (the two-level
layout cannot hold a null element) the repetition and definition levels of both are identical,
so the data pages stay as pyarrow wrote them and only the schema and the column paths in the
footer are rewritten. The footer is Thrift (compact protocol); :func:`decode` and :func:`encode`
read it into a generic tree and back, byte for byte, so fields this module does not name survive.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from timeline.errors import BadRecordsError

MAGIC = b"PAR1"

# compact protocol types
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(
    13
)

# field ids of parquet.thrift
_FMD_SCHEMA, _FMD_ROW_GROUPS, _FMD_KEY_VALUE = 2, 4, 5
_RG_COLUMNS = 1
_CC_META = 3
_CMD_PATH = 3
_SE_REPETITION, _SE_NAME, _SE_CHILDREN, _SE_CONVERTED = 3, 4, 5, 6
_REQUIRED, _OPTIONAL, _REPEATED = 0, 1, 2
_CONVERTED_MAP, _CONVERTED_MAP_KEY_VALUE, _CONVERTED_LIST = 1, 2, 3


@dataclass
class Struct:
    """A Thrift struct: its fields in file order, each ``[field id, type, value]``."""

    fields: list[list[Any]] = field(default_factory=list)

    def get(self, fid: int) -> Any:
        for f in self.fields:
            if f[0] == fid:
                return f[2]
        return None

    def set(self, fid: int, ftype: int, value: Any) -> None:
        for f in self.fields:
            if f[0] == fid:
                f[2] = value
                return
        self.fields.append([fid, ftype, value])
        self.fields.sort(key=lambda f: f[0])


@dataclass
class List:
    etype: int
    items: list[Any]


# --- the compact protocol ------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, ttype: int) -> Any:
        if ttype in (_TRUE, _FALSE):  # a bool inside a collection: one byte
            return self.byte()
        if ttype == _BYTE:
            return self.byte()
        if ttype in (_I16, _I32, _I64):
            return self.zigzag()
        if ttype == _DOUBLE:
            v = struct.unpack_from("<d", self.data, self.pos)[0]
            self.pos += 8
            return v
        if ttype == _BINARY:
            n = self.varint()
            v = self.data[self.pos : self.pos + n]
            self.pos += n
            return v
        if ttype in (_LIST, _SET):
            header = self.byte()
            size, etype = header >> 4, header & 0x0F
            if size == 15:
                size = self.varint()
            return List(etype, [self.value(etype) for _ in range(size)])
        if ttype == _MAP:
            size = self.varint()
            if not size:
                return (0, 0, [])
            kv = self.byte()
            kt, vt = kv >> 4, kv & 0x0F
            return (kt, vt, [(self.value(kt), self.value(vt)) for _ in range(size)])
        if ttype == _STRUCT:
            return self.struct()
        raise ValueError(f"unknown thrift type {ttype}")

    def struct(self) -> Struct:
        out = Struct()
        last = 0
        while True:
            header = self.byte()
            ftype = header & 0x0F
            if ftype == _STOP:
                return out
            delta = header >> 4
            fid = last + delta if delta else self.zigzag()
            if ftype in (_TRUE, _FALSE):
                value: Any = ftype == _TRUE
            else:
                value = self.value(ftype)
            out.fields.append([fid, ftype, value])
            last = fid


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, n: int) -> None:
        while True:
            if n < 0x80:
                self.out.append(n)
                return
            self.out.append((n & 0x7F) | 0x80)
            n >>= 7

    def zigzag(self, n: int) -> None:
        self.varint((n << 1) ^ (n >> 63))

    def value(self, ttype: int, v: Any) -> None:
        if ttype in (_TRUE, _FALSE, _BYTE):
            self.out.append(v)
        elif ttype in (_I16, _I32, _I64):
            self.zigzag(v)
        elif ttype == _DOUBLE:
            self.out += struct.pack("<d", v)
        elif ttype == _BINARY:
            self.varint(len(v))
            self.out += v
        elif ttype in (_LIST, _SET):
            n = len(v.items)
            if n < 15:
                self.out.append((n << 4) | v.etype)
            else:
                self.out.append(0xF0 | v.etype)
                self.varint(n)
            for item in v.items:
                self.value(v.etype, item)
        elif ttype == _MAP:
            kt, vt, pairs = v
            self.varint(len(pairs))
            if pairs:
                self.out.append((kt << 4) | vt)
                for k, val in pairs:
                    self.value(kt, k)
                    self.value(vt, val)
        elif ttype == _STRUCT:
            self.struct(v)
        else:
            raise ValueError(f"unknown thrift type {ttype}")

    def struct(self, s: Struct) -> None:
        last = 0
        for fid, ftype, value in s.fields:
            wire = (_TRUE if value else _FALSE) if ftype in (_TRUE, _FALSE) else ftype
            delta = fid - last
            if 0 < delta <= 15:
                self.out.append((delta << 4) | wire)
            else:
                self.out.append(wire)
                self.zigzag(fid)
            if ftype not in (_TRUE, _FALSE):
                self.value(ftype, value)
            last = fid
        self.out.append(_STOP)


def decode(footer: bytes) -> Struct:
    """A Thrift compact struct (a Parquet ``FileMetaData``) as a generic tree."""
    return _Reader(footer).struct()


def encode(s: Struct) -> bytes:
    w = _Writer()
    w.struct(s)
    return bytes(w.out)


def split_footer(data: bytes) -> tuple[bytes, bytes]:
    """(everything before the footer, the footer's Thrift bytes) of a whole Parquet file."""
    if len(data) < 12 or data[-4:] != MAGIC:
        raise ValueError("not a Parquet file")
    (n,) = struct.unpack("<I", data[-8:-4])
    return data[: -8 - n], data[-8 - n : -8]


def join_footer(body: bytes, footer: bytes) -> bytes:
    return body + footer + struct.pack("<I", len(footer)) + MAGIC


# --- schema trees ----------------------------------------------------------------------------------


@dataclass
class Node:
    """One element of a Parquet schema with its children (the footer stores the tree flattened,
    depth first, each group giving its number of children)."""

    element: Struct
    children: list[Node] = field(default_factory=list)

    @property
    def name(self) -> str:
        return bytes(self.element.get(_SE_NAME)).decode()

    def rename(self, name: str) -> None:
        self.element.set(_SE_NAME, _BINARY, name.encode())

    def take_name(self, other: Node) -> bool:
        """Take ``other``'s name; whether it differed."""
        if self.name == other.name:
            return False
        self.rename(other.name)
        return True

    @property
    def repetition(self) -> int | None:
        r: int | None = self.element.get(_SE_REPETITION)
        return r

    @property
    def is_group(self) -> bool:
        return self.element.get(_SE_CHILDREN) is not None

    @property
    def converted(self) -> int | None:
        c: int | None = self.element.get(_SE_CONVERTED)
        return c

    def set_converted(self, converted: int | None) -> None:
        if converted is None:
            self.element.fields = [f for f in self.element.fields if f[0] != _SE_CONVERTED]
        else:
            self.element.set(_SE_CONVERTED, _I32, converted)

    def child(self, name: str) -> Node | None:
        return next((c for c in self.children if c.name == name), None)


def _tree(elements: list[Any]) -> Node:
    it = iter(elements)

    def build() -> Node:
        element = next(it)
        node = Node(element)
        for _ in range(element.get(_SE_CHILDREN) or 0):
            node.children.append(build())
        return node

    return build()


def _flatten(node: Node) -> list[Struct]:
    if node.is_group:
        node.element.set(_SE_CHILDREN, _I32, len(node.children))
    out = [node.element]
    for c in node.children:
        out += _flatten(c)
    return out


def _leaf_paths(node: Node, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = []
    for c in node.children:
        path = (*prefix, c.name)
        paths += _leaf_paths(c, path) if c.is_group else [path]
    return paths


def _is_list(node: Node) -> bool:
    return node.is_group and node.converted == _CONVERTED_LIST and len(node.children) == 1


def _two_level(repeated: Node, list_name: str) -> bool:
    """Whether a list's repeated field is the element itself (the backward-compatibility rules
    of the Parquet format's LogicalTypes.md), not a wrapper around it."""
    return (
        not repeated.is_group
        or len(repeated.children) != 1
        or repeated.name in ("array", f"{list_name}_tuple")
    )


def _conform(ours: Node, template: Node, column: str) -> bool:
    """Rewrite ``ours`` (pyarrow's layout) to the list and map layout of ``template``, in place;
    whether anything changed."""
    changed = False
    if _is_list(ours) and _is_list(template):
        wrapper, t_repeated = ours.children[0], template.children[0]
        if len(wrapper.children) == 1 and not _two_level(wrapper, ours.name):
            element = wrapper.children[0]
            if _two_level(t_repeated, template.name):
                if element.repetition != _REQUIRED:
                    raise BadRecordsError(
                        column,
                        "the table stores this list in the two-level layout, which cannot hold "
                        "null elements",
                    )
                element.element.set(_SE_REPETITION, _I32, _REPEATED)
                element.rename(t_repeated.name)
                ours.children = [element]
                _conform(element, t_repeated, column)
                return True
            if len(t_repeated.children) == 1:
                t_element = t_repeated.children[0]
                changed = wrapper.take_name(t_repeated) | element.take_name(t_element)
                return _conform(element, t_element, column) or changed
        return False
    if (
        ours.is_group
        and ours.converted == _CONVERTED_MAP
        and template.converted in (_CONVERTED_MAP, _CONVERTED_MAP_KEY_VALUE)
        and len(ours.children) == 1
        and len(template.children) == 1
    ):
        kv, t_kv = ours.children[0], template.children[0]
        changed = kv.take_name(t_kv)
        if kv.converted != t_kv.converted:
            # parquet-avro marks the entries MAP_KEY_VALUE; Hudi's reader takes a map without
            # that mark for the three-level list layout and then reads two-level lists as null
            kv.set_converted(t_kv.converted)
            changed = True
        if len(kv.children) == len(t_kv.children):
            for c, t in zip(kv.children, t_kv.children, strict=True):
                if c.is_group and t.is_group:
                    changed = _conform(c, t, column) or changed
        return changed
    for c in ours.children:
        match = template.child(c.name)
        if match is not None and c.is_group and match.is_group:
            changed = _conform(c, match, f"{column}.{c.name}" if column else c.name) or changed
    return changed


def footer_schema(data: bytes) -> Node:
    """The schema tree of a whole Parquet file's footer."""
    return _tree(decode(split_footer(data)[1]).get(_FMD_SCHEMA).items)


def footer_keys(data: bytes) -> set[bytes]:
    """The keys of a whole Parquet file's footer key-value metadata."""
    kv = decode(split_footer(data)[1]).get(_FMD_KEY_VALUE)
    return set() if kv is None else {bytes(item.get(1)) for item in kv.items}


def conform_layout(data: bytes, template: Node) -> bytes:
    """The Parquet file ``data`` (as pyarrow wrote it) with its nested columns in the layout of
    ``template`` (the schema of one of the table's files). Unchanged when they already agree."""
    body, footer = split_footer(data)
    meta = decode(footer)
    schema = meta.get(_FMD_SCHEMA)
    root = _tree(schema.items)
    # the root is the record's name (parquet-avro's ``hoodie.<table>.<table>_record``)
    changed = _conform(root, template, "") | root.take_name(template)
    if not changed:
        return data
    schema.items = _flatten(root)
    paths = _leaf_paths(root)
    for group in meta.get(_FMD_ROW_GROUPS).items:
        columns = group.get(_RG_COLUMNS).items
        for chunk, path in zip(columns, paths, strict=True):
            chunk.get(_CC_META).set(_CMD_PATH, _LIST, List(_BINARY, [p.encode() for p in path]))
    kv = meta.get(_FMD_KEY_VALUE)
    if kv is not None:  # Arrow's own schema would name the levels pyarrow's way
        kv.items = [s for s in kv.items if s.get(1) != b"ARROW:schema"]
    return join_footer(body, encode(meta))

"""The filter language of data skipping and table scans, and its evaluation at two levels.

Build filters in code (``col("fare") > 10``, ``col("city").isin(["sf", "la"])``, ``a & b``,
``a | b``, ``~a``) or parse text (``fare > 10 AND city IN ('sf', 'la')``). Supported: ``=``,
``!=`` (or ``<>``), ``<``, ``<=``, ``>``, ``>=``, ``[NOT] BETWEEN x AND y``, ``[NOT] IN (...)``,
``IS [NOT] NULL``, ``AND``, ``OR``, ``NOT``, parentheses, over top-level columns; literals are
numbers, 'strings', TRUE/FALSE, DATE 'yyyy-mm-dd' and TIMESTAMP 'yyyy-mm-dd hh:mm:ss' (UTC); a
quoted ISO date or timestamp compared with a date or timestamp column reads as one (see
:meth:`Expr.bind`, which every reader calls with the table's schema first). As
in SQL, a comparison with a null is not true, and ``NOT`` of it is not true either: negations are
pushed down to the comparisons when a filter is built (``NOT fare > 10`` is ``fare <= 10``), so
every node below is a positive test.

* Files: ``might_match(stats)`` answers "can this file contain a matching row?" from min, max,
  null count and value count; it says True whenever a statistic it needs is missing, so a file
  is pruned only when its stats prove no row can match. ``mask(stats)`` gives the same answer
  for every file at once, on Arrow arrays (:class:`ArrowStats`, one entry per file); it returns
  None where the types involved need Python's comparison rules (decimals, mixed kinds), and the
  caller then asks ``might_match`` file by file.
* Rows: ``expression(schema)`` is the filter as a ``pyarrow.compute`` expression over a table of
  that schema, with each literal cast to its column's type; Arrow evaluates it exactly (and uses
  Parquet row-group statistics with it), with SQL's null rules.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from timeline.errors import FilterSyntaxError, FilterTypeError, UnknownColumnError


@dataclass(frozen=True)
class ColumnStats:
    minimum: Any
    maximum: Any
    null_count: int | None
    value_count: int | None


Stats = Mapping[str, ColumnStats]


@dataclass(frozen=True)
class ColumnArrays:
    """One column's stats for every file of a listing, aligned with it: ``present`` says which
    files have a stats record; ``kind`` is the VALUE_TYPE all of them share."""

    kind: str
    present: pa.BooleanArray
    minimum: pa.Array
    maximum: pa.Array
    null_count: pa.Int64Array
    value_count: pa.Int64Array

    @cached_property
    def compared_nowhere(self) -> pa.BooleanArray:
        """Files a comparison's stats cannot judge, so keep: no record, or a missing minimum or
        maximum beside a value that is not null (worked out once per column, not per
        comparison)."""
        unknown = pc.or_(pc.is_null(self.minimum), pc.is_null(self.maximum))
        return pc.or_(pc.invert(self.present), pc.and_(self.holds_values, unknown))

    @cached_property
    def holds_values(self) -> pa.BooleanArray:
        """Files whose column may hold a value that is not null: all but those whose counts
        say every value is null (no comparison is true there), as in ``Compare.might_match``."""
        return pc.invert(_only_nulls(self))

    def take(self, indices: pa.Array) -> ColumnArrays:
        """The entries at ``indices`` (a subset of the listing)."""
        return ColumnArrays(
            self.kind,
            self.present.take(indices),
            self.minimum.take(indices),
            self.maximum.take(indices),
            self.null_count.take(indices),
            self.value_count.take(indices),
        )


#: column -> its arrays, or None when its records do not share one kind
ArrowStats = Mapping[str, ColumnArrays | None]

# literal types each stats kind compares with as Python does (see _comparable)
_VECTOR_KINDS: dict[str, tuple[type, ...]] = {
    "int": (int, float),
    "float": (int, float),
    "string": (str,),
    "binary": (bytes,),
    "bool": (bool,),
    "date": (dt.date,),
    "timestamp": (dt.datetime,),
}
_ARROW_OPS = {"<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}


def _true(n: int) -> pa.BooleanArray:
    return pa.array([True] * n, pa.bool_())


def _column_mask(
    stats: ArrowStats,
    column: str,
    files: int,
    answer: Callable[[ColumnArrays, int], pa.BooleanArray | None],
) -> pa.BooleanArray | None:
    """A one-column predicate's mask: every file kept when no file has stats for ``column``,
    None when its stats need Python, else ``answer`` for the files with a record (the others
    are kept)."""
    if column not in stats:
        return _true(files)
    c = stats[column]
    if c is None:
        return None
    got = answer(c, files)
    return None if got is None else pc.or_(pc.invert(c.present), got)


def _only_nulls(c: ColumnArrays) -> pa.BooleanArray:
    """Files whose column holds nulls only (both counts known), as in ``Compare.might_match``."""
    return pc.fill_null(pc.greater_equal(c.null_count, c.value_count), False)


class Expr:
    def might_match(self, stats: Stats) -> bool:
        raise NotImplementedError

    def mask(self, stats: ArrowStats, files: int) -> pa.BooleanArray | None:
        """``might_match`` for each of ``files`` files at once, or None (see the module)."""
        raise NotImplementedError

    def columns(self) -> set[str]:
        raise NotImplementedError

    def negate(self) -> Expr:
        """The filter that is true exactly where this one is false (not where it is null)."""
        raise NotImplementedError

    def expression(self, schema: pa.Schema) -> pc.Expression:
        """This filter over rows of ``schema`` (see the module)."""
        raise NotImplementedError

    def bind(self, schema: pa.Schema) -> Expr:
        """This filter checked against a table's ``schema`` and its literals read as their
        columns read them: every column must exist (:class:`UnknownColumnError` names the
        table's), and a quoted ISO date or timestamp compared with a date or timestamp column
        is one, as Spark, DuckDB and Trino read ``o_orderdate >= '1995-01-01'``; a literal
        the column cannot hold is a :class:`FilterTypeError` naming the syntax that works.
        Every reader binds a filter before it uses one, so the index, the rows and Spark all
        see the same values."""
        raise NotImplementedError

    def __and__(self, other: Expr) -> Expr:
        return And(self, other)

    def __or__(self, other: Expr) -> Expr:
        return Or(self, other)

    def __invert__(self) -> Expr:
        return self.negate()


def _utc_naive(value: dt.datetime) -> dt.datetime:
    return value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value


def _comparable(a: Any, b: Any) -> tuple[Any, Any] | None:
    if a is None or b is None:
        return None
    if isinstance(a, bool) != isinstance(b, bool):
        return None
    if isinstance(a, int | float | decimal.Decimal) and isinstance(
        b, int | float | decimal.Decimal
    ):
        if isinstance(a, decimal.Decimal) or isinstance(b, decimal.Decimal):
            return decimal.Decimal(str(a)), decimal.Decimal(str(b))
        return a, b
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
        return _utc_naive(a), _utc_naive(b)
    if type(a) is type(b) or (isinstance(a, str) and isinstance(b, str)):
        return a, b
    if isinstance(a, bytes) and isinstance(b, bytes):
        return a, b
    if isinstance(a, dt.date) and isinstance(b, dt.date) and not isinstance(b, dt.datetime):
        return a, b
    return None


_NEGATED = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


@dataclass(frozen=True)
class Compare(Expr):
    column: str
    op: str  # = != < <= > >=
    value: Any

    def columns(self) -> set[str]:
        return {self.column}

    def negate(self) -> Expr:
        return Compare(self.column, _NEGATED[self.op], self.value)

    def bind(self, schema: pa.Schema) -> Expr:
        return Compare(self.column, self.op, bound_literal(schema, self.column, self.value))

    def expression(self, schema: pa.Schema) -> pc.Expression:
        field, value = pc.field(self.column), row_literal(schema, self.column, self.value)
        return {
            "=": field == value,
            "!=": field != value,
            "<": field < value,
            "<=": field <= value,
            ">": field > value,
            ">=": field >= value,
        }[self.op]

    def might_match(self, stats: Stats) -> bool:
        s = stats.get(self.column)
        if s is None:
            return True
        if s.value_count is not None and s.null_count is not None and s.null_count >= s.value_count:
            return False  # only nulls: no comparison is true
        lo = _comparable(s.minimum, self.value)
        hi = _comparable(s.maximum, self.value)
        if lo is None or hi is None:
            return True
        (mn, v), (mx, _) = lo, hi
        if self.op == "=":
            return bool(mn <= v <= mx)
        if self.op == "!=":
            return not (mn == v == mx)
        if self.op == "<":
            return bool(mn < v)
        if self.op == "<=":
            return bool(mn <= v)
        if self.op == ">":
            return bool(mx > v)
        if self.op == ">=":
            return bool(mx >= v)
        raise ValueError(self.op)

    def mask(self, stats: ArrowStats, files: int) -> pa.BooleanArray | None:
        """A file is kept when it has no record, or may hold a value that is not null and
        either its minimum or maximum is missing (that proves nothing) or they allow the
        comparison: the parts without the literal come from the column's arrays, once."""
        if self.column not in stats:
            return _true(files)
        c = stats[self.column]
        if c is None:
            return None
        literal = _arrow_literal(c, self.value)
        if literal is None:
            return None
        if literal is True:  # Python finds them incomparable: the file is kept
            return pc.or_(pc.invert(c.present), c.holds_values)
        if self.op == "=":
            compared = pc.and_(
                pc.less_equal(c.minimum, literal), pc.greater_equal(c.maximum, literal)
            )
        elif self.op == "!=":  # only a file whose every value is the literal is dropped
            compared = pc.invert(
                pc.and_(pc.equal(c.minimum, literal), pc.equal(c.maximum, literal))
            )
        elif self.op in ("<", "<="):
            compared = _ARROW_OPS[self.op](c.minimum, literal)
        else:
            compared = _ARROW_OPS[self.op](c.maximum, literal)
        allowed = pc.and_(c.holds_values, pc.fill_null(compared, True))
        return pc.or_(c.compared_nowhere, allowed)


_EXACT = 2**53  # integers a double holds exactly


def _arrow_literal(c: ColumnArrays, v: Any) -> pa.Scalar | bool | None:
    """``v`` as an Arrow scalar comparable with the column's stats as Python compares them;
    True when Python finds them incomparable (every file kept); None when only Python can say."""
    if v is None:
        return True
    types = _VECTOR_KINDS.get(c.kind)
    if types is None or isinstance(v, decimal.Decimal):
        return None
    if isinstance(v, bool) != (c.kind == "bool") or not isinstance(v, types):
        return True
    if c.kind == "date" and isinstance(v, dt.datetime):
        return True
    if c.kind in ("int", "float") and isinstance(v, int | float):
        if isinstance(v, float) and c.kind == "int":
            if not (v.is_integer() and abs(v) <= _EXACT):
                return None
            v = int(v)
        if isinstance(v, int) and abs(v) > _EXACT and c.kind == "float":
            return None
        if isinstance(v, int) and not -(2**63) <= v < 2**63:
            return None
    if isinstance(v, dt.datetime):
        v = _utc_naive(v)
    return pa.scalar(v, type=c.minimum.type)


@dataclass(frozen=True)
class In(Expr):
    column: str
    values: tuple[Any, ...]
    negated: bool = False  # NOT IN: true for a non-null value that is none of them

    def columns(self) -> set[str]:
        return {self.column}

    def negate(self) -> Expr:
        return In(self.column, self.values, not self.negated)

    def bind(self, schema: pa.Schema) -> Expr:
        values = tuple(bound_literal(schema, self.column, v) for v in self.values)
        return In(self.column, values, self.negated)

    def expression(self, schema: pa.Schema) -> pc.Expression:
        field = pc.field(self.column)
        kind = schema.field(_check_column(schema, self.column)).type
        values = pa.array([row_literal(schema, self.column, v) for v in self.values], kind)
        found = field.isin(values)
        return (~found & field.is_valid()) if self.negated else found

    def might_match(self, stats: Stats) -> bool:
        if self.negated:  # dropped only when every value is one and the same listed value
            return all(Compare(self.column, "!=", v).might_match(stats) for v in self.values)
        return any(Compare(self.column, "=", v).might_match(stats) for v in self.values)

    def mask(self, stats: ArrowStats, files: int) -> pa.BooleanArray | None:
        op, combine = ("!=", pc.and_) if self.negated else ("=", pc.or_)
        out = pa.array([self.negated] * files, pa.bool_())
        for v in self.values:
            one = Compare(self.column, op, v).mask(stats, files)
            if one is None:
                return None
            out = combine(out, one)
        return out


@dataclass(frozen=True)
class IsNull(Expr):
    column: str
    negated: bool = False

    def columns(self) -> set[str]:
        return {self.column}

    def negate(self) -> Expr:
        return IsNull(self.column, not self.negated)

    def bind(self, schema: pa.Schema) -> Expr:
        _check_column(schema, self.column)
        return self

    def expression(self, schema: pa.Schema) -> pc.Expression:
        _check_column(schema, self.column)
        field = pc.field(self.column)
        return field.is_valid() if self.negated else field.is_null()

    def might_match(self, stats: Stats) -> bool:
        s = stats.get(self.column)
        if s is None or s.null_count is None:
            return True
        if self.negated:
            return s.value_count is None or s.null_count < s.value_count
        return s.null_count > 0

    def mask(self, stats: ArrowStats, files: int) -> pa.BooleanArray | None:
        return _column_mask(stats, self.column, files, self._answer)

    def _answer(self, c: ColumnArrays, files: int) -> pa.BooleanArray:
        if self.negated:  # unknown counts keep the file
            return pc.fill_null(pc.less(c.null_count, c.value_count), True)
        return pc.fill_null(pc.greater(c.null_count, 0), True)


@dataclass(frozen=True)
class And(Expr):
    left: Expr
    right: Expr

    def columns(self) -> set[str]:
        return self.left.columns() | self.right.columns()

    def negate(self) -> Expr:
        return Or(self.left.negate(), self.right.negate())

    def bind(self, schema: pa.Schema) -> Expr:
        return And(self.left.bind(schema), self.right.bind(schema))

    def expression(self, schema: pa.Schema) -> pc.Expression:
        return self.left.expression(schema) & self.right.expression(schema)

    def might_match(self, stats: Stats) -> bool:
        return self.left.might_match(stats) and self.right.might_match(stats)

    def mask(self, stats: ArrowStats, files: int) -> pa.BooleanArray | None:
        left, right = self.left.mask(stats, files), self.right.mask(stats, files)
        return None if left is None or right is None else pc.and_(left, right)


@dataclass(frozen=True)
class Or(Expr):
    left: Expr
    right: Expr

    def columns(self) -> set[str]:
        return self.left.columns() | self.right.columns()

    def negate(self) -> Expr:
        return And(self.left.negate(), self.right.negate())

    def bind(self, schema: pa.Schema) -> Expr:
        return Or(self.left.bind(schema), self.right.bind(schema))

    def expression(self, schema: pa.Schema) -> pc.Expression:
        return self.left.expression(schema) | self.right.expression(schema)

    def might_match(self, stats: Stats) -> bool:
        return self.left.might_match(stats) or self.right.might_match(stats)

    def mask(self, stats: ArrowStats, files: int) -> pa.BooleanArray | None:
        left, right = self.left.mask(stats, files), self.right.mask(stats, files)
        return None if left is None or right is None else pc.or_(left, right)


@dataclass(frozen=True)
class col:
    name: str

    def __eq__(self, value: object) -> Compare:  # type: ignore[override]
        return Compare(self.name, "=", value)

    def __ne__(self, value: object) -> Compare:  # type: ignore[override]
        return Compare(self.name, "!=", value)

    def __lt__(self, value: Any) -> Compare:
        return Compare(self.name, "<", value)

    def __le__(self, value: Any) -> Compare:
        return Compare(self.name, "<=", value)

    def __gt__(self, value: Any) -> Compare:
        return Compare(self.name, ">", value)

    def __ge__(self, value: Any) -> Compare:
        return Compare(self.name, ">=", value)

    def __hash__(self) -> int:
        return hash(self.name)

    def between(self, low: Any, high: Any) -> Expr:
        return And(Compare(self.name, ">=", low), Compare(self.name, "<=", high))

    def isin(self, values: Iterable[Any]) -> Expr:
        return In(self.name, tuple(values))

    def is_null(self) -> Expr:
        return IsNull(self.name)

    def is_not_null(self) -> Expr:
        return IsNull(self.name, negated=True)


def _check_column(schema: pa.Schema, column: str) -> str:
    if schema.get_field_index(column) < 0:
        raise UnknownColumnError(column, schema.names)
    return column


def literal_syntax(kind: pa.DataType) -> str:
    """How a filter writes a value of a column of type ``kind``, for error messages."""
    if pa.types.is_date(kind):
        return "a date: DATE '1995-01-31' or '1995-01-31'"
    if pa.types.is_timestamp(kind):
        return "a timestamp (UTC): TIMESTAMP '1995-01-31 12:00:00' or '1995-01-31 12:00:00'"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "quoted text: 'abc'"
    if pa.types.is_boolean(kind):
        return "TRUE or FALSE"
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return "a number, unquoted: 42 or 4.5"
    return f"a value of type {kind}"


def bound_literal(schema: pa.Schema, column: str, value: Any) -> Any:
    """``value`` as ``column`` reads it (see :meth:`Expr.bind`): a quoted ISO date or
    timestamp compared with a date or timestamp column becomes one; the result is checked by
    :func:`row_literal`, so a value the column cannot hold fails here, naming the syntax."""
    kind = schema.field(_check_column(schema, column)).type
    if isinstance(value, str) and (pa.types.is_date(kind) or pa.types.is_timestamp(kind)):
        try:
            parsed = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise FilterTypeError(column, str(kind), value, literal_syntax(kind)) from None
        if pa.types.is_date(kind) and parsed.time() == dt.time() and parsed.tzinfo is None:
            value = parsed.date()
        else:
            value = parsed
    row_literal(schema, column, value)
    return value


def row_literal(schema: pa.Schema, column: str, value: Any) -> pa.Scalar:
    """``value`` as a scalar of ``column``'s type (a date for a date column, the column's unit
    and zone for a timestamp, an exact decimal), or a :class:`FilterTypeError` naming both."""
    kind = schema.field(_check_column(schema, column)).type
    if isinstance(value, dt.datetime):
        value = _utc_naive(value)
        if pa.types.is_date(kind):
            value = value.date() if value.time() == dt.time() else value
    if pa.types.is_decimal(kind) and isinstance(value, int | float):
        value = decimal.Decimal(str(value))
    if pa.types.is_floating(kind) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if pa.types.is_integer(kind) and isinstance(value, float):
        return pa.scalar(value, pa.float64())  # Arrow compares the column with it as doubles
    try:
        return pa.scalar(value, type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as e:
        raise FilterTypeError(column, str(kind), value, literal_syntax(kind)) from e


# --- parsing -------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"\s*(?:(?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)|(?P<str>'(?:[^']|'')*')|(?P<op><=|>=|!=|<>|=|<|>|\(|\)|,)"
    r"|(?P<ident>[A-Za-z_][A-Za-z0-9_]*|\"[^\"]+\"|`[^`]+`))"
)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            match = _TOKEN.match(text, pos)
            if match is None or match.end() == pos:
                raise FilterSyntaxError(text, pos, f"unexpected {text[pos : pos + 10]!r}")
            kind = match.lastgroup or ""
            self.tokens.append((kind, match.group(kind), match.start(kind)))
            pos = match.end()
        self.i = 0

    def _peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _next(self, what: str) -> tuple[str, str, int]:
        token = self._peek()
        if token is None:
            raise FilterSyntaxError(self.text, len(self.text), f"expected {what}, found the end")
        self.i += 1
        return token

    def _keyword(self, word: str) -> bool:
        token = self._peek()
        if token and token[0] == "ident" and token[1].upper() == word:
            self.i += 1
            return True
        return False

    def _expect(self, value: str) -> None:
        _kind, text, pos = self._next(repr(value))
        if text.upper() != value:
            raise FilterSyntaxError(self.text, pos, f"expected {value!r}, found {text!r}")

    def parse(self) -> Expr:
        expr = self._or()
        token = self._peek()
        if token is not None:
            raise FilterSyntaxError(self.text, token[2], f"unexpected {token[1]!r}")
        return expr

    def _or(self) -> Expr:
        expr = self._and()
        while self._keyword("OR"):
            expr = Or(expr, self._and())
        return expr

    def _and(self) -> Expr:
        expr = self._not()
        while self._keyword("AND"):
            expr = And(expr, self._not())
        return expr

    def _not(self) -> Expr:
        if self._keyword("NOT"):
            return self._not().negate()
        return self._atom()

    def _atom(self) -> Expr:
        token = self._peek()
        if token and token[1] == "(":
            self.i += 1
            expr = self._or()
            self._expect(")")
            return expr
        kind, name, pos = self._next("a column name")
        if kind != "ident":
            raise FilterSyntaxError(self.text, pos, f"expected a column name, found {name!r}")
        column = name.strip('"`')
        if self._keyword("IS"):
            negated = self._keyword("NOT")
            self._expect("NULL")
            return IsNull(column, negated)
        negated = self._keyword("NOT")
        if self._keyword("BETWEEN"):
            low = self._literal()
            self._expect("AND")
            between = col(column).between(low, self._literal())
            return between.negate() if negated else between
        if self._keyword("IN"):
            self._expect("(")
            values = [self._literal()]
            while (self._peek() or ("", "", 0))[1] == ",":
                self.i += 1
                values.append(self._literal())
            self._expect(")")
            return In(column, tuple(values), negated)
        if negated:
            token = self._peek() or ("", "the end", len(self.text))
            raise FilterSyntaxError(
                self.text, token[2], f"expected IN or BETWEEN after NOT, found {token[1]!r}"
            )
        kind, op, pos = self._next("a comparison")
        if op not in ("=", "!=", "<>", "<", "<=", ">", ">="):
            raise FilterSyntaxError(self.text, pos, f"expected a comparison, found {op!r}")
        return Compare(column, "!=" if op == "<>" else op, self._literal())

    def _literal(self) -> Any:
        kind, text, pos = self._next("a value")
        if kind == "num":
            return float(text) if any(c in text for c in ".eE") else int(text)
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "ident":
            word = text.upper()
            if word in ("TRUE", "FALSE"):
                return word == "TRUE"
            if word in ("DATE", "TIMESTAMP"):
                k, raw, p = self._next("a quoted date")
                if k != "str":
                    raise FilterSyntaxError(
                        self.text, p, "DATE and TIMESTAMP take a 'quoted' value"
                    )
                value = raw[1:-1]
                try:
                    return (
                        dt.date.fromisoformat(value)
                        if word == "DATE"
                        else dt.datetime.fromisoformat(value)
                    )
                except ValueError:
                    raise FilterSyntaxError(
                        self.text, p, f"invalid {word.lower()} {value!r}"
                    ) from None
        raise FilterSyntaxError(self.text, pos, f"expected a value, found {text!r}")


def parse_filter(text: str) -> Expr:
    """Parse a filter such as ``fare > 10 AND city IN ('sf', 'la')``."""
    if not text.strip():
        raise FilterSyntaxError(text, 0, "empty filter")
    return _Parser(text).parse()

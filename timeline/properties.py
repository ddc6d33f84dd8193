"""Java ``.properties`` format, as Hudi writes ``hoodie.properties`` (``java.util.Properties``).

Reading follows the Java rules (comments, ``=``/``:``/space separators, backslash escapes and line
continuations, ``\\uXXXX``); writing escapes like ``Properties.store`` (``:`` becomes ``\\:``,
non-ASCII becomes ``\\uXXXX``) so that Hudi and hudi-rs read our files back unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> list[str]:
    """Join continued lines; drop blank and comment lines. Leading white space is not content."""
    lines: list[str] = []
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f")
        if pending is None and (not line or line[0] in "#!"):
            continue
        # A line continues when it ends with an odd number of backslashes.
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = (pending or "") + line[:-1]
            continue
        lines.append((pending or "") + line)
        pending = None
    if pending is not None:
        lines.append(pending)
    return lines


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 >= len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            try:
                out.append(chr(int(text[i + 2 : i + 6], 16)))
            except ValueError:
                raise ValueError(f"malformed \\uXXXX escape in {text!r}") from None
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    # Surrogate pairs written as two \\u escapes become one character.
    return "".join(out).encode("utf-16", "surrogatepass").decode("utf-16")


def _split(line: str) -> tuple[str, str]:
    """Key ends at the first unescaped '=', ':' or white space; one separator may follow."""
    i = 0
    while i < len(line) and line[i] not in "=: \t\f":
        i += 2 if line[i] == "\\" else 1
    key, rest = line[:i], line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key), _unescape(rest)


def loads(text: str) -> dict[str, str]:
    """Parse properties text into an ordered dict (the last value of a repeated key wins)."""
    return dict(_split(line) for line in _logical_lines(text))


def _escape(text: str, is_key: bool) -> str:
    out: list[str] = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch in "=:#!":
            out.append("\\" + ch)
        elif ch == " " and (is_key or i == 0):
            out.append("\\ ")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\f":
            out.append("\\f")
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            out.extend(f"\\u{unit:04X}" for unit in _utf16_units(ch))
        else:
            out.append(ch)
    return "".join(out)


def _utf16_units(ch: str) -> list[int]:
    data = ch.encode("utf-16-be")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def dumps(props: Mapping[str, str], comment: str | None = None) -> str:
    """Render properties, keys sorted (stable output makes diffs and checksums readable)."""
    lines = [f"#{comment}"] if comment else []
    lines.extend(f"{_escape(k, True)}={_escape(v, False)}" for k, v in sorted(props.items()))
    return "\n".join(lines) + "\n"

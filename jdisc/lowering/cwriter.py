"""A small indenting writer for generated C."""

from __future__ import annotations

import contextlib


class CWriter:
    def __init__(self, indent: str = "  "):
        self.lines: list[str] = []
        self.level = 0
        self.unit = indent

    def __call__(self, line: str = "") -> None:
        self.lines.append(self.unit * self.level + line if line else "")

    @contextlib.contextmanager
    def indent(self):
        self.level += 1
        try:
            yield
        finally:
            self.level -= 1

    @contextlib.contextmanager
    def block(self, head: str, tail: str = "}"):
        """`head {` ... `}` with the body indented."""
        self(head + " {")
        with self.indent():
            yield
        self(tail)

    def open(self, head: str = "") -> None:
        """`head {` with the lines after it indented until `close`: a block whose end is
        written elsewhere (`block` when one place writes both)."""
        self(f"{head} {{" if head else "{")
        self.level += 1

    def close(self, tail: str = "}") -> None:
        self.level -= 1
        self(tail)

    def else_(self) -> None:
        """`} else {` between the two arms of an `open`ed if."""
        self.close("} else {")
        self.level += 1

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def c_string(s: str) -> str:
    """A C string literal for `s`, any text (printf-safe: % doubled). Bytes of its UTF-8 form
    outside printable ASCII are 3-digit octal escapes (a hex escape would swallow following
    hex digits); `?` is escaped so that no trigraph (-std=c99) forms."""
    pieces = []
    for byte in s.replace("%", "%%").encode("utf-8", "surrogatepass"):
        ch = chr(byte)
        if ch in '"\\?':
            pieces.append("\\" + ch)
        elif ch == "\n":
            pieces.append("\\n")
        elif 32 <= byte < 127:
            pieces.append(ch)
        else:
            pieces.append(f"\\{byte:03o}")
    return '"' + "".join(pieces) + '"'


def serial_when_small(lines: list[str]) -> list[str]:
    """`#pragma omp parallel ... if (COND)` + its statement -> `if (COND) { parallel } else
    { the same statement without OpenMP }`. Entering a parallel region costs about a
    microsecond even when its `if` clause is false; small kernels (and loop bodies run many
    times) should not pay it."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        cond = _parallel_if(line)
        if cond is None or i + 1 >= len(lines):
            out.append(line)
            i += 1
            continue
        pad = line[:len(line) - len(line.lstrip())]
        end = i + 1
        if lines[i + 1].rstrip().endswith("{"):
            while not (lines[end].startswith(pad + "}") and
                       len(lines[end]) - len(lines[end].lstrip()) == len(pad)):
                end += 1
        stmt = lines[i + 1:end + 1]
        head = line[:line.rfind(" if (")]
        out.append(f"{pad}if ({cond}) {{")
        out.append("  " + head)
        out.extend("  " + s if s else s for s in stmt)
        out.append(f"{pad}}} else {{")
        out.extend("  " + s if s else s for s in stmt if not s.lstrip().startswith("#pragma omp"))
        out.append(f"{pad}}}")
        i = end + 1
    return out


def _parallel_if(line: str) -> str | None:
    s = line.strip()
    if not s.startswith("#pragma omp parallel") or not s.endswith(")") or " if (" not in s:
        return None
    at = s.rfind(" if (") + 4
    depth = 0
    for j in range(at, len(s)):
        depth += {"(": 1, ")": -1}.get(s[j], 0)
        if depth == 0:
            return s[at + 1:j] if j == len(s) - 1 else None
    return None

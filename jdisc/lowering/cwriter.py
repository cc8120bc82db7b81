"""A small indenting writer for generated C."""

from __future__ import annotations

import contextlib


class CWriter:
    def __init__(self, indent: str = "  "):
        self.lines: list[str] = []
        self.level = 0
        self.unit = indent
        self._omp_lines: set[int] = set()       # indices of the `#pragma omp` lines
        self._parallel: list[tuple[int, int]] = []   # (first line, level) of an open region

    def __call__(self, line: str = "") -> None:
        self.lines.append(self.unit * self.level + line if line else "")

    def omp(self, directive: str) -> None:
        """`#pragma omp <directive>`."""
        self._omp_lines.add(len(self.lines))
        self(f"#pragma omp {directive}")

    def parallel(self, directive: str, cond: str) -> None:
        """The next statement, a block, under `#pragma omp <directive>` when `cond` holds at
        run time, and without any OpenMP pragma otherwise:
        `if (cond) { #pragma omp ... stmt } else { stmt }`. Entering a parallel region costs
        about a microsecond even when its `if` clause is false; small kernels, and loop bodies
        run many times, should not pay it. The region ends with the `close` of that block."""
        assert not self._parallel, "parallel regions do not nest"
        self.open(f"if ({cond})")
        self.omp(directive)
        self._parallel.append((len(self.lines), self.level))

    def _end_parallel(self) -> None:
        start, _ = self._parallel.pop()
        stmt = self.lines[start:]
        self.else_()
        self.lines.extend(line for i, line in enumerate(stmt, start)
                          if i not in self._omp_lines)
        self.close()

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
        self.level += 1
        yield
        self.close(tail)

    def open(self, head: str = "") -> None:
        """`head {` with the lines after it indented until `close`: a block whose end is
        written elsewhere (`block` when one place writes both)."""
        self(f"{head} {{" if head else "{")
        self.level += 1

    def close(self, tail: str = "}") -> None:
        """The end of the innermost block (and of a parallel region that it was)."""
        self.level -= 1
        self(tail)
        if self._parallel and tail == "}" and self.level == self._parallel[-1][1]:
            self._end_parallel()

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

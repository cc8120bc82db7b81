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

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def c_string(s: str) -> str:
    """A C string literal for `s` (printf-safe: % doubled)."""
    out = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("%", "%%")
    return '"' + "".join(ch if 32 <= ord(ch) < 127 else f"\\x{ord(ch):02x}" for ch in out) + '"'

"""A small indenting writer for generated C."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from typing import Sequence


class CWriter:
    def __init__(self, indent: str = "  ", function: str = "", params: Sequence[str] = (),
                 attributes: str = ""):
        """`function` and `params`: the C function being written (its name and parameter
        declarations), which `parallel` loops are cut out of; `attributes`: what precedes the
        function's return type (JD_KEEP_BRANCHES), given to those loops' functions too."""
        self.lines: list[str] = []
        self.level = 0
        self.unit = indent
        self.function, self.params = function, tuple(params)
        self.attributes = attributes
        self.outlined: list[str] = []   # the functions of `parallel` loops: written before it
        self._region: _Region | None = None

    def __call__(self, line: str = "") -> None:
        self.lines.append(self.unit * self.level + line if line else "")

    def omp(self, directive: str) -> None:
        """`#pragma omp <directive>` (only `simd`: there is no OpenMP runtime)."""
        self(f"#pragma omp {directive}")

    def parallel(self, count: str, go: str, shares: Sequence[tuple[str, ...]] = (),
                 failed: str | None = None) -> None:
        """The next block, run once per piece of the range [0, count) on the program's pool
        (c_runtime/jd_pool.h) when `go` holds at run time, and as one piece on the calling
        thread otherwise. The block sees its piece as `jd_lo` .. `jd_hi`; it is written into a
        function of its own, which sees the function's parameters and, read-only, the locals
        named in `shares`: (C type, name) pairs are copied in, (C type, name, C expression)
        triples are computed anew from the parameters in each piece (so that a size known
        when the C is compiled stays a constant the loops are optimised for). Whatever the
        block declares before its loop over the piece is per piece (scratch rows). With
        `failed`, the name of an int local to
        the function: the block may set its own `failed` to 1, and the function's is 1 after
        the loop when any piece set it. The region ends with the `close` of that block."""
        assert self._region is None, "parallel loops do not nest"
        assert self.function, "a parallel loop needs the function it is cut out of"
        self._region = _Region(count, go, tuple(shares), failed, self.lines, self.level)
        self.lines, self.level = [], 1

    def _end_parallel(self) -> None:
        g, self._region = self._region, None
        body, self.lines, self.level = self.lines, g.lines, g.level
        name = f"{self.function}_p{len(self.outlined)}"
        fields = [(_field_type(p), _decl_name(p)) for p in self.params] + \
            [share for share in g.shares if len(share) == 2]
        f = CWriter(self.unit)
        f(f"/* {self.function}'s parallel loop {len(self.outlined)}: its pieces run on the pool */")
        with f.block("typedef struct", f"}} {name}_ctx;"):
            f("jd_region jd;")
            for ctype_, field in fields:
                f(f"{ctype_}{'' if ctype_.endswith('*') else ' '}{field};")
        with f.block(f"{self.attributes}static void {name}(const void *jd_ctx, "
                     f"int64_t jd_piece)"):
            f(f"const {name}_ctx *jd_c = (const {name}_ctx *)jd_ctx;")
            for p in self.params:
                f(f"{p} = jd_c->{_decl_name(p)}; (void){_decl_name(p)};")
            for ctype_, field, *expr in g.shares:
                f(f"{ctype_} const {field} = {expr[0] if expr else 'jd_c->' + field}; "
                  f"(void){field};")
            f("const int64_t jd_lo = jd_piece * jd_c->jd.step;")
            f("const int64_t jd_hi = jd_c->jd.count - jd_lo < jd_c->jd.step ? jd_c->jd.count "
              ": jd_lo + jd_c->jd.step;")
            if g.failed:
                f(f"int {g.failed} = 0;")
            f.lines.extend(body)
            if g.failed:
                f(f"if ({g.failed}) jd_region_fail((jd_region *)&jd_c->jd);")
        self.outlined.append(f.text())
        self.open()
        values = ", ".join(field for _, field in fields)
        self(f"{name}_ctx jd_ctx = {{{{0, 0, 0}}{', ' + values if values else ''}}};")
        self(f"jd_parallel({name}, &jd_ctx.jd, {g.count}, {g.go});")
        if g.failed:
            self(f"if (jd_ctx.jd.failed) {g.failed} = 1;")
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
        """The end of the innermost block (and of the parallel loop that it was)."""
        self.level -= 1
        self(tail)
        if self._region is not None and tail == "}" and self.level == 1:
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


@dataclasses.dataclass(frozen=True)
class _Region:
    """An open `parallel` loop, and the function text it interrupted."""
    count: str
    go: str
    shares: tuple[tuple[str, ...], ...]
    failed: str | None
    lines: list[str]
    level: int


def _decl_name(decl: str) -> str:
    """The name a C parameter declaration declares (`const float *restrict in0` -> in0)."""
    return re.findall(r"[A-Za-z_][A-Za-z0-9_]*", decl)[-1]


def _field_type(decl: str) -> str:
    """A parameter's type as a struct field's: no `restrict`, no top-level `const`."""
    t = decl[:decl.rindex(_decl_name(decl))].replace("restrict ", "").strip()
    return t[len("const "):] if "*" not in t and t.startswith("const ") else t

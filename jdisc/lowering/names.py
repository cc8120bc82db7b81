"""Everything of the user's that reaches generated C goes through this module.

User input names dimension variables (`dynamic_axes`), arguments (parameter names, pytree
paths with arbitrary dict keys), functions, and source locations (file paths, jax's name stack
with `named_scope` strings). None of it is ever written into C as it is:

* `dim_ident(name)` is the C identifier of a dimension variable. It is built, not filtered:
  `d_<name>` for a name of ASCII letters, digits and `_`, else `dx_<name, other characters
  as _>_<hex of its UTF-8 bytes>`. The mapping is injective, and no other identifier jdisc
  writes (locals, helpers `jd_*`, kernels, buffers) starts with `d_` or `dx_`, so no name (a
  C keyword, `status`, `malloc`, `len`, `séq`) can collide with anything.
* `c_comment(text)` is text that is safe inside a `/* ... */` comment (`*/`, `/*`, trigraphs
  and non-ASCII characters cannot end or bend it).
* `c_string` (lowering/cwriter.py) is the only way user text enters a string literal.
"""

from __future__ import annotations

import re

_PLAIN = re.compile(r"[A-Za-z0-9_]+")
_OTHER = re.compile(r"[^A-Za-z0-9_]")


def dim_ident(name: str) -> str:
    """The C identifier of the dimension variable `name` (any string)."""
    if _PLAIN.fullmatch(name):
        return "d_" + name
    return f"dx_{_OTHER.sub('_', name)}_{name.encode('utf-8', 'surrogatepass').hex()}"


def c_comment(text: str) -> str:
    """`text` for the inside of a C block comment, on one line: printable ASCII stays, other
    characters (and backslashes, which could splice lines) become `<U+XXXX>`, and `*/`, `/*`
    and `??` (a trigraph under -std=c99) are broken up."""
    out = "".join(ch if " " <= ch <= "~" and ch != "\\" else f"<U+{ord(ch):04X}>"
                  for ch in str(text))
    previous = None
    while previous != out:
        previous = out
        out = out.replace("*/", "* /").replace("/*", "/ *").replace("??", "? ?")
    return out

"""Every ```python block of the docs and the README runs: a page's blocks in order, as one script, in a fresh
process and an empty folder (so that files a page writes go nowhere), with four host devices
for the sharding examples. A block that raises, or an assert in it that fails, fails its page.
The site itself is built with `mkdocs build --strict` in .ci/run (the `docs` extra)."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
PAGES = sorted(p for p in [ROOT / "README.md", *DOCS.rglob("*.md")] if _BLOCK.search(p.read_text()))


def python_blocks(page: pathlib.Path) -> list[str]:
    return _BLOCK.findall(page.read_text())


def test_the_pages_with_code_are_found():
    names = {p.name for p in PAGES}
    assert {"README.md", "index.md", "getting-started.md", "errors.md", "jax-programs.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_code_runs(page, tmp_path):
    script = "\n\n".join(python_blocks(page))
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    env.pop("JAX_ENABLE_X64", None)
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{page.name}'s code failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"

"""Every script in examples/ runs on small sizes and agrees with jax.jit: each prints one line
(its largest difference from jax.jit, the compile counts and the stream's time) and exits with
status 1 when the difference is over its tolerance or jdisc compiled more than once."""

import re
import subprocess
import sys

import pytest

from subprocess_support import REPO, env_with

EXAMPLES = sorted(p.name for p in (REPO / "examples").glob("*.py") if not p.name.startswith("_"))


def test_there_are_the_examples_the_docs_list():
    assert {"generate.py", "gnn.py", "particles.py", "sinkhorn.py", "returns.py"} <= set(EXAMPLES)


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_and_matches_jax_jit(name):
    proc = subprocess.run([sys.executable, str(REPO / "examples" / name), "--small"],
                          cwd=REPO / "examples", env=env_with(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    line = proc.stdout.strip().splitlines()[-1]
    assert re.search(r"max difference \S+ \(tolerance \S+\); compiles jdisc 1, "
                     r"jax\.jit \d+", line), line

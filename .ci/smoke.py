"""Smoke test of an installed jdisc (the wheel, in a fresh virtual environment): run from a
folder outside the checkout, so that `import jdisc` finds the installed package."""

import importlib.metadata
import os
import subprocess
import sys
import tempfile

import numpy as np

import jdisc

assert "site-packages" in jdisc.__file__, jdisc.__file__
assert importlib.metadata.version("jdisc") == jdisc.__version__
os.environ.setdefault("JDISC_CACHE_DIR", tempfile.mkdtemp())
f = jdisc.jit(lambda x, w: np.float32(2) * (x @ w) + 1, dynamic_axes=({0: "n"}, None))
w = np.arange(12, dtype=np.float32).reshape(4, 3)
for n in (0, 1, 7, 130):
    x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
    np.testing.assert_allclose(f(x, w), 2 * (x @ w) + 1, rtol=1e-5, atol=1e-5)
assert f.stats()["compiles"] == 1, f.stats()
path = os.path.join(tempfile.mkdtemp(), "f.jdisc")
jdisc.export_package(lambda x: x * 3, np.ones(5, np.float32), dynamic_axes=({0: "n"},)).save(path)
np.testing.assert_array_equal(jdisc.load(path)(np.ones(2, np.float32)), [3, 3])
subprocess.run([sys.executable, "-m", "jdisc", "--version"], check=True)
print(f"smoke test of the installed jdisc {jdisc.__version__}: ok")

"""f32 transcendentals, elementwise over 2^20 elements: jdisc against jax.jit, ns per element.

    python benchmarks/transcendentals.py [--repeats 15] [--json OUT.json]

Each function is one elementwise kernel; jdisc's use lowering/c_runtime/jd_math.h's polynomial
versions, which vectorise when the compiler if-converts their float compares (the kernels are
built with -fno-trapping-math, custom_calls/compiler.py). Also printed: whether the compiler
reports the kernel's loops as vectorised (`-fopt-info-vec-optimized` on the kernel's unit).
Medians over the repeats, both sides on the same input in one process.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import tempfile
import time

FUNCTIONS = ("exp", "tanh", "logistic", "log", "expm1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    os.environ["JDISC_CACHE_DIR"] = tempfile.mkdtemp(prefix="jdisc-transcendentals-")
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jdisc
    from jdisc.custom_calls import compiler
    from jdisc.lowering import units
    fns = {"exp": jnp.exp, "tanh": jnp.tanh, "logistic": jax.nn.sigmoid,
           "log": lambda v: jnp.log(jnp.abs(v) + 1.0), "expm1": jnp.expm1}
    x = jax.device_put(np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32))
    cc = compiler.compiler_command()
    print("load average before:", " ".join(f"{v:.2f}" for v in os.getloadavg()))
    print("compiler:", compiler._compiler_identity(cc))
    rows = []
    for name in FUNCTIONS:
        f, g = jdisc.jit(fns[name], dynamic_axes=({0: "n"},), bridge=False), jax.jit(fns[name])

        def per_element(h):
            jax.block_until_ready(h(x))
            ts = []
            for _ in range(a.repeats):
                t0 = time.perf_counter()
                jax.block_until_ready(h(x))
                ts.append(time.perf_counter() - t0)
            return sorted(ts)[len(ts) // 2] / x.size * 1e9
        jd, xla = per_element(f), per_element(g)
        kernels = [text for uname, _, text in units.split(f.compiled_for(x).c_source)
                   if uname.startswith("jd_u")]
        with tempfile.TemporaryDirectory() as tmp:
            vectorised = []
            for i, text in enumerate(kernels):
                path = os.path.join(tmp, f"k{i}.c")
                with open(path, "w") as fh:
                    fh.write(text)
                flags = [fl for fl in compiler.compile_flags() if fl not in ("-shared",)]
                out = subprocess.run([*cc, *flags, "-c", path, "-o", path + ".o",
                                      "-fopt-info-vec-optimized"], capture_output=True,
                                     text=True)
                vectorised.append("loop vectorized" in out.stdout + out.stderr)
        rows.append({"function": name, "jdisc_ns": jd, "xla_ns": xla, "ratio": jd / xla,
                     "vectorised": all(vectorised)})
    print("| f32 function | jdisc ns/element | jax.jit ns/element | ratio | loops vectorised |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['function']} | {r['jdisc_ns']:.2f} | {r['xla_ns']:.2f} | "
              f"{r['ratio']:.2f} | {'yes' if r['vectorised'] else 'no'} |")
    print("load average after:", " ".join(f"{v:.2f}" for v in os.getloadavg()))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"rows": rows, "compiler": compiler._compiler_identity(cc),
                       "command": shlex.join(cc + compiler.compile_flags())}, fh, indent=1)


if __name__ == "__main__":
    main()

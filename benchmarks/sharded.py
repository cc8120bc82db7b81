"""jdisc under JAX's SPMD partitioner: a jdisc call inside `jax.jit` on batch-sharded inputs.

    python benchmarks/sharded.py [--quick] [--repeats 7] [--sizes 8,64,256,1024] [--json OUT.json]
    python benchmarks/sharded.py --table OUT.json     (the table of a saved run)
    python benchmarks/sharded.py --devices 4 --json OUT.json     (one device count, internal)

On 1, 2 and 4 host devices (`--xla_force_host_platform_device_count`, which must be set before
jax starts, so each device count runs in a subprocess of this script with the internal flag
`--devices N`; the parent collects their JSON), with a 1-D mesh ("data") and inputs sharded on
their batch axis, weights replicated, it compares `jax.jit` around a jdisc call against plain
`jax.jit` of the same function under the same shardings, at several batch sizes B:

* mlp: the MLP x[B,512] -> tanh(x @ w1 + b1) [B,2048] -> @ w2 + b2 [B,512].
* train: a data-parallel training step, `jax.value_and_grad` (w.r.t. the weights) of the mean
  squared error of that MLP, x and y sharded on B; the jdisc function is the loss, the grad is
  taken outside it by JAX (jdisc's vjp program), all under one `jax.jit`.

Per (devices, workload, B): steady-state medians of `--repeats` interleaved blocks of calls, the
ratio jdisc / XLA, the bytes each compiled program moves between devices (from the compiled
HLO: the result shapes of its all-gather, all-reduce, reduce-scatter, all-to-all and
collective-permute instructions), which collectives those are, jdisc's compiles so far in that
process (`stats()`: 1 per workload whatever B and the device count, plus 1 vjp program for
train) and the largest difference between the two results. Tables go to stdout, progress to
stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def _device_count_from_argv(argv: list[str]) -> int | None:
    for i, a in enumerate(argv):
        if a == "--devices" and i + 1 < len(argv):
            return int(argv[i + 1])
        if a.startswith("--devices="):
            return int(a.split("=", 1)[1])
    return None


_N_DEVICES = _device_count_from_argv(sys.argv[1:])
if _N_DEVICES is not None:           # a child: the device count must be set before jax starts
    _flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
              if not f.startswith("--xla_force_host_platform_device_count")]
    os.environ["XLA_FLAGS"] = " ".join(
        _flags + [f"--xla_force_host_platform_device_count={_N_DEVICES}"])
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stream  # noqa: E402  (sets JDISC_CACHE_DIR before jdisc is imported)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import jdisc  # noqa: E402
from jdisc.bench.workloads import mlp_params  # noqa: E402

log = stream.log

DEVICE_COUNTS = (1, 2, 4)
SIZES_QUICK = (8, 64, 256)
SIZES_FULL = (8, 64, 256, 1024)
BLOCK_S = 0.1                       # a timed block of calls lasts at least this long

# ------------------------------------------------------------------------- collectives in HLO

COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
SHORT = {"all-gather": "AG", "all-reduce": "AR", "reduce-scatter": "RS", "all-to-all": "A2A",
         "collective-permute": "CP"}
DTYPE_BYTES = {"pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1,
               "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
               "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
# `%name = <result type> <opcode>(` where the opcode is a collective, or the `-done` half of an
# async one (whose result is the collective's output; the `-start` half is not counted twice).
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(?P<type>.+?)\s+"
                    r"(?P<op>" + "|".join(COLLECTIVES) + r")(?:-done)?\(")
_SHAPE = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[([0-9,]*)\]")


def shape_bytes(text: str) -> int:
    """Bytes of every array shape in an HLO type, e.g. `(f32[], f32[16,512]{1,0})` -> 32772."""
    total = 0.0
    for dtype, dims in _SHAPE.findall(text):
        if dtype not in DTYPE_BYTES:
            continue
        total += DTYPE_BYTES[dtype] * math.prod(int(d) for d in dims.split(",") if d)
    return int(total)


def collectives(hlo: str) -> dict:
    """Collective instructions of a compiled HLO module: count and result bytes per kind."""
    kinds: dict[str, dict[str, int]] = {}
    for line in hlo.splitlines():
        m = _INSTR.match(line)
        if m:
            k = kinds.setdefault(m.group("op"), {"count": 0, "bytes": 0})
            k["count"] += 1
            k["bytes"] += shape_bytes(m.group("type"))
    return {"bytes": sum(k["bytes"] for k in kinds.values()), "kinds": kinds}


def collectives_label(c: dict) -> str:
    return " ".join(f"{SHORT[k]}{v['count']}" for k, v in sorted(c["kinds"].items())) or "-"

# ------------------------------------------------------------------------------- workloads


def mlp(params, x):
    return jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]


def loss(params, x, y):
    return jnp.mean((mlp(params, x) - y) ** 2)


def block_s(fn, args, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / calls


def compiled(fn, args) -> tuple:
    t0 = time.perf_counter()
    c = jax.jit(fn).lower(*args).compile()
    return c, time.perf_counter() - t0


def bench_devices(n: int, sizes: list[int], repeats: int) -> dict:
    """Every workload at every size on an n-device mesh (this process's devices)."""
    devices = jax.devices()
    if len(devices) != n:
        raise SystemExit(f"asked for {n} devices, jax has {len(devices)}: {devices}")
    mesh = jax.make_mesh((n,), ("data",))
    rep, dat = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    params = jax.device_put(mlp_params(), rep)
    rng = np.random.default_rng(0)
    stream.fresh_cache_dir(f"sharded-{n}")
    jd_mlp = jdisc.jit(mlp, dynamic_axes=(None, {0: "B"}))
    jd_loss = jdisc.jit(loss, dynamic_axes=(None, {0: "B"}, {0: "B"}))
    workloads = {
        "mlp": (jd_mlp, lambda p, x, y: jd_mlp(p, x), lambda p, x, y: mlp(p, x)),
        "train": (jd_loss, jax.value_and_grad(lambda p, x, y: jd_loss(p, x, y)),
                  jax.value_and_grad(loss)),
    }
    rows = []
    for name, (jf, jd_fn, xla_fn) in workloads.items():
        for b in sizes:
            x = jax.device_put(rng.standard_normal((b, 512)).astype(np.float32), dat)
            y = jax.device_put(rng.standard_normal((b, 512)).astype(np.float32), dat)
            args = (params, x, y)
            log(f"[{n} dev] {name} B={b}: compile both, then {repeats} interleaved repeats")
            jd, jd_compile = compiled(jd_fn, args)
            xla, xla_compile = compiled(xla_fn, args)
            err = stream.max_abs_diff(jd(*args), xla(*args))
            one = max(stream.timed(jd, args)[0], stream.timed(xla, args)[0])
            calls = max(1, math.ceil(BLOCK_S / max(one, 1e-6)))
            tj, tx = [], []
            for _ in range(repeats):
                tj.append(block_s(jd, args, calls))
                tx.append(block_s(xla, args, calls))
            st = jf.stats()
            rows.append({
                "devices": n, "workload": name, "B": b, "calls_per_block": calls,
                "jdisc_ms": statistics.median(tj) * 1e3, "xla_ms": statistics.median(tx) * 1e3,
                "jdisc_ms_all": [t * 1e3 for t in tj], "xla_ms_all": [t * 1e3 for t in tx],
                "jdisc_collectives": collectives(jd.as_text()),
                "xla_collectives": collectives(xla.as_text()),
                "jdisc_compiles": st["compiles"], "jdisc_vjp_compiles": st.get("vjp_compiles", 0),
                "jit_around_jdisc_compile_s": jd_compile, "xla_compile_s": xla_compile,
                "max_abs_diff": err})
    return {"devices": n, "mesh_axis_types": str(mesh.axis_types),
            "machine": stream.machine_info(), "rows": rows,
            "stats": {"mlp": jd_mlp.stats(), "train": jd_loss.stats()}}

# ---------------------------------------------------------------------------------- parent


def run_child(n: int, args: argparse.Namespace, out_dir: str) -> dict | None:
    path = os.path.join(out_dir, f"devices-{n}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--devices", str(n), "--json", path,
           "--repeats", str(args.repeats), "--sizes", ",".join(map(str, args.sizes))]
    log(f"[parent] {n} device(s): {' '.join(cmd[1:])}")
    t0 = time.perf_counter()
    rc = subprocess.call(cmd)
    if rc != 0:
        log(f"[parent] {n} device(s) failed with exit status {rc}")
        return None
    with open(path) as f:
        res = json.load(f)
    res["wall_s"] = time.perf_counter() - t0
    return res


def print_report(info: dict, results: list[dict], failed: list[int]) -> None:
    print(stream.machine_line(info))
    print("\njdisc inside jax.jit vs jax.jit, batch-sharded on a 1-D mesh ('data'), weights "
          "replicated")
    print("mlp: x[B,512] -> tanh -> [B,2048] -> [B,512];  train: value_and_grad(MSE(mlp)) "
          "w.r.t. the weights")
    print(f"{'dev':>3} {'workload':>8} {'B':>5} {'jdisc ms':>9} {'xla ms':>9} {'ratio':>6} "
          f"{'jdisc bytes':>11} {'xla bytes':>11} {'jdisc coll':>10} {'xla coll':>8} "
          f"{'compiles':>8} {'max|diff|':>9}")
    ratios = []
    for res in results:
        for r in res["rows"]:
            ratio = r["jdisc_ms"] / r["xla_ms"]
            ratios.append(ratio)
            comp = str(r["jdisc_compiles"]) + (f"+{r['jdisc_vjp_compiles']}"
                                               if r["jdisc_vjp_compiles"] else "")
            print(f"{r['devices']:>3} {r['workload']:>8} {r['B']:>5} {r['jdisc_ms']:>9.3f} "
                  f"{r['xla_ms']:>9.3f} {ratio:>6.2f} {r['jdisc_collectives']['bytes']:>11,} "
                  f"{r['xla_collectives']['bytes']:>11,} "
                  f"{collectives_label(r['jdisc_collectives']):>10} "
                  f"{collectives_label(r['xla_collectives']):>8} {comp:>8} "
                  f"{r['max_abs_diff']:>9.2g}")
    if ratios:
        print(f"  geomean time ratio jdisc/xla: {stream.geomean(ratios):.2f}")
    print("  bytes: result bytes of the compiled program's collectives (AG all-gather, AR "
          "all-reduce, RS reduce-scatter,\n  A2A all-to-all, CP collective-permute); compiles: "
          "jdisc's compiles so far in that process (+ vjp programs)")
    gathers = [f"{r['devices']} dev {r['workload']} B={r['B']}" for res in results
               for r in res["rows"] if any(k in r["jdisc_collectives"]["kinds"]
                                           for k in ("all-gather", "all-to-all"))]
    if gathers:
        print("  jdisc's program gathers or redistributes inputs in: " + ", ".join(gathers))
    print(f"note: the host devices are threads on this machine's {info['cores']} cores, "
          "which they share, so more devices\n  do not mean more compute: the figures to "
          "watch are the ratio to jax.jit and the absence of gathers,\n  not the absolute "
          "speed-up over the 1-device rows.")
    for n in failed:
        print(f"  {n} device(s): the subprocess failed (see stderr)")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help=f"batch sizes {','.join(map(str, SIZES_QUICK))}, 5 repeats")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--json", metavar="OUT.json")
    ap.add_argument("--sizes", default=None, help="comma-separated batch sizes (multiples of 4)")
    ap.add_argument("--devices", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--table", metavar="RESULTS.json",
                    help="print the table of a saved --json run, measuring nothing")
    args = ap.parse_args(argv)
    if args.table:
        with open(args.table) as f:
            saved = json.load(f)
        print_report(saved["machine"], saved["results"], saved["failed"])
        return
    args.repeats = args.repeats or (5 if args.quick else 7)
    args.sizes = ([int(s) for s in args.sizes.split(",")] if args.sizes else
                  list(SIZES_QUICK if args.quick else SIZES_FULL))
    if any(b % max(DEVICE_COUNTS) for b in args.sizes):
        ap.error(f"batch sizes must be multiples of {max(DEVICE_COUNTS)}: {args.sizes}")
    if args.devices is not None:                        # a child: one device count
        stream.warm_up()
        res = bench_devices(args.devices, args.sizes, args.repeats)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
        else:
            json.dump(res, sys.stdout, indent=1)
        return
    info = stream.machine_info()
    results, failed = [], []
    with tempfile.TemporaryDirectory(prefix="jdisc-sharded-") as tmp:
        for n in DEVICE_COUNTS:
            res = run_child(n, args, tmp)
            if res is None:
                failed.append(n)
            else:
                results.append(res)
    print_report(info, results, failed)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "sizes": args.sizes, "repeats": args.repeats,
                       "results": results, "failed": failed}, f, indent=1)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()

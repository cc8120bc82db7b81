"""jdisc in a multi-process JAX program: 2 local processes x 2 CPU devices = 4 global devices,
jax.distributed over loopback with gloo CPU collectives.

Every process jits a jdisc function on a batch sharded over all 4 devices: the partitioner keeps
the batch sharded (no all-gather), each device runs the one compiled program on its shard, and
the partial sum is all-reduced across both processes. Both processes start from ONE fresh
JDISC_CACHE_DIR and compile the same program at the same moment (the C compiler is a wrapper
that logs and sleeps, so the second process waits on the cache entry's lock): exactly one build,
one cache hit. Then process 0 exports and saves a package, and both load it and run it on their
local shards, eagerly and inside jax.jit with the same sharding.

The processes are started once per module (`cluster`); each prints a line per check it passed
("passed <check> <process id>"), and "ok <process id>" when every check passed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from subprocess_support import env_with

NUM_PROCESSES = 2
TIMEOUT_S = 150          # for the whole cluster; both processes are killed past it

SCRIPT = textwrap.dedent(r'''
    import json, os, sys, traceback
    pid, port, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

    import jax
    # gloo is jax 0.10's default once jax.distributed is initialised; say so for older ones.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # gloo binds the address this host's name resolves to unless given one: loopback only.
    from jax._src import xla_bridge
    _gloo = xla_bridge._jax.make_gloo_tcp_collectives
    xla_bridge._jax.make_gloo_tcp_collectives = \
        lambda distributed_client, **kw: _gloo(distributed_client, hostname="127.0.0.1")

    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding, PartitionSpec as P

    import jdisc      # imported before jax.distributed.initialize, as a user would

    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}",
                               coordinator_bind_address=f"127.0.0.1:{port}",
                               num_processes=2, process_id=pid, initialization_timeout=60)
    assert (jax.process_count(), jax.process_index()) == (2, pid)
    assert (jax.device_count(), jax.local_device_count()) == (4, 2), jax.devices()

    mesh = jax.make_mesh((4,), ("data",))
    batched, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    W = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
    SIZES = (8, 24)
    failed = []


    def layer(x, w):
        return jnp.tanh(x @ w), jnp.sum(x @ w)


    def global_x(n):            # the same global batch in every process
        return np.random.default_rng(n).standard_normal((n, 16)).astype(np.float32)


    def place(a, sharding):     # a global array; this process fills only its own shards
        return jax.make_array_from_callback(a.shape, sharding, lambda index: a[index])


    def close(got, want, what, tol=2e-5):
        got = np.asarray(got)
        assert got.shape == want.shape and got.dtype == np.float32, (what, got.shape, got.dtype)
        scale = max(1.0, float(np.abs(want).max()))
        err = float(np.abs(got.astype(np.float64) - want).max()) if want.size else 0.0
        assert err <= tol * scale, f"{what}: max error {err:.3g} > {tol} * {scale:.3g}"


    def check_results(y, s, xg, what):
        """y sharded like x (2 local shards of n/4 rows), s replicated: against numpy."""
        ref = xg.astype(np.float64) @ W.astype(np.float64)
        shards = y.addressable_shards
        assert y.shape == (len(xg), 4) and len(shards) == 2, (what, y.shape, len(shards))
        assert y.sharding.is_equivalent_to(batched, 2), (what, y.sharding)
        for shard in shards:
            assert shard.data.shape == (len(xg) // 4, 4), (what, shard.data.shape)
            close(shard.data, np.tanh(ref)[shard.index], f"{what}: rows {shard.index[0]}")
        assert s.shape == () and s.is_fully_replicated, (what, s.shape, s.sharding)
        close(s.addressable_data(0), np.asarray(ref.sum()), f"{what}: sum", tol=1e-4)


    def check(name, fn):
        try:
            fn()
        except Exception as err:
            failed.append(name)
            print(f"--- check {name} failed in process {pid}:", file=sys.stderr)
            traceback.print_exc()
            print(f"failed {name} {pid}: {type(err).__name__}: {str(err).splitlines()[0]}",
                  flush=True)
        else:
            print(f"passed {name} {pid}", flush=True)


    # -- jdisc.jit inside jax.jit: both processes compile the same program at once ----------
    jf = jdisc.jit(layer, dynamic_axes=[{0: "B"}, None])
    step = jax.jit(lambda x, w: jf(x, w))
    w = place(W, replicated)


    def sharded_jit():
        multihost_utils.sync_global_devices("compile")
        for n in SIZES:
            xg = global_x(n)
            x = place(xg, batched)
            hlo = step.lower(x, w).compile().as_text()
            calls = [l for l in hlo.splitlines() if 'custom_call_target="jdisc_' in l]
            assert calls and all(f"f32[{n // 4},16]" in l for l in calls), \
                f"the jdisc call does not take the local shard f32[{n // 4},16]: {calls}"
            assert "all-gather" not in hlo, f"an all-gather at B={n}:\n{hlo[:6000]}"
            assert "all-reduce" in hlo, f"no all-reduce of the partial sum at B={n}"
            y, s = step(x, w)
            check_results(y, s, xg, f"jdisc.jit at B={n}")
        stats = jf.stats()
        print("stats", pid, json.dumps(stats), flush=True)
        assert stats["compiles"] == 1, stats


    check("sharded-jit", sharded_jit)

    # -- a package saved by process 0, loaded by both ---------------------------------------
    path = os.path.join(work, "layer.jdisc")


    def save():
        if pid == 0:
            pkg = jdisc.export_package(layer, global_x(4), W, dynamic_axes=[{0: "B"}, None],
                                       bake_params=("w",), name="layer")
            pkg.save(path)


    check("save", save)
    multihost_utils.sync_global_devices("saved")
    pkg = jdisc.load(path)
    print(f"package {pid} {pkg.library_origin}", flush=True)


    def package_on_local_shards():
        """The package, eagerly, on each local shard; partial sums added across processes."""
        for n in SIZES:
            xg = global_x(n)
            x = place(xg, batched)
            ref = xg.astype(np.float64) @ W.astype(np.float64)
            partial = 0.0
            for shard in x.addressable_shards:
                y, s = pkg(shard.data)
                close(y, np.tanh(ref)[shard.index], f"package at B={n}, rows {shard.index[0]}")
                partial += float(np.asarray(s))
            total = multihost_utils.process_allgather(np.float64(partial)).sum()
            close(np.float32(total), np.asarray(ref.sum()), f"package at B={n}: sum", 1e-4)


    def package_inside_jit():
        """The loaded package under jax.jit on the sharded batch, as jdisc.jit above."""
        run = jax.jit(lambda x: pkg(x))
        for n in SIZES:
            xg = global_x(n)
            x = place(xg, batched)
            hlo = run.lower(x).compile().as_text()
            assert "all-gather" not in hlo, f"an all-gather at B={n}:\n{hlo[:6000]}"
            y, s = run(x)
            check_results(y, s, xg, f"package inside jax.jit at B={n}")


    def eager_global():
        """Eager calls on the global sharded array: each process runs its own shards; the sum
        is all-reduced across the processes."""
        for fn, what in ((jf, "jdisc.jit"), (pkg, "package")):
            for n in SIZES:
                xg = global_x(n)
                y, s = fn(place(xg, batched), *((W,) if fn is jf else ()))
                check_results(y, s, xg, f"eager {what} at B={n}")


    check("package-local-shards", package_on_local_shards)
    check("package-inside-jit", package_inside_jit)
    check("eager-global", eager_global)

    multihost_utils.sync_global_devices("done")
    if failed:
        print(f"failed {pid}: {failed}", flush=True)
        sys.exit(1)
    print(f"ok {pid}", flush=True)
''')


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """What the processes left: return codes, stdout, stderr, the C compiler's log."""

    def __init__(self, codes, outs, errs, builds, entries, seconds):
        self.codes, self.outs, self.errs, self.builds = codes, outs, errs, builds
        self.entries = entries       # the cache's entries that hold a library
        self.seconds = seconds

    def report(self) -> str:
        parts = [f"return codes {self.codes} after {self.seconds:.1f} s"]
        for i in range(NUM_PROCESSES):
            parts.append(f"--- process {i} stdout:\n{self.outs[i][-3000:]}")
            parts.append(f"--- process {i} stderr (tail):\n{self.errs[i][-6000:]}")
        return "\n".join(parts)

    def lines(self, i: int) -> list[str]:
        return self.outs[i].splitlines()

    def stats(self, i: int) -> dict:
        for line in self.lines(i):
            if line.startswith(f"stats {i} "):
                return json.loads(line.split(" ", 2)[2])
        raise AssertionError(f"process {i} printed no stats\n{self.report()}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    work = tmp_path_factory.mktemp("distributed")
    cache, log = work / "cache", work / "cc.log"
    cc = work / "cc-wrapper"      # logs each library's link and stretches it, so that the
    cc.write_text(                # other process meets the cache entry while it is built
        "#!/bin/sh\n"
        'case " $* " in *" -shared "*lib.so.*)\n'
        f'  echo "$$ $*" >> "{log}"; sleep 1 ;;\n'
        "esac\n"
        'exec cc "$@"\n')
    cc.chmod(0o755)
    flags = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2")
    env = env_with(JDISC_CACHE_DIR=str(cache), JDISC_CC=str(cc), XLA_FLAGS=flags.strip(),
                   JAX_PLATFORMS="cpu")
    port = _free_port()
    outs = [open(work / f"out{i}.txt", "w+") for i in range(NUM_PROCESSES)]
    errs = [open(work / f"err{i}.txt", "w+") for i in range(NUM_PROCESSES)]
    procs = []
    t0 = time.monotonic()
    try:
        for i in range(NUM_PROCESSES):
            procs.append(subprocess.Popen([sys.executable, "-c", SCRIPT, str(i), str(port),
                                           str(work)], env=env, cwd=work,
                                          stdin=subprocess.DEVNULL, stdout=outs[i],
                                          stderr=errs[i], start_new_session=True))
        codes = []
        for p in procs:
            try:
                codes.append(p.wait(timeout=max(1.0, TIMEOUT_S - (time.monotonic() - t0))))
            except subprocess.TimeoutExpired:
                codes.append(f"timed out after {TIMEOUT_S} s")
    finally:
        for p in procs:          # never left running: on a timeout, an error, Ctrl-C
            if p.poll() is None:
                try:             # its own process group: the C compilers it runs go too
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
    texts = []
    for f in outs + errs:
        f.seek(0)
        texts.append(f.read())
        f.close()
    builds = log.read_text().splitlines() if log.exists() else []
    entries = sorted(os.path.realpath(p.parent) for p in cache.glob("*/*/lib.so"))
    return Cluster(codes, texts[:NUM_PROCESSES], texts[NUM_PROCESSES:], builds, entries,
                   time.monotonic() - t0)


def _assert_passed(cluster: Cluster, check: str) -> None:
    for i in range(NUM_PROCESSES):
        assert f"passed {check} {i}" in cluster.lines(i), \
            f"check {check!r} did not pass in process {i}\n{cluster.report()}"


def test_sharded_jit_across_two_processes(cluster):
    """Batch sharded over 4 devices in 2 processes: no all-gather, values per local shard,
    the all-reduced sum, two batch sizes, one compile per process."""
    _assert_passed(cluster, "sharded-jit")
    for i in range(NUM_PROCESSES):
        assert cluster.stats(i)["compiles"] == 1, cluster.stats(i)


def test_one_shared_cache_compiles_once(cluster):
    """Both processes compiled the same program at once into one fresh cache directory: one
    build of the C, one process waited for it and loaded it as a cache hit. (The package
    export later finds its program in the cache too, or builds it once: never twice.)"""
    _assert_passed(cluster, "sharded-jit")
    built = [os.path.realpath(os.path.dirname(next(t for t in line.split()
                                                   if "/lib.so." in t)))
             for line in cluster.builds]
    assert built and sorted(built) == cluster.entries, \
        (cluster.builds, cluster.entries, cluster.report())
    hits = [cluster.stats(i).get("cache_hits", 0) for i in range(NUM_PROCESSES)]
    assert sorted(hits) == [0, 1], (hits, cluster.report())


def test_loaded_package_on_local_shards(cluster):
    """A package saved by process 0 before a barrier, loaded by both, run on each local shard;
    the partial sums add up across processes to the global sum."""
    _assert_passed(cluster, "save")
    _assert_passed(cluster, "package-local-shards")
    for i in range(NUM_PROCESSES):
        assert f"package {i} package" in cluster.lines(i), cluster.report()


def test_loaded_package_inside_jit_and_every_process_ok(cluster):
    """The whole run: the loaded package inside jax.jit on the sharded batch as well (no
    all-gather, values per local shard, the all-reduced sum), and both processes exit 0
    printing "ok <process id>"."""
    _assert_passed(cluster, "eager-global")
    _assert_passed(cluster, "package-inside-jit")
    for i in range(NUM_PROCESSES):
        assert cluster.codes[i] == 0 and f"ok {i}" in cluster.lines(i), cluster.report()

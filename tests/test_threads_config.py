"""How many threads jdisc's kernels use (custom_calls/runtime.num_threads): the environment,
else the affinity mask capped by the cgroup's CPU quota (v1 and v2 layouts, faked here)."""

import os
import time

import jax
import pytest

from jdisc.custom_calls import runtime


def _v2(tmp_path, text):
    (tmp_path / "fs" / "box").mkdir(parents=True)
    (tmp_path / "fs" / "box" / "cpu.max").write_text(text)
    (tmp_path / "cgroup").write_text("0::/box\n")
    return str(tmp_path / "fs"), str(tmp_path / "cgroup")


def _v1(tmp_path, quota, period):
    d = tmp_path / "fs" / "cpu,cpuacct" / "box"
    d.mkdir(parents=True)
    (d / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (d / "cpu.cfs_period_us").write_text(f"{period}\n")
    (tmp_path / "cgroup").write_text("4:memory:/box\n3:cpu,cpuacct:/box\n0::/\n")
    return str(tmp_path / "fs"), str(tmp_path / "cgroup")


@pytest.mark.parametrize("text,want", [("200000 100000\n", 2.0), ("150000 100000\n", 1.5),
                                       ("max 100000\n", None)])
def test_cgroup_v2_quota(tmp_path, text, want):
    assert runtime.cgroup_cpu_quota(*_v2(tmp_path, text)) == want


@pytest.mark.parametrize("quota,period,want", [(300000, 100000, 3.0), (-1, 100000, None)])
def test_cgroup_v1_quota(tmp_path, quota, period, want):
    assert runtime.cgroup_cpu_quota(*_v1(tmp_path, quota, period)) == want


def test_no_cgroup_files_means_no_limit(tmp_path):
    assert runtime.cgroup_cpu_quota(str(tmp_path), str(tmp_path / "missing")) is None


def test_num_threads_is_capped_by_the_quota(monkeypatch):
    monkeypatch.delenv("JDISC_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(runtime, "cgroup_cpu_quota", lambda: 1.5)
    assert runtime.num_threads() == 2                  # ceil(1.5): the part-CPU is still used
    monkeypatch.setattr(runtime, "cgroup_cpu_quota", lambda: None)
    assert runtime.num_threads() == 64
    monkeypatch.setenv("JDISC_NUM_THREADS", "3")
    assert runtime.num_threads() == 3


def test_kernels_and_gemms_share_one_pool(monkeypatch):
    """A large elementwise kernel's rows run on the pool (jd_pool_jobs counts its jobs), with
    as many threads as num_threads(); a small one runs on the caller alone; a GEMM that follows
    uses the same pool."""
    import jax.numpy as jnp
    import numpy as np
    import jdisc
    monkeypatch.setenv("JDISC_NUM_THREADS", "3")
    f = jdisc.jit(lambda x, w: (jnp.tanh(x) * 2, x @ w), dynamic_axes=({0: "n"}, None))
    w = np.ones((512, 512), np.float32)
    small = np.ones((2, 512), np.float32)
    f(small, w)
    (compiled,) = f._compiled.values()
    handle = compiled.executable.library.handle
    assert handle.jd_threads() == 3
    before = handle.jd_pool_jobs()
    f(small, w)                                   # 1K elements, 0.5M multiply-adds: no job
    assert handle.jd_pool_jobs() == before
    big = np.random.default_rng(0).standard_normal((1024, 512)).astype(np.float32)
    t, mm = f(big, w)                              # 512K elements and 256M multiply-adds
    assert handle.jd_pool_jobs() >= before + 2
    np.testing.assert_allclose(np.asarray(t), np.tanh(big) * 2, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(np.asarray(mm), big @ w, rtol=1e-4, atol=1e-3)


def test_split_pieces_runs_small_loops_in_pieces(monkeypatch):
    """JDISC_SPLIT_PIECES (tests only: the fuzzer's odd batches) runs every kernel loop of more
    than one row in that many pieces, however small: on the pool's threads here (a job each),
    with the same results as one piece."""
    import jax.numpy as jnp
    import numpy as np
    import jdisc
    monkeypatch.setenv("JDISC_NUM_THREADS", "2")
    fn = lambda x: (jnp.tanh(x) * 2, jnp.cumsum(x, axis=1), jax.nn.softmax(x, axis=1))  # noqa
    x = np.random.default_rng(0).standard_normal((7, 5)).astype(np.float32)
    want = jdisc.jit(fn, dynamic_axes=({0: "n"},))(x)
    monkeypatch.setenv("JDISC_SPLIT_PIECES", "3")
    f = jdisc.jit(fn, dynamic_axes=({0: "n"},))
    f(x)
    (compiled,) = f._compiled.values()
    handle = compiled.executable.library.handle
    before = handle.jd_pool_jobs()
    got = f(x)
    assert handle.jd_pool_jobs() > before
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def _threads_now(lib) -> int:
    # past the 20 ms re-read interval, twice: a drop counts when two reads in a row see it
    for _ in range(2):
        time.sleep(0.05)
        n = lib.handle.jd_current_threads()
    return n


def test_kernels_use_fewer_threads_while_neighbours_are_busy(monkeypatch):
    import jax.numpy as jnp
    import numpy as np
    import jdisc
    from jdisc.bench import busy_neighbours
    monkeypatch.delenv("JDISC_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(runtime, "num_threads", lambda: 8)       # as on a bigger machine
    # a program no other test builds: its library (and its pool's state) is this test's own
    f = jdisc.jit(lambda x: jnp.tanh(x) * 3.5 - 0.25, dynamic_axes=({0: "n"},))
    f(np.ones(3, np.float32))
    (compiled,) = f._compiled.values()
    lib = compiled.executable.library
    cpus = os.cpu_count()
    with busy_neighbours(cpus + 1):
        time.sleep(1.0)                               # the busy loops are running
        time.sleep(0.05)
        # one read that sees them is not enough (a task runnable for an instant is not a
        # neighbour); this is the first read since the library was loaded
        assert lib.handle.jd_current_threads() == 8
        assert _threads_now(lib) == 1
    monkeypatch.setenv("JDISC_NUM_THREADS", "4")      # pinned: never adapted
    monkeypatch.setattr(runtime, "num_threads", lambda: 4)
    runtime.Executable(compiled.executable.cprog, lib)
    with busy_neighbours(cpus + 1):
        time.sleep(1.0)
        assert _threads_now(lib) == 4


def test_this_process_threads_are_not_counted_as_neighbours(monkeypatch):
    # XLA's and OpenBLAS's workers spin for a while after each of their calls: counted as a
    # neighbour's load, they put jdisc's loops on one thread for 20 ms after every jax.jit call
    # in a program that alternates the two. jd_runnable_own counts this process's runnable
    # threads, which the neighbours' count leaves out: here, the caller and a spinning thread
    import threading
    import jax.numpy as jnp
    import numpy as np
    import jdisc
    monkeypatch.delenv("JDISC_NUM_THREADS", raising=False)
    f = jdisc.jit(lambda x: jnp.tanh(x) * 2, dynamic_axes=({0: "n"},))
    f(np.ones(3, np.float32))
    (compiled,) = f._compiled.values()
    handle = compiled.executable.library.handle
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            pass
    spinner = threading.Thread(target=spin)
    spinner.start()
    try:        # the spinner runs while the caller is in C, without the GIL
        seen = [handle.jd_own_runnable() for _ in range(200)]
    finally:
        stop.set()
        spinner.join()
    assert min(seen) >= 1 and max(seen) >= 2, seen

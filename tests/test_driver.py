"""The compile driver (driver.py): Python's garbage collector is paused while compiles run,
and left as the caller had it once the last one ends."""

import gc
import threading

import numpy as np

import jdisc
from jdisc import driver


def test_the_collector_is_off_during_a_compile_and_as_before_after(cache, monkeypatch):
    seen = []
    real = driver._passes

    def passes(c):
        seen.append(gc.isenabled())
        return real(c)
    monkeypatch.setattr(driver, "STAGES", [(n, w, passes if s is real else s)
                                           for n, w, s in driver.STAGES])
    x = np.arange(5, dtype=np.float32)
    assert gc.isenabled()
    jdisc.jit(lambda v: v * 2, dynamic_axes=({0: "n"},), bridge=False)(x)
    assert seen == [False] and gc.isenabled()
    gc.disable()            # a caller who turned it off keeps it off
    try:
        jdisc.jit(lambda v: v * 3, dynamic_axes=({0: "n"},), bridge=False)(x)
        assert seen == [False, False] and not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_compiles_restore_the_collector_when_the_last_ends():
    assert gc.isenabled()
    inner_started, release = threading.Event(), threading.Event()

    def other():
        with driver.gc_paused():
            inner_started.set()
            release.wait(10)
    t = threading.Thread(target=other)
    with driver.gc_paused():
        t.start()
        inner_started.wait(10)
    assert not gc.isenabled()       # the other compile still runs
    release.set()
    t.join()
    assert gc.isenabled()

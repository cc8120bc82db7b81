"""Exported packages: jdisc.export -> save -> jdisc.load, in this process and in a fresh one that
never imported the model; and every way a package is refused or its library rebuilt."""

import hashlib
import io
import json
import textwrap
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jdisc
from jdisc import package_file
from jdisc.errors import ArgumentError, CompileError, JdiscError, PackageError, ShapeError
from subprocess_support import run_python


def model(params, x, mask):
    h = jnp.tanh(x @ params["w"] + params["b"])
    return {"y": h * mask[..., None], "total": jnp.sum(h, axis=-1)}


def _params(rng=np.random.default_rng(0)):
    return {"w": rng.standard_normal((8, 4)).astype(np.float32),
            "b": rng.standard_normal(4).astype(np.float32)}


AXES = (None, {0: "n"}, {0: "n"})


def _inputs(n, seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 8)).astype(np.float32), (rng.random(n) > 0.5).astype(np.float32)


def _check(got, params, n, seed=1):
    want = model(params, *_inputs(n, seed))
    assert set(got) == {"y", "total"}
    for k in want:
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(want[k]), rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A package with baked params, saved once for the read-only tests."""
    params = _params()
    path = tmp_path_factory.mktemp("pkg") / "model.jdisc"
    jdisc.export_package(model, params, *_inputs(3), dynamic_axes=AXES, bake_params=("params",)).save(path)
    return path, params


# ---------------------------------------------------------------------------------------------
# Round trips


def test_round_trip_in_process(saved):
    path, params = saved
    pkg = jdisc.load(path)
    assert pkg.library_origin == "package"
    assert pkg.input_names == ["x", "mask"]
    assert pkg.output_names == ["result['total']", "result['y']"]
    for n in (1, 5, 0, 17):
        _check(pkg(*_inputs(n, seed=n)), params, n, seed=n)
    named = pkg.run_named({"x": _inputs(4)[0], 1: _inputs(4)[1]})
    assert isinstance(named["result['y']"], np.ndarray) and named["result['y']"].shape == (4, 4)
    text = pkg.describe()
    assert "in   x: f32[n, 8]" in text and "(baked)" in text and "member lib.so" in text
    assert "stitch" in pkg.explain() or "loop" in pkg.explain()


_MODEL_SOURCE = """
import jax.numpy as jnp

def encoder(params, x, mask):
    h = jnp.tanh(x @ params["w"] + params["b"])
    return h * mask[..., None], jnp.sum(h, axis=-1)
"""

_SAVE = """
import sys, numpy as np, jdisc, jdisc_test_model_7
rng = np.random.default_rng(0)
params = {"w": rng.standard_normal((8, 4)).astype(np.float32),
          "b": rng.standard_normal(4).astype(np.float32)}
args = lambda n: (rng.standard_normal((n, 8)).astype(np.float32), np.ones(n, np.float32))
pkg = jdisc.export_package(jdisc_test_model_7.encoder, params, *args(2),
                   dynamic_axes=(None, {0: "n"}, {0: "n"}), bake_params=(0,))
pkg.save(sys.argv[1])
for n in (3, 11):
    x, m = args(n)
    y, s = jdisc_test_model_7.encoder(params, x, m)
    np.savez(f"{sys.argv[2]}/case{n}.npz", x=x, m=m, y=y, s=s)
"""

_LOAD = """
import sys, importlib.util, numpy as np, jdisc
assert importlib.util.find_spec("jdisc_test_model_7") is None   # not even importable here
pkg = jdisc.load(sys.argv[1])
for n in (3, 11):
    case = np.load(f"{sys.argv[2]}/case{n}.npz")
    y, s = pkg(case["x"], case["m"])
    np.testing.assert_allclose(np.asarray(y), case["y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(s), case["s"], rtol=1e-5, atol=1e-5)
assert "jdisc_test_model_7" not in sys.modules
print("ok", pkg.library_origin, sorted(m for m in sys.modules if m.startswith("jdisc_test")))
"""


def test_saved_in_one_process_runs_in_another(tmp_path):
    src, work, elsewhere = tmp_path / "src", tmp_path / "work", tmp_path / "elsewhere"
    for d in (src, work, elsewhere):
        d.mkdir()
    (src / "jdisc_test_model_7.py").write_text(_MODEL_SOURCE)
    pkg = work / "encoder.jdisc"
    saver = run_python(_SAVE, pkg, work, cwd=src, PYTHONPATH=str(src))
    assert saver.returncode == 0, saver.stderr
    loader = run_python(_LOAD, pkg, work, cwd=elsewhere)
    assert loader.returncode == 0, loader.stderr
    assert loader.stdout.split() == ["ok", "package", "[]"]


def test_export_from_specs_keeps_weights_as_arguments(tmp_path):
    params = _params()
    spec = jax.ShapeDtypeStruct
    specs = ({"w": spec((8, 4), np.float32), "b": spec((4,), np.float32)},
             spec((2, 8), np.float32), spec((2,), np.float32))
    pkg = jdisc.export_package(model, *specs, dynamic_axes=AXES, constraints=("n >= 1",))
    assert "params.npz" not in pkg.members
    pkg.save(tmp_path / "m.jdisc")
    loaded = jdisc.load(tmp_path / "m.jdisc")
    assert loaded.input_names == ["params['b']", "params['w']", "x", "mask"]
    assert loaded.manifest["constraints"] == ["n >= 1"]
    _check(loaded(params, *_inputs(6)), params, 6)
    with pytest.raises(ShapeError, match="n >= 1|n"):
        loaded(params, *_inputs(0))


def test_tuple_outputs_and_unstorable_trees(tmp_path):
    def f(x):
        return (x + 1, [x * 2, None])
    pkg = jdisc.export_package(f, np.ones(3, np.float32), dynamic_axes=({0: "n"},))
    out = pkg(np.arange(4, dtype=np.float32))
    assert isinstance(out, tuple) and isinstance(out[1], list) and out[1][1] is None
    np.testing.assert_array_equal(out[1][0], np.arange(4) * 2)
    tree = jax.tree_util.tree_structure(({"a": 1, "b": [2, None]}, (4,), {3: 5, 1: 6}))
    assert package_file.decode_tree(package_file.encode_tree(tree)) == tree
    import collections
    point = collections.namedtuple("Point", "x y")
    assert package_file.encode_tree(jax.tree_util.tree_structure(point(1, 2))) is None


def test_export_stage_and_export_package_are_distinct_names():
    # jdisc.export is the pipeline's first stage (a plain subpackage); the package builder has its
    # own name, so importing a submodule of the stage cannot shadow it.
    code = textwrap.dedent("""
        import jdisc.export.exporter, jdisc.export.specs, sys, types, numpy as np
        import jdisc
        assert isinstance(jdisc.export, types.ModuleType) and not callable(jdisc.export)
        from jdisc.export import exporter
        pkg = jdisc.export_package(lambda x: x * 2, np.ones(2, np.float32), dynamic_axes=({0: "n"},))
        print(type(pkg).__name__, pkg(np.ones(5, np.float32)).shape)
    """)
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["Package", "(5,)"]


def test_call_errors(saved):
    path, _ = saved
    pkg = jdisc.load(path)
    x, m = _inputs(3)
    with pytest.raises(ArgumentError, match=r"takes 2 argument\(s\) \(x, mask\), got 1"):
        pkg(x)
    with pytest.raises(ArgumentError, match="exported for array leaves"):
        pkg(x, {"m": m})
    with pytest.raises(ShapeError, match="'mask' axis 0 \\('n'\\) is 2"):
        pkg(x, m[:2])
    with pytest.raises(jdisc.DtypeError, match="int32"):
        pkg(x, m.astype(np.int32))
    with pytest.raises(ArgumentError, match="needs input"):
        pkg.run_named({"x": x})
    with pytest.raises(ArgumentError, match="has no input 'z'"):
        pkg.run_named({"x": x, "mask": m, "z": m})


def test_export_errors():
    params, (x, m) = _params(), _inputs(3)
    with pytest.raises(ArgumentError, match="bake_params names 'weights'"):
        jdisc.export_package(model, params, x, m, dynamic_axes=AXES, bake_params=("weights",))
    with pytest.raises(ArgumentError, match="has dynamic axes"):
        jdisc.export_package(model, params, x, m, dynamic_axes=AXES, bake_params=(1,))
    with pytest.raises(ArgumentError, match="ShapeDtypeStruct"):
        jdisc.export_package(model, jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                                                   params), x, m,
                     dynamic_axes=AXES, bake_params=(0,))
    n = jax.export.symbolic_shape("n")[0]
    with pytest.raises(ArgumentError, match="symbolic dimensions"):
        jdisc.export_package(model, params, jax.ShapeDtypeStruct((n, 8), np.float32), m,
                     dynamic_axes=AXES)


def test_baked_bf16_round_trips(tmp_path):
    import ml_dtypes
    w = np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16)

    def f(w, x):
        return x @ w.astype(jnp.float32)
    pkg = jdisc.export_package(f, w, np.ones((1, 2), np.float32), dynamic_axes=(None, {0: "n"}),
                       bake_params=(0,))
    pkg.save(tmp_path / "bf.jdisc")
    out = jdisc.load(tmp_path / "bf.jdisc")(np.ones((4, 2), np.float32))
    np.testing.assert_array_equal(np.asarray(out), np.ones((4, 2)) @ w.astype(np.float32))


def test_save_is_deterministic_and_atomic(saved, tmp_path):
    path, _ = saved
    pkg = jdisc.load(path)
    pkg.save(tmp_path / "a.jdisc")
    pkg.save(tmp_path / "a.jdisc")     # over an existing file
    assert (tmp_path / "a.jdisc").read_bytes() == path.read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["a.jdisc"]    # no temp files left
    with pytest.raises(OSError):
        pkg.save(tmp_path / "missing-dir" / "b.jdisc")
    assert [p.name for p in tmp_path.iterdir()] == ["a.jdisc"]


# ---------------------------------------------------------------------------------------------
# Refused packages: nothing from them is loaded or compiled


def _rewrite(src, dst, members=None, manifest=None, fix_hashes=False):
    """Copy package `src` to `dst`, replacing members and/or manifest fields."""
    with zipfile.ZipFile(src) as zf:
        data = {n: zf.read(n) for n in zf.namelist()}
    man = json.loads(data.pop("manifest.json"))
    for name, new in (members or {}).items():
        if new is None:
            data.pop(name)
        else:
            data[name] = new
    for key, value in (manifest or {}).items():
        if isinstance(value, dict):
            man[key] = {**man[key], **value}
        else:
            man[key] = value
    if fix_hashes:
        man["members"] = {n: {"sha256": hashlib.sha256(b).hexdigest(), "size": len(b)}
                          for n, b in data.items()}
    with zipfile.ZipFile(dst, "w") as zf:
        zf.writestr("manifest.json", json.dumps(man))
        for n, b in data.items():
            zf.writestr(n, b)
    return dst


@pytest.mark.parametrize("member", ["kernel.c", "lib.so", "stablehlo.vhlo", "params.npz"])
def test_tampered_member_is_refused(saved, tmp_path, cache, counting_cc, member):
    path, _ = saved
    with zipfile.ZipFile(path) as zf:
        original = zf.read(member)
    changed = original[:100] + bytes([original[100] ^ 1]) + original[101:]
    bad = _rewrite(path, tmp_path / "bad.jdisc", members={member: changed})
    with pytest.raises(PackageError, match=f"member {member} has SHA-256 .* nothing from it"):
        jdisc.load(bad)
    assert counting_cc() == 0


def test_tampered_library_is_never_executed(saved, tmp_path, cache):
    """A library whose constructor would leave a mark: refused before dlopen, so no mark."""
    from jdisc.custom_calls import compiler
    marker = tmp_path / "constructor-ran"
    evil = compiler.build(
        f'#include <stdio.h>\n__attribute__((constructor)) static void mark(void) {{\n'
        f'  FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n'
        f'int jd_unused_{tmp_path.name.replace("-", "_")}(void) {{ return 0; }}\n')
    assert marker.exists()       # the trap works when loaded ...
    marker.unlink()
    with zipfile.ZipFile(saved[0]) as zf:
        size = len(zf.read("lib.so"))
    with open(evil.path, "rb") as f:     # padded to the recorded size: only the hash differs
        trap = f.read()
    assert len(trap) <= size
    bad = _rewrite(saved[0], tmp_path / "bad.jdisc",
                   members={"lib.so": trap + bytes(size - len(trap))})
    with pytest.raises(PackageError, match="lib.so has SHA-256"):
        jdisc.load(bad)
    assert not marker.exists()   # ... and the refused package never loaded it


@pytest.mark.parametrize("keep", [0.5, 0.99, 22, 0])
def test_truncated_package_is_refused(saved, tmp_path, keep):
    data = saved[0].read_bytes()
    n = int(len(data) * keep) if isinstance(keep, float) else keep
    (tmp_path / "t.jdisc").write_bytes(data[:n])
    with pytest.raises(PackageError, match="not a complete jdisc package|damaged"):
        jdisc.load(tmp_path / "t.jdisc")


def test_members_must_match_the_manifest(saved, tmp_path):
    path = saved[0]
    missing = _rewrite(path, tmp_path / "m.jdisc", members={"kernel.c": None})
    with pytest.raises(PackageError, match=r"missing: \['kernel.c'\]"):
        jdisc.load(missing)
    extra = _rewrite(path, tmp_path / "e.jdisc", members={"run-me.sh": b"#!/bin/sh\n"})
    with pytest.raises(PackageError, match=r"not listed: \['run-me.sh'\]"):
        jdisc.load(extra)
    with zipfile.ZipFile(tmp_path / "nomanifest.jdisc", "w") as zf:
        zf.writestr("kernel.c", "int x;")
    with pytest.raises(PackageError, match="no manifest.json"):
        jdisc.load(tmp_path / "nomanifest.jdisc")
    with pytest.raises(PackageError, match="is a directory"):
        jdisc.load(tmp_path)
    with pytest.raises(PackageError, match="cannot read package"):
        jdisc.load(tmp_path / "nothing-here.jdisc")


@pytest.mark.parametrize("fields", [{"jdisc": "0.2.0"}, {"jdisc": "1.1.0"},
                                    {"format_version": 2}, {"format": "something-else"}])
def test_incompatible_version_is_refused(saved, tmp_path, cache, counting_cc, fields):
    bad = _rewrite(saved[0], tmp_path / "v.jdisc", manifest=fields)
    with pytest.raises(PackageError, match="written by jdisc|does not describe"):
        jdisc.load(bad)
    assert counting_cc() == 0


def test_same_series_other_patch_release_loads(saved, tmp_path):
    ok = _rewrite(saved[0], tmp_path / "p.jdisc", manifest={"jdisc": jdisc.__version__ + "9"})
    assert jdisc.load(ok).library_origin == "package"


# ---------------------------------------------------------------------------------------------
# A library this host cannot run is rebuilt from the packaged C


@pytest.mark.parametrize("target", [{"cpu_fingerprint": "0" * 64}, {"libc": "glibc 99.1"},
                                    {"libc": "musl 1.2"}, {"machine": "riscv64"},
                                    {"sanitize": True}])
def test_other_target_is_rebuilt_from_c(saved, tmp_path, cache, counting_cc, target):
    path, params = saved
    other = _rewrite(path, tmp_path / "o.jdisc", manifest={"target": target})
    pkg = jdisc.load(other)
    assert pkg.library_origin.startswith("rebuilt from the packaged C: it was ")
    assert counting_cc() == 1
    _check(pkg(*_inputs(5)), params, 5)


def test_library_dlopen_refuses_is_rebuilt_from_c(saved, tmp_path, cache, counting_cc):
    path, params = saved
    broken = _rewrite(path, tmp_path / "b.jdisc", members={"lib.so": b"\x7fELF not really"},
                      fix_hashes=True)
    pkg = jdisc.load(broken)
    assert pkg.library_origin.startswith("rebuilt from the packaged C: dlopen refused it")
    _check(pkg(*_inputs(2)), params, 2)
    assert jdisc.load(broken).library_origin.startswith("rebuilt")
    assert counting_cc() == 1          # the second load found the rebuild in the cache


def test_rebuild_without_a_compiler_says_why(saved, tmp_path, cache, monkeypatch):
    other = _rewrite(saved[0], tmp_path / "o.jdisc", manifest={"target": {"machine": "s390x"}})
    monkeypatch.setenv("JDISC_CC", "/nonexistent/cc")
    with pytest.raises(CompileError, match="cannot be used on this host .*s390x.*JDISC_CC"):
        jdisc.load(other)


def test_inspection_never_loads_the_library(saved):
    from jdisc.package import open_package
    pkg = open_package(saved[0])
    assert pkg.library_origin == "not loaded" and "jd_k" in pkg.explain()
    with pytest.raises(JdiscError, match="inspection only"):
        pkg(*_inputs(2))


def test_params_npz_holds_no_pickles(saved):
    with zipfile.ZipFile(saved[0]) as zf:
        npz = np.load(io.BytesIO(zf.read("params.npz")), allow_pickle=False)
        assert sorted(npz.files) == ["leaf_0", "leaf_1"]


def test_weakly_typed_results_stay_weak_through_a_saved_package(tmp_path):
    # `x * 2.5` of an int32 x is a weak float32 under jax.jit: a later bfloat16 operand keeps
    # its type against it. A package records which results are weak (its manifest's
    # "weak_outputs"); loaded, it gives them weak eagerly and inside jax.jit, as jdisc.jit does
    def f(x):
        return x * 2.5, x + 1

    path = tmp_path / "weak.jdisc"
    jdisc.export_package(f, np.zeros(3, np.int32), dynamic_axes=({0: "n"},)).save(str(path))
    pkg = jdisc.load(str(path))
    assert pkg.manifest["weak_outputs"] == [0]
    x = np.arange(5, dtype=np.int32)
    want = jax.jit(f)(x)
    got = pkg(x)
    assert [a.weak_type for a in got] == [a.weak_type for a in want] == [True, False]
    half = jnp.ones(5, jnp.bfloat16)
    assert (got[0] + half).dtype == (want[0] + half).dtype == jnp.bfloat16
    traced = jax.jit(lambda x: pkg(x)[0] + half)(x)
    assert traced.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(traced, np.float32),
                                  np.asarray(jax.jit(lambda x: f(x)[0] + half)(x), np.float32))

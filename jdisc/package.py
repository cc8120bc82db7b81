"""Exported model packages: compile a model once, ship one file, run it where its Python source
is not.

    pkg = jdisc.export_package(model, params, x, dynamic_axes=(None, {0: "batch"}), bake_params=(0,))
    pkg.save("model.jdisc")
    ...                                   # another process, or another machine
    model = jdisc.load("model.jdisc")     # needs jdisc and numpy, not the model's code
    y = model(x)                          # params were baked in: only x is passed

A package holds the StableHLO (portable artifact), the generated C, the library compiled from it
and, with `bake_params`, the baked arrays; see package_file.py for the file and its checks.
`load` runs the packaged library when this host can (same CPU and compatible libc: it was built
with -march=native), else compiles the packaged C here (prebuilt.py).

Inputs and outputs are flat named leaves, named as jdisc.jit names them: the parameter's name
plus the leaf's key path (`x`, `params['w1']`, `result[0]`). A call takes the same positional
arguments as the model (less the baked ones); an argument's leaves must have the recorded names,
which is how its pytree structure is checked. The output structure is stored when it is made of
tuples, lists, dicts and None (see package_file.encode_tree); otherwise a call returns a dict of
the named output leaves.
"""

from __future__ import annotations

import hashlib
import io
from typing import Any, Callable, Mapping, Sequence

import jax
import jaxlib
import numpy as np

from jdisc import driver, interop, package_file, sharding
from jdisc.api import Compiled, jit
from jdisc.compiled import weakly_typed
from jdisc.custom_calls import prebuilt, runtime
from jdisc.dynamic_passes.algebra.dim_text import parse
from jdisc.dynamic_passes.ir.dtypes import dtype_name, numpy_dtype
from jdisc.dynamic_passes.ir.program import ArgSpec
from jdisc.errors import ArgumentError, JdiscError, PackageError, compile_stage
from jdisc.export.exporter import ExportedFunction
from jdisc.export.specs import LeafSpec, positional_names
from jdisc.lowering.codegen import CProgram
from jdisc.version import __version__

STABLEHLO = "stablehlo.vhlo"
PARAMS = "params.npz"
DATA = "data.bin"


class _PackagedCall(Compiled):
    """compiled.Compiled over a package's library, returning numpy arrays. An input already of the
    compiled dtype is taken as it is (jax would first canonicalise int64 to int32 when x64 is
    off, and a StableHLO module's i64 input must still accept int64 arrays)."""

    @staticmethod
    def _as_array(x: Any, spec) -> np.ndarray:
        if isinstance(x, np.ndarray) and x.dtype == spec.dtype and x.ndim == len(spec.shape):
            return np.require(x, requirements="C")
        return Compiled._as_array(x, spec)

    def run_numpy(self, flat_args: Sequence[Any]) -> list[np.ndarray]:
        if self.executable is None:
            raise JdiscError(f"package '{self.exported.name}' was opened for inspection only; "
                             f"jdisc.load it to run it")
        arrays = [self._as_array(x, spec) for x, spec in zip(flat_args, self.leaves)]
        if self._dropped_named:
            self._check_dropped(arrays)
        return self.executable.run([arrays[i] for i in self.kept])


class Package:
    """A compiled model with its signature: call it, `save` it, `explain` it.

    `library_origin` says where the running library came from: "compiled here" (by export),
    "package" (the packaged lib.so), "rebuilt from the packaged C: <why>", or "not loaded"
    (`open_package`: for describing only)."""

    def __init__(self, manifest: dict, members: dict[str, bytes],
                 executable: runtime.Executable | None, origin: str, program: Any = None):
        try:
            self.manifest, self.members, self.executable = manifest, members, executable
            self.library_origin = origin
            self.name: str = manifest["name"]
            self._inputs: list[dict] = manifest["inputs"]
            self._args: list[dict] = manifest["args"]
            self.input_names = [i["name"] for i in self._inputs if not i["baked"]]
            self.output_names = [o["name"] for o in manifest["outputs"]]
            self._out_tree = package_file.decode_tree(manifest["out_tree"])
            self._baked = _read_params(members.get(PARAMS), self._inputs)
            self._call = _PackagedCall(_exported(manifest, members), executable, None, program)
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise PackageError(f"package '{manifest.get('name', '?')}': malformed manifest "
                               f"({type(err).__name__}: {err})") from None

    # -- calling ------------------------------------------------------------------------------
    def __call__(self, *args: Any) -> Any:
        flat = self._flatten(args)
        if interop.is_traced(flat):    # inside jax.jit (shardings too): the FFI custom call
            if self.executable is None:
                self._call.run_numpy(flat)        # (raises: opened for inspection only)
            self.program()                        # its sharding rule (no C compiler)
            outs = interop.weakened(interop.ffi_call(self._call, flat), self._call.weak)
        elif any(sharding.is_sharded(x) for x in flat):
            self.program()
            outs = self._call.call_flat(flat)     # once per shard (sharding.py)
        else:
            outs = self._call.run_numpy(flat)
            x64 = jax.config.jax_enable_x64     # 64-bit results stay numpy unless x64 is on
            outs = [o if (o.dtype.itemsize == 8 and not x64) else runtime.to_jax(o)
                    for o in outs]
        if self._call.weak:      # (tracers are typed by the FFI call's result types already)
            outs = [weakly_typed(o) if i in self._call.weak else o for i, o in enumerate(outs)]
        if self._out_tree is None:
            return dict(zip(self.output_names, outs))
        return jax.tree_util.tree_unflatten(self._out_tree, outs)

    def run_named(self, arrays: Mapping[str | int, Any]) -> dict[str, np.ndarray]:
        """Run on inputs given by leaf name (or position among the inputs a call takes);
        returns numpy arrays by output name."""
        given: dict[str, Any] = {}
        for key, value in arrays.items():
            name = self.input_names[key] if isinstance(key, int) and \
                0 <= key < len(self.input_names) else key
            if name not in self.input_names:
                raise ArgumentError(f"'{self.name}' has no input {key!r}; its inputs are "
                                    f"{self.input_names}")
            if name in given:
                raise ArgumentError(f"input {name!r} is given twice")
            given[name] = value
        missing = [n for n in self.input_names if n not in given]
        if missing:
            raise ArgumentError(f"'{self.name}' needs input(s) {missing} as well")
        return dict(zip(self.output_names, self._call.run_numpy(self._with_baked(given))))

    def _flatten(self, args: tuple) -> list:
        free = [a for a in self._args if not a["baked"]]
        if len(args) != len(free):
            raise ArgumentError(f"'{self.name}' takes {len(free)} argument(s) "
                                f"({', '.join(a['name'] for a in free)}), got {len(args)}")
        given: dict[str, Any] = {}
        for arg, spec in zip(args, free):
            for path, leaf in jax.tree_util.tree_flatten_with_path(arg)[0]:
                given[spec["name"] + jax.tree_util.keystr(path)] = leaf
        if list(given) != self.input_names:
            raise ArgumentError(f"'{self.name}' was exported for array leaves "
                                f"{self.input_names}, got {list(given)}")
        return self._with_baked(given)

    def _with_baked(self, given: dict[str, Any]) -> list:
        """Every flat input in order: the given ones by name, the baked ones from the package."""
        return [self._baked[i] if spec["baked"] else given[spec["name"]]
                for i, spec in enumerate(self._inputs)]

    # -- saving and describing -----------------------------------------------------------------
    def save(self, path: str) -> None:
        """Write the package as one file (atomically: a reader never sees half of it)."""
        self.manifest = package_file.write(path, self.manifest, self.members)

    def program(self):
        """The jdisc IR after every pass, recompiled from the packaged StableHLO (no C
        compiler involved): what `explain` and `jdisc inspect` describe."""
        if self._call.program is None:
            source = self._call.exported if self.manifest["kind"] == "function" else \
                self.members[self.manifest["stablehlo"]]
            self._call.program = driver.compile(source, self.name, until="passes").program
        return self._call.program

    def explain(self) -> str:
        from jdisc.explain import explain_program
        return explain_program(self.program())

    def describe(self) -> str:
        m = self.manifest
        free = ", ".join(a["name"] for a in self._args if not a["baked"])
        lines = [f"jdisc package '{self.name}' (jdisc {m['jdisc']}; jax {m['jax']}, jaxlib "
                 f"{m['jaxlib']}; format {m['format_version']})", f"  call: {self.name}({free})"]
        for spec in self._inputs:
            notes = [n for n, on in (("baked", spec["baked"]), ("unused", not spec["used"])) if on]
            lines.append(f"  in   {spec['name']}: {_type(spec)}"
                         + (f"    ({', '.join(notes)})" if notes else ""))
        lines += [f"  out  {o['name']}: {_type(o)}" for o in m["outputs"]]
        lines.append(f"  constraints: {', '.join(m['constraints']) or 'none'}")
        t = m["target"]
        lines.append(f"  target: {t['machine']}, {t['cpu']}, {t['libc']}; compiler "
                     f"{t['compiler']}" + ("; sanitizer build" if t.get("sanitize") else ""))
        lines.append(f"  library: {self.library_origin}")
        for name, info in sorted(m.get("members", {}).items()):
            lines.append(f"  member {name:16s} {info['size']:>10d} bytes  sha256 "
                         f"{info['sha256'][:16]}...")
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        return f"<jdisc.Package '{self.name}': {self.describe().splitlines()[1].strip()}>"


def _type(spec: dict) -> str:
    return f"{spec['dtype']}[{', '.join(str(d) for d in spec['shape'])}]"


def _dims(shape) -> list:
    return [int(d) if isinstance(d, (int, np.integer)) else str(d) for d in shape]


def _argspecs(items: list) -> tuple[ArgSpec, ...]:
    return tuple(ArgSpec(name, dtype, tuple(d if isinstance(d, int) else parse(d)
                                            for d in dims)) for name, dtype, dims in items)


def _exported(manifest: dict, members: dict[str, bytes]) -> ExportedFunction:
    """The export record compiled.Compiled works from, rebuilt from the manifest."""
    leaves = tuple(LeafSpec(i["name"], numpy_dtype(i["dtype"]),
                            tuple(d if isinstance(d, int) else 0 for d in i["shape"]),
                            {a: d for a, d in enumerate(i["shape"]) if not isinstance(d, int)})
                   for i in manifest["inputs"])
    kept = tuple(n for n, i in enumerate(manifest["inputs"]) if i["used"])
    return ExportedFunction(
        manifest["name"], members[manifest["stablehlo"]], leaves, kept,
        tuple(tuple(s) for s in manifest["program"]["in_shapes"]),
        package_file.decode_tree(manifest["out_tree"]), tuple(manifest["program"]["out_names"]),
        tuple(manifest["constraints"]),
        weak_outputs=tuple(int(i) for i in manifest.get("weak_outputs", ())))


def _cprogram(manifest: dict, source: str, data: bytes) -> CProgram:
    p = manifest["program"]
    return CProgram(source, manifest["name"], _argspecs(p["inputs"]), _argspecs(p["outputs"]),
                    tuple(p["dim_vars"]), tuple(p["kernels"]), data,
                    hashlib.sha256(data).hexdigest() if data else "")


def _write_params(arrays: dict[int, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    # bfloat16 has no .npy descriptor numpy reads back without pickle: store its bits
    np.savez(buf, **{f"leaf_{i}": a.view(np.uint16) if dtype_name(a.dtype) == "bf16" else a
                     for i, a in arrays.items()})
    return buf.getvalue()


def _read_params(data: bytes | None, inputs: list[dict]) -> dict[int, np.ndarray]:
    if data is None:
        return {}
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return {i: npz[f"leaf_{i}"].view(numpy_dtype(spec["dtype"]))
                for i, spec in enumerate(inputs) if spec["baked"]}


def _manifest(kind: str, name: str, cprog: CProgram, inputs: list[dict], args: list[dict],
              in_shapes, out_names: Sequence[str], out_tree: Any,
              constraints: Sequence[str], weak_outputs: Sequence[int] = ()) -> dict:
    return {
        "format": package_file.FORMAT, "format_version": package_file.FORMAT_VERSION,
        "jdisc": __version__, "jax": jax.__version__, "jaxlib": jaxlib.__version__,
        "kind": kind, "name": name, "args": args, "inputs": inputs,
        "outputs": [{"name": n, "dtype": s.dtype, "shape": _dims(s.shape)}
                    for n, s in zip(out_names, cprog.outputs)],
        "constraints": list(constraints), "out_tree": package_file.encode_tree(out_tree),
        # the results jax types weakly (`x * 2.5` of an int x); a package without the key
        # (written before 2026-12-08) has none
        "weak_outputs": list(weak_outputs),
        "program": {"in_shapes": [_dims(s) for s in in_shapes], "out_names": list(out_names),
                    "inputs": [[s.name, s.dtype, _dims(s.shape)] for s in cprog.inputs],
                    "outputs": [[s.name, s.dtype, _dims(s.shape)] for s in cprog.outputs],
                    "dim_vars": list(cprog.dim_vars), "kernels": list(cprog.kernels)},
        "target": prebuilt.host_target(), "stablehlo": STABLEHLO,
    }


def _data_member(cprog: CProgram) -> dict[str, bytes]:
    """The library's data section (its large constants), when it has one."""
    return {DATA: cprog.data} if cprog.data else {}


def _library_bytes(executable: runtime.Executable) -> bytes:
    try:
        with open(executable.library.path, "rb") as f:
            return f.read()
    except OSError as err:
        raise PackageError(f"cannot read the compiled library {executable.library.path} "
                           f"(was the cache cleared meanwhile?): {err}") from None


# -------------------------------------------------------------------------------------------
# Making packages


def export_package(fun: Callable, *example_args: Any, dynamic_axes: Any = None,
           constraints: Sequence[str] = (), bake_params: Sequence[int | str] = (),
           name: str | None = None) -> Package:
    """Compile `fun` for symbolic shapes into a package (`jdisc.export_package`).

    `example_args`: one per positional argument, arrays or `jax.ShapeDtypeStruct`s (pytrees of
    them) with concrete example sizes; the axes named in `dynamic_axes` are symbolic either way
    (the same forms as jdisc.jit). `constraints`: as jdisc.jit. `bake_params`: positions or
    names of arguments (e.g. the weights) whose example arrays are saved in the package; the
    package's callable then no longer takes them. `name`: the program's name (default: fun's).
    """
    for leaf in jax.tree_util.tree_leaves(example_args):
        if hasattr(leaf, "shape") and not all(isinstance(d, (int, np.integer)) for d in leaf.shape):
            raise ArgumentError(
                f"example argument of shape {tuple(leaf.shape)} has symbolic dimensions; give "
                f"concrete example sizes and name the dynamic axes in dynamic_axes")
    arg_names = positional_names(fun, len(example_args))
    baked_args = set()
    for b in bake_params:
        if b not in arg_names and not (isinstance(b, int) and -len(arg_names) <= b < len(arg_names)):
            raise ArgumentError(f"bake_params names {b!r}, which is not one of the positional "
                                f"arguments {arg_names}")
        baked_args.add(arg_names.index(b) if isinstance(b, str) else b % len(arg_names))
    jf = jit(fun, dynamic_axes=dynamic_axes, constraints=constraints)
    compiled = jf.compiled_for(*example_args)
    exp, cprog = compiled.exported, compiled.executable.cprog
    args, baked, leaf = [], {}, 0
    for i, (arg, arg_name) in enumerate(zip(example_args, arg_names)):
        leaves = jax.tree_util.tree_leaves(arg)
        args.append({"name": arg_name, "leaves": len(leaves), "baked": i in baked_args})
        for x, spec in zip(leaves, exp.leaves[leaf:leaf + len(leaves)]):
            if i in baked_args:
                baked[leaf] = _bakeable(x, spec)
            leaf += 1
    inputs = [{"name": s.name, "dtype": dtype_name(s.dtype),
               "shape": [s.axes.get(a, d) for a, d in enumerate(s.shape)],
               "used": n in exp.kept_inputs, "baked": n in baked} for n, s in enumerate(exp.leaves)]
    manifest = _manifest("function", name or exp.name, cprog, inputs, args, exp.in_shapes,
                         exp.out_names, exp.out_tree, exp.constraints, exp.weak_outputs)
    members = {STABLEHLO: exp.module, "kernel.c": cprog.source.encode(),
               "lib.so": _library_bytes(compiled.executable), **_data_member(cprog)}
    if baked:
        members[PARAMS] = _write_params(baked)
    return Package(manifest, members, compiled.executable, "compiled here", compiled.program)


def _bakeable(x: Any, spec: LeafSpec) -> np.ndarray:
    if spec.axes:
        raise ArgumentError(f"bake_params includes '{spec.name}', which has dynamic axes "
                            f"{spec.axes}; a baked array has one fixed shape")
    if isinstance(x, jax.ShapeDtypeStruct):
        raise ArgumentError(f"bake_params includes '{spec.name}', given as a ShapeDtypeStruct; "
                            f"baking needs the array itself")
    return np.ascontiguousarray(np.asarray(x).astype(spec.dtype, copy=False))


def from_stablehlo(module: str | bytes, name: str = "main") -> Package:
    """A package from StableHLO text, bytecode or a portable artifact (`jdisc compile`): each
    `?` dim of input i, axis j is the dimension variable `d{i}_{j}`, as in compile_stablehlo;
    or from the bytes of a `jax.export.Exported`, with its names and output structure."""
    from jdisc.modules import StablehloFunction
    fn = StablehloFunction(module, name)
    cprog = fn.cprog
    out_tree = jax.tree_util.tree_structure([0] * len(cprog.outputs))
    if fn.exported is not None:      # a jax.export.Exported's bytes: its module, its outputs
        module, out_tree = fn.exported.mlir_module_serialized, fn.exported.out_tree
    inputs = [{"name": s.name, "dtype": s.dtype, "shape": _dims(s.shape), "used": True,
               "baked": False} for s in cprog.inputs]
    args = [{"name": s.name, "leaves": 1, "baked": False} for s in cprog.inputs]
    out_names = [s.name for s in cprog.outputs]
    manifest = _manifest("stablehlo", name, cprog, inputs, args, [s.shape for s in cprog.inputs],
                         out_names, out_tree, ())
    members = {STABLEHLO: _portable_artifact(module), "kernel.c": cprog.source.encode(),
               "lib.so": _library_bytes(fn.executable), **_data_member(cprog)}
    return Package(manifest, members, fn.executable, "compiled here", fn.program)


def _portable_artifact(module: str | bytes) -> bytes:
    """The module as a StableHLO portable artifact (VHLO bytecode, readable by later jaxlibs)."""
    from jaxlib.mlir.dialects import stablehlo
    from jdisc.dynamic_passes.importer import mlir_import
    ctx = mlir_import.make_context()
    mod = mlir_import.parse_module(module, ctx)
    try:
        with ctx:
            return bytes(stablehlo.serialize_portable_artifact(
                mod, stablehlo.get_current_version()))
    except Exception as err:   # e.g. a dialect VHLO cannot carry
        raise PackageError(f"cannot store the module as a StableHLO portable artifact: "
                           f"{err}") from None


# -------------------------------------------------------------------------------------------
# Loading


def load(path: str) -> Package:
    """A package saved by `Package.save` or `jdisc compile`, ready to call (`jdisc.load`).

    Every member's SHA-256 is checked before anything is used; a damaged package, or one from
    an incompatible jdisc, raises PackageError. The packaged library runs when this host can
    load it; otherwise the packaged C is compiled here (needs a C compiler). Loading runs
    native code from the package: load only packages from sources you trust."""
    manifest, members = package_file.read(path)
    try:
        cprog = _cprogram(manifest, members["kernel.c"].decode(), members.get(DATA, b""))
        so_bytes, target = members["lib.so"], manifest["target"]
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as err:
        raise PackageError(f"{path}: malformed package ({type(err).__name__}: {err})") from None
    with compile_stage(f"loading the library of package {path}"):
        library, origin = prebuilt.load_library(so_bytes, cprog, target)
    return Package(manifest, members, runtime.Executable(cprog, library), origin)


def open_package(path: str) -> Package:
    """A package read and verified but not loaded: its library is never mapped, so nothing from
    it runs (`jdisc inspect`). `describe`, `explain` and `program` work; calling it does not."""
    manifest, members = package_file.read(path)
    return Package(manifest, members, None, "not loaded")

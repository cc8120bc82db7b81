"""The compile driver: every way into jdisc (`jdisc.jit`, `jdisc.compile_stablehlo`, packages,
the `jdisc` command) compiles through `compile`, which runs the stages of `STAGES` in order:

    export   a JAX function + argument specs -> StableHLO with symbolic dims (jdisc/export)
    mlir     StableHLO text or bytecode -> an MLIR module cleaned by jaxlib's passes
    import   MLIR -> jdisc's IR (dynamic_passes/importer/mlir_import.py)
    passes   dynamic_passes/pipeline.py's PASSES: shapes, checks, fusion, memory plan
    c        the C of the kernels and the host launcher (lowering/codegen.py)
    library  the system C compiler -> a loaded shared library (custom_calls/runtime.py)

A compile starts at `export` for a function and at `mlir` for a module, and stops after the
stage named by `until`. Each stage runs under `errors.compile_stage`: a JdiscError passes
through, anything else is a bug in jdisc and becomes a CompileError naming the stage. With
`JDISC_DUMP_DIR` set, what each stage made is written there (the passes write the IR after
each pass, verified when JDISC_VERIFY is set).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import threading
import time
from typing import Any, Callable, Sequence

from jdisc.custom_calls import compiler, runtime
from jdisc.dynamic_passes.algebra.dim_text import parse
from jdisc.dynamic_passes.importer import mlir_import, tuples
from jdisc.dynamic_passes.ir.program import Program, format_program
from jdisc.dynamic_passes.pipeline import dump, dump_dir, run_passes
from jdisc.errors import compile_stage
from jdisc.export.exporter import ExportedFunction, export_function
from jdisc.lowering.codegen import CProgram, generate


@dataclasses.dataclass
class FunctionSource:
    """A JAX function to export: its leaves' specs and pytree (export/specs.py)."""
    fun: Callable
    leaves: list
    in_tree: Any
    constraints: Sequence[str] = ()


@dataclasses.dataclass
class Compilation:
    """What the stages made, each None until its stage has run."""
    name: str
    exported: ExportedFunction | None = None
    module: Any = None                  # the cleaned MLIR module
    program: Program | None = None      # jdisc IR: after `import`, then after `passes`
    cprog: CProgram | None = None
    executable: runtime.Executable | None = None
    folder: str = ""                    # its JDISC_DUMP_DIR subfolder
    import_kw: dict = dataclasses.field(default_factory=dict)
    tuple_trees: tuple | None = None    # @main's tuple arguments and results (tuples.py)
    seconds: dict = dataclasses.field(default_factory=dict)     # stage -> wall time it took
    _context: Any = None


def _export(c: Compilation, source: FunctionSource) -> None:
    c.exported = export_function(source.fun, source.leaves, source.in_tree, source.constraints,
                                 name=c.name)
    _from_exported(c)


def _from_exported(c: Compilation) -> None:
    """The import's keywords for an exported function: its inputs' names and symbolic shapes
    (jax.export's own dims, not fresh ones), its outputs' names and the donated inputs."""
    e = c.exported
    kept = [e.leaves[i] for i in e.kept_inputs]
    c.import_kw = dict(
        input_names=[leaf.name for leaf in kept],
        input_shapes=[tuple(parse(d) if isinstance(d, str) else d for d in shape)
                      for shape in e.in_shapes],
        output_names=e.out_names,
        donated=[i for i, leaf in enumerate(kept) if leaf.donated])


def _mlir(c: Compilation, module: str | bytes) -> None:
    c._context = mlir_import.make_context()
    mod = mlir_import.parse_module(module, c._context)
    if dump_dir() is not None:
        text = str(mod)
        c.folder = f"{c.name}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"
        dump("00_stablehlo.mlir", text, c.folder)
    c.tuple_trees = mlir_import.run_mlir_pipeline(mod)
    if c.tuple_trees is not None and "input_names" not in c.import_kw:
        c.import_kw["input_names"] = tuples.leaf_names(c.tuple_trees[0])
    if dump_dir() is not None:
        dump("00_stablehlo_clean.mlir", str(mod), c.folder)
    c.module = mod


def _import(c: Compilation) -> None:
    kw = dict(c.import_kw)
    donated = kw.pop("donated", ())
    with c._context:
        prog = mlir_import.import_module(c.module, c.name, **kw)
    prog.dump_name = c.folder or c.name
    prog.donated = frozenset(donated)
    if dump_dir() is not None:
        dump("00_imported.txt", format_program(prog), prog.dump_name)
    c.program = prog


def _passes(c: Compilation) -> None:
    c.program = run_passes(c.program)


def _c(c: Compilation) -> None:
    c.cprog = generate(c.program)
    dump("kernels.c", c.cprog.source, c.program.dump_name or c.program.name)


def _library(c: Compilation) -> None:
    c.executable = runtime.load(c.cprog)
    c.seconds["cc"] = c.executable.library.cc_seconds


# (name, what compile_stage calls it, the step); `export` and `mlir` take the source
STAGES: list[tuple[str, str, Callable]] = [
    ("export", "the export of '{}'", _export),
    ("mlir", "the MLIR clean-up of '{}'", _mlir),
    ("import", "the MLIR import", _import),
    ("passes", "the passes of '{}'", _passes),
    ("c", "the C generation for '{}'", _c),
    ("library", "the C compiler driver for '{}'", _library),
]
_NAMES = [s[0] for s in STAGES]


def compile(source: FunctionSource | ExportedFunction | str | bytes, name: str = "main",
            until: str = "library", **import_kw) -> Compilation:
    """Run the stages from the one `source` starts at through `until`: a FunctionSource
    starts at `export`, an ExportedFunction at `mlir` (its module, with its signature), a
    StableHLO module (text, bytecode or portable artifact) at `mlir` (each `?` dim a fresh
    variable unless `import_kw` says otherwise: see mlir_import.import_module)."""
    c = Compilation(name, import_kw=dict(import_kw))
    first = "export"
    if isinstance(source, ExportedFunction):
        c.exported, first = source, "mlir"
        _from_exported(c)
        source = source.module
    elif not isinstance(source, FunctionSource):
        first = "mlir"
    if until == "library":      # the C compile at the end will need it: start it now
        compiler.start_runtime_unit()
    with gc_paused():
        for stage, what, step in STAGES[_NAMES.index(first):_NAMES.index(until) + 1]:
            t0 = time.perf_counter()
            with compile_stage(what.format(c.name)):
                if stage == "export":
                    step(c, source)
                    source = c.exported.module
                elif stage == "mlir":
                    step(c, source)
                else:
                    step(c)
            c.seconds[stage] = time.perf_counter() - t0
    return c


_gc_lock = threading.Lock()
_gc_holders = 0             # compiles running now (several threads may compile at once)
_gc_was_enabled = False     # the collector's state before the first of them paused it


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic garbage collector off while compiles run, back to its state before once
    the last ends. With jax imported the heap holds about 10^5 objects, and a full collection
    that falls inside a compile (the export, the passes and the C generation allocate enough to
    set one off) walked all of them for 35-55 ms, a tenth of a new program's compile
    (CHANGELOG.md). The compile's own cycles (the IR's values and ops) wait for the next
    collection after it."""
    global _gc_holders, _gc_was_enabled
    with _gc_lock:
        if _gc_holders == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_holders += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holders -= 1
            if _gc_holders == 0 and _gc_was_enabled:
                gc.enable()

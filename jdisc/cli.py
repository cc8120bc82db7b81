"""The `jdisc` command (installed as a console script; also `python -m jdisc`).

    jdisc bench [--workloads W1,W2] [--shapes N] [--repeats N] [--quick] [--plot OUT.png] ...
    jdisc compile MODULE.mlir|MODULE.mlirbc -o PKG [--name NAME]
    jdisc run PKG --input NAME=FILE.npy ... --output DIR
    jdisc inspect PKG|MODULE [--dot FILE.dot]
    jdisc cache info|clear

Exit status: 0 on success; 1 on bad input (a missing or damaged file, a wrong input name, dtype or
shape, a module jdisc cannot compile), with one line `jdisc CMD: error: REASON` on stderr (`-v`
prints the whole message and the traceback), and 1 on an internal error (a bug in jdisc: one line
`jdisc CMD: internal error ...`); 2 on bad usage (argparse's message).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import traceback
import zipfile

from jdisc.version import __version__

_MLIR_BYTECODE_MAGIC = b"ML\xefR"


class CommandError(Exception):
    """Bad input to a command: its message is the one-line reason."""


# ---------------------------------------------------------------------------------------------
# Commands


def cmd_bench(opts: argparse.Namespace) -> None:
    from jdisc import bench
    try:
        bench.run(opts)
    except bench.BenchError as err:
        raise CommandError(str(err)) from None


def cmd_compile(opts: argparse.Namespace) -> None:
    from jdisc.package import from_stablehlo
    module = read_module(opts.module)
    name = opts.name or re.sub(r"\W", "_", os.path.basename(opts.module).split(".")[0]) or "main"
    pkg = from_stablehlo(module, name=name)
    if os.path.isdir(opts.output):
        raise CommandError(f"-o {opts.output} is a directory; give the package's file name")
    pkg.save(opts.output)
    print(f"wrote {opts.output}")
    print(pkg.describe(), end="")


def cmd_run(opts: argparse.Namespace) -> None:
    import numpy as np
    from jdisc.package import load
    inputs: dict = {}
    for item in opts.input or []:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise CommandError(f"--input {item!r}: expected NAME=FILE.npy (NAME an input's name "
                               f"or position)")
        key = int(name) if name.isdigit() else name
        if key in inputs:
            raise CommandError(f"--input {name} is given twice")
        inputs[key] = _read_npy(path, name)
    pkg = load(opts.package)
    if not pkg.library_origin == "package":
        print(f"note: {pkg.library_origin}", file=sys.stderr)
    _warn_casts(pkg, inputs)
    outs = pkg.run_named(inputs)
    os.makedirs(opts.output, exist_ok=True)
    used: set[str] = set()
    for name, arr in outs.items():
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_.") or "output"
        base, n = stem, 1
        while stem in used:
            n += 1
            stem = f"{base}_{n}"
        used.add(stem)
        path = os.path.join(opts.output, stem + ".npy")
        np.save(path, arr)
        print(f"{name}: {arr.dtype}{list(arr.shape)} -> {path}")


def _warn_casts(pkg, inputs: dict) -> None:
    """A warning (stderr) for each input whose .npy dtype is not the package's: it is cast, as
    jax would cast it, and the user should know before reading the outputs."""
    import numpy as np
    from jdisc.dynamic_passes.ir.dtypes import numpy_dtype
    wanted = {i["name"]: i["dtype"] for i in pkg.manifest["inputs"] if not i["baked"]}
    for key, arr in inputs.items():
        name = pkg.input_names[key] if isinstance(key, int) and \
            0 <= key < len(pkg.input_names) else key
        if name not in wanted:
            continue                   # run_named names the unknown input
        try:
            want = np.dtype(numpy_dtype(wanted[name]))
        except (KeyError, TypeError):
            continue
        import jax
        # cast only where jax would (float64 to float32 without x64); another dtype is an error
        if arr.dtype != want and np.dtype(jax.dtypes.canonicalize_dtype(arr.dtype)) == want:
            print(f"warning: input '{name}' is {arr.dtype} but the package takes {want}: "
                  f"casting it to {want}", file=sys.stderr)


def cmd_inspect(opts: argparse.Namespace) -> None:
    if _is_package(opts.target):
        from jdisc.package import open_package
        pkg = open_package(opts.target)
        print(pkg.describe())
        prog = pkg.program()
    else:
        from jdisc import driver
        prog = driver.compile(read_module(opts.target), "main", until="passes").program
    from jdisc.explain import explain_program, fused_graph_dot
    print(explain_program(prog), end="")
    if opts.dot:
        with open(opts.dot, "w") as f:
            f.write(fused_graph_dot(prog))
        print(f"wrote {opts.dot} (render with: dot -Tsvg {opts.dot} -o graph.svg)")


def cmd_cache(opts: argparse.Namespace) -> None:
    from jdisc.custom_calls import cache_admin
    if opts.action == "info":
        print(cache_admin.format_info(cache_admin.info()), end="")
        return
    root = cache_admin.info()["path"]
    removed, busy = cache_admin.clear(root)
    print(f"removed {removed} cache entr{'y' if removed == 1 else 'ies'} from {root}"
          + (f"; {busy} in use by another process, left alone" if busy else ""))


# ---------------------------------------------------------------------------------------------
# Input files


def _is_package(path: str) -> bool:
    if path.endswith(".jdisc"):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PK\x03\x04" or zipfile.is_zipfile(path)
    except OSError:
        return False


def read_module(path: str) -> str | bytes:
    """StableHLO text or bytecode (portable artifact or plain MLIR bytecode), checked to parse, or
    the bytes of a serialized jax.export.Exported."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise CommandError(f"cannot read {path}: {err.strerror or err}") from None
    module: str | bytes = data
    from jdisc.modules import as_jax_exported
    if as_jax_exported(data) is not None:      # the bytes of jax.export.Exported.serialize()
        return data
    if not data.startswith(_MLIR_BYTECODE_MAGIC):
        try:
            module = data.decode("utf-8")
        except UnicodeDecodeError:
            raise CommandError(f"{path} is neither StableHLO text nor MLIR bytecode") from None
    from jdisc.dynamic_passes.importer import mlir_import
    try:
        mlir_import.parse_module(module, mlir_import.make_context())
    except Exception as err:    # jaxlib's MLIRError and friends: the message says where
        raise CommandError(f"{path} is not valid StableHLO: {_one_line(err)}") from None
    return module


def _read_npy(path: str, name: str):
    import numpy as np
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise CommandError(f"--input {name}: cannot read {path} as a .npy array: "
                           f"{_one_line(err)}") from None
    if not isinstance(arr, np.ndarray):
        arr.close()
        raise CommandError(f"--input {name}: {path} is an .npz archive; give one .npy file "
                           f"per input")
    return arr


# ---------------------------------------------------------------------------------------------
# Parser and entry point


def _one_line(err: BaseException, limit: int = 600) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    text = "".join(f"{ln}{' ' if ln.endswith(':') else '; '}" for ln in lines[:4]).rstrip("; ")
    if len(lines) > 4:
        text += f"; ... ({len(lines) - 4} more lines: -v shows them)"
    if len(text) > limit:
        text = text[:limit] + " ... (-v shows the rest)"
    return text or type(err).__name__


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true",
                        help="on error, print the whole message and the traceback")
    p = argparse.ArgumentParser(prog="jdisc", description="jdisc: a dynamic-shape compiler for "
                                "JAX. Compile once for symbolic shapes, run every shape.")
    p.add_argument("--version", action="version", version=f"jdisc {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    b = sub.add_parser("bench", parents=[common], help="the dynamic-shape stream benchmark",
                       description="Dynamic-shape stream benchmark on the built-in workloads: "
                       "jdisc (one compile) against jax.jit (a compile per shape). Progress on "
                       "stderr, tables on stdout.")
    from jdisc.bench import add_arguments
    add_arguments(b)
    b.set_defaults(func=cmd_bench)

    c = sub.add_parser("compile", parents=[common], help="StableHLO module -> package",
                       description="Compile StableHLO (text .mlir, or bytecode .mlirbc / "
                       "portable artifact) into a package. Each '?' dim of input i, axis j is "
                       "the dimension variable d{i}_{j}.")
    c.add_argument("module", metavar="MODULE", help="StableHLO text or bytecode file")
    c.add_argument("-o", "--output", required=True, metavar="PKG", help="package file to write")
    c.add_argument("--name", help="the program's name (default: the module file's stem)")
    c.set_defaults(func=cmd_compile)

    r = sub.add_parser("run", parents=[common], help="run a package on .npy arrays",
                       description="Run a package: one --input per input (by name, as "
                       "`jdisc inspect` lists them, or by position), outputs written to DIR as "
                       ".npy files. Loading a package runs native code from it: run only "
                       "packages from sources you trust.")
    r.add_argument("package", metavar="PKG")
    r.add_argument("--input", action="append", metavar="NAME=FILE.npy",
                   help="an input array (repeat for each input)")
    r.add_argument("--output", required=True, metavar="DIR", help="directory for the outputs")
    r.set_defaults(func=cmd_run)

    i = sub.add_parser("inspect", parents=[common],
                       help="signature, kernels, checks, peak memory of a package or module",
                       description="Describe a package (manifest, signature, constraints, "
                       "members) or a StableHLO module, and what jdisc makes of it: kernels "
                       "with the ops they fuse, run-time checks, constraints, peak memory. "
                       "Never loads a package's library.")
    i.add_argument("target", metavar="PKG|MODULE")
    i.add_argument("--dot", metavar="FILE", help="write the fused kernel graph for Graphviz")
    i.set_defaults(func=cmd_inspect)

    k = sub.add_parser("cache", parents=[common], help="the compile cache: info or clear",
                       description="The on-disk compile cache (JDISC_CACHE_DIR, else "
                       "$XDG_CACHE_HOME/jdisc, else ~/.cache/jdisc).")
    k.add_argument("action", choices=("info", "clear"))
    k.set_defaults(func=cmd_cache)
    return p


def main(argv: list[str] | None = None) -> int:
    opts = build_parser().parse_args(argv)
    from jdisc.errors import JdiscError
    try:
        opts.func(opts)
        sys.stdout.flush()      # here, so that a closed pipe is seen here, not at exit
    except BrokenPipeError:     # `jdisc inspect pkg | head`: the reader has what it wanted
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())    # so that the exit flush cannot fail again
        except (OSError, ValueError):
            pass
        return 0
    except (CommandError, JdiscError, OSError) as err:
        if opts.verbose:
            traceback.print_exc()
        print(f"jdisc {opts.command}: error: {_one_line(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"jdisc {opts.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:    # a bug in jdisc: say so, in one line unless -v
        if opts.verbose:
            traceback.print_exc()
        print(f"jdisc {opts.command}: internal error (a bug in jdisc; -v shows the traceback): "
              f"{type(err).__name__}: {_one_line(err)}", file=sys.stderr)
        return 1
    return 0

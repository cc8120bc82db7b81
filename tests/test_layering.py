"""The package's layers import downstream only, and its modules stay small.

jdisc/dynamic_passes/ has four parts, each importing only the ones below it (read at run time:
imports under `if TYPE_CHECKING:` are annotations only):

    algebra   symbolic dims, intervals, constraints, host values   (imports nothing of jdisc)
    ir        the program, the op registry, the verifier           (algebra)
    importer  StableHLO (MLIR) -> ir                                (algebra, ir)
    passes    shape propagation ... memory plan                    (algebra, ir)

and the pipeline stages import downstream only: export and dynamic_passes never import lowering
or custom_calls, lowering never imports custom_calls.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "jdisc"
PASSES = "jdisc.dynamic_passes"

# what each part may import of jdisc (besides itself and jdisc.errors / jdisc.version)
ALLOWED = {
    f"{PASSES}.algebra": (),
    f"{PASSES}.ir": (f"{PASSES}.algebra",),
    f"{PASSES}.importer": (f"{PASSES}.algebra", f"{PASSES}.ir"),
    f"{PASSES}.passes": (f"{PASSES}.algebra", f"{PASSES}.ir"),
    "jdisc.export": (),
    "jdisc.lowering": (PASSES,),
    "jdisc.custom_calls": (PASSES, "jdisc.lowering"),
}
ANYWHERE = ("jdisc.errors", "jdisc.version")


def _module(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _runtime_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) of every jdisc import not under `if TYPE_CHECKING:`."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                and node.test.id == "TYPE_CHECKING":
            skipped.update(id(n) for n in ast.walk(node))
    out = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            out.extend((node.lineno, n) for n in names)
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
    return [(line, n) for line, n in out if n == "jdisc" or n.startswith("jdisc.")]


def _is_under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _files():
    return sorted(ROOT.rglob("*.py"))


def _layer(module: str) -> str | None:
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if _is_under(module, layer):
            return layer
    return None


def test_every_part_imports_only_the_parts_below_it():
    bad = []
    for path in _files():
        module = _module(path)
        layer = _layer(module)
        if layer is None:
            continue
        for line, name in _runtime_imports(ast.parse(path.read_text())):
            if _is_under(name, layer) or any(_is_under(name, a) for a in ANYWHERE):
                continue
            if not any(_is_under(name, a) for a in ALLOWED[layer]):
                bad.append(f"{path.relative_to(ROOT.parent)}:{line} imports {name}")
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_the_check_finds_an_upstream_import(tmp_path):
    tree = ast.parse("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n    from jdisc.dynamic_passes.passes.fusion import K\n"
                     "from jdisc.dynamic_passes.passes import fusion\n")
    names = [n for _, n in _runtime_imports(tree)]
    assert "jdisc.dynamic_passes.passes.fusion" in names      # the run-time import
    assert "jdisc.dynamic_passes.passes.fusion.K" not in names    # the annotation-only one


def test_no_private_names_imported_across_modules():
    bad = []
    for path in _files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and \
                    node.module.startswith("jdisc"):
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        bad.append(f"{path.relative_to(ROOT.parent)}: {a.name} from {node.module}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("part", ["algebra", "ir", "importer", "passes"])
def test_no_module_over_600_lines(part):
    long = [f"{p.name}: {n}" for p in sorted((ROOT / "dynamic_passes" / part).glob("*.py"))
            if (n := len(p.read_text().splitlines())) > 600]
    assert not long, long

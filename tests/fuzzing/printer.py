"""The printer: a program as Python source (`function_source`), its test inputs
(`input_code`, `make_inputs`: the checker executes these very lines) and a standalone repro
script, jdisc against jax.jit (`source`)."""

from __future__ import annotations

import re

import numpy as np

from .control_ops import OPS
from .facts import BOOL, NAMES, SYM, Program, same
from .infer import dynamic_axes, infer
from .ops import Ctx, ptuple


class _Printer:
    def __init__(self, envs):
        self.envs = envs

    def program(self, prog, typing, names, prefix, indent):
        names = list(names) + [f"{prefix}v{prog.n_in + k}" for k in range(len(prog.nodes))]
        lines = []

        def dsrc(e):
            if isinstance(e, int):
                return str(e)
            if e[0] == "ref":
                d = typing.types[e[1]].shape[e[2]]
                for var, s in SYM.items():
                    if same(d, s):
                        return var
                return f"{names[e[1]]}.shape[{e[2]}]"
            x, y = dsrc(e[1]), dsrc(e[2])
            x = f"({x})" if " - " in x or " // " in x else x
            y = f"({y})" if " " in y and (e[0] != "mul" or " - " in y or " // " in y) else y
            return f"{x} {dict(mul='*', fdiv='//', sub='-')[e[0]]} {y}"

        ctx = Ctx(self.envs, typing.types, typing.facts, dsrc=dsrc)
        for k, node in enumerate(prog.nodes):
            vid = prog.n_in + k
            ctx.vid = vid

            def print_sub(sub, fname, params, caps, vid=vid, k=k):
                sub_t = typing.subs[vid][[i for i, s in enumerate(node.subs) if s is sub][0]]
                body = self.program(sub, sub_t, list(params) + list(caps), f"{fname}_",
                                    indent + "    ")
                head = f"{indent}def {fname}({', '.join(params)}):"
                return [head] + body, fname
            ctx.print_sub = print_sub
            out = OPS[node.op].src(node, [names[a] for a in node.args], ctx)
            if isinstance(out, tuple):
                lines += out[0]
                out = out[1]
            lines.append(f"{indent}{names[vid]} = {out}")
        outs = ", ".join(names[o] for o in prog.outputs)
        lines.append(f"{indent}return {outs}" + ("," if len(prog.outputs) == 1 and not prefix
                                                 else ""))
        return lines


def input_code(prog: Program, env: dict, seed: int, names=None) -> list[str]:
    """Lines that make the test inputs at env (the checker executes these very lines)."""
    names = names or [f"x{i}" for i in range(prog.n_in)]
    lines = [f"rng = np.random.default_rng({seed})"]
    for name, inp in zip(names, prog.inputs):
        shape = ptuple(env[d] if isinstance(d, str) else d for d in inp.template)
        kind, lo, hi = inp.dist
        if inp.dtype == BOOL:
            expr = f"rng.random({shape}) < 0.5"
        elif inp.dtype.kind == "i":
            expr = f"rng.integers({lo}, {hi}, {shape}, endpoint=True).astype(np.int32)"
        elif kind == "halves":
            expr = f"(rng.integers({lo}, {hi}, {shape}, endpoint=True) / 2).astype(np.float32)"
        else:
            expr = f"rng.uniform({lo}, {hi}, {shape}).astype(np.float32)"
        lines.append(f"{name} = {expr}")
    return lines


def make_inputs(prog: Program, env: dict, seed: int) -> list[np.ndarray]:
    ns = {"np": np}
    exec("\n".join(input_code(prog, env, seed)), ns)
    return [ns[f"x{i}"] for i in range(prog.n_in)]


def function_source(prog: Program, envs=None, typing=None, name="f") -> list[str]:
    envs = envs or [dict.fromkeys(NAMES, 2)]
    typing = typing or infer(prog, envs)
    names = [f"x{i}" for i in range(prog.n_in)]
    body = _Printer(envs).program(prog, typing, names, "", "    ")
    text = "\n".join(body)
    dims = []
    for var in NAMES:
        if re.search(rf"\b{var}\b", text):
            i, ax = next((i, inp.template.index(var)) for i, inp in enumerate(prog.inputs)
                         if var in inp.template)
            dims.append((var, f"x{i}.shape[{ax}]"))
    head = [f"def {name}({', '.join(names)}):"]
    if dims:
        head.append(f"    {', '.join(v for v, _ in dims)} = {', '.join(s for _, s in dims)}")
    return head + body


def split_pieces(input_seed: int) -> int:
    """The programs of odd batch seeds run every kernel loop of more than one row in 3 pieces
    (JDISC_SPLIT_PIECES), so that the fuzzer's small sizes cross piece boundaries too."""
    return 3 if (input_seed // 1000) % 2 else 0


def source(prog: Program, env: dict | None = None, seed: int = 0, tols=None,
           typing_envs=None) -> str:
    """A standalone script: the function, inputs at env, jdisc against jax.jit; the function
    typed at `typing_envs` (default: env alone)."""
    env = env or dict.fromkeys(NAMES, 2)
    envs = typing_envs or [env]
    lines = ["import os", "os.environ['JDISC_DONATE_MIN_BYTES'] = '0'   # reuse donated "
             "buffers of any size"] + ([
                 f"os.environ['JDISC_SPLIT_PIECES'] = '{split_pieces(seed)}'   # every kernel "
                 "loop in pieces, however small (tests only)"] if split_pieces(seed) else []) + [
             "import jax, jax.numpy as jnp, numpy as np",
             "from jax import lax", "import jdisc",
             ""] + function_source(prog, envs) + [""] + input_code(prog, env, seed)
    args = ", ".join(f"x{i}" for i in range(prog.n_in))
    donated = tuple(range(prog.n_in))
    lines += [f"jf = jdisc.jit(f, dynamic_axes={dynamic_axes(prog)!r}, donate_argnums={donated!r},"
              " bridge=False)   # the first call runs jdisc's program, not jax.jit's",
              f"want = jax.jit(f)({args})",
              f"for got, want in zip(jf(*map(jnp.asarray, ({args},))), want):",
              "    got, want = np.asarray(got), np.asarray(want)",
              "    print(got.shape, want.shape, np.max(np.abs(got.astype(float) - "
              "want.astype(float)), initial=0))",
              "assert not jf.stats().get('bridged_calls'), jf.stats()   # jdisc's own program ran"]
    if tols is not None:
        lines.append(f"# tolerances (max |diff| allowed): {tols}")
    return "\n".join(lines) + "\n"

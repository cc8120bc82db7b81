"""`jdisc.jit`: compile a JAX function once for symbolic shapes, run it for every shape.

    fn + dynamic_axes -> export (jax.export, symbolic dims) -> dynamic_passes (jdisc IR)
       -> lowering (C kernels + host launcher) -> custom_calls (cc, cache, load, call)
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
import warnings
from typing import Any, Callable, Sequence

import jax
import numpy as np

from jdisc import bridge as bridging, driver, interop
from jdisc.aot import Explanation, Lowered
from jdisc.compiled import Compiled
from jdisc.dynamic_passes.ir.dtypes import dtype_name, dtype_problem
from jdisc.errors import (ArgumentError, CompileError, JdiscError, ShapeError,
                          UnsupportedOpError)
from jdisc.export.concrete import refusal, sizes_meet
from jdisc.export.exporter import ExportedFunction
from jdisc.export.specs import (check_shared_names, leaf_specs,
                                normalize_dynamic_axes, positional_names, symbolic_specs)


class _XlaFallback:
    """What a jdisc.jit(..., fallback="xla") function runs when jdisc cannot compile it: `fn`
    (jax.jit) after `check` (the arguments' sizes against the dims and constraints, which no
    program checks here: arguments' errors never fall back)."""

    def __init__(self, fn: Callable, reason: JdiscError, check: Callable[[list], None]):
        self.fn = fn
        self.reason = reason
        self._check = check
        self._passed: set = set()     # the leaves' shapes that `check` passed

    def check(self, dynamic: list) -> None:
        """`check` once per set of leaf shapes (it parses the dims' expressions: about 30 us,
        more than the jax.jit call it guards)."""
        shapes = tuple(np.shape(x) for x in jax.tree_util.tree_leaves(dynamic))
        if shapes not in self._passed:
            self._check(dynamic)
            self._passed.add(shapes)


def fallback_warning(name: str, err: JdiscError) -> str:
    """The warning a fallback="xla" function gives when it runs with jax.jit instead."""
    why = ("jdisc does not support what it uses" if isinstance(err, UnsupportedOpError) else
           "jdisc failed to compile it (CompileError)")
    return f"jdisc: running {name} with jax.jit instead (fallback='xla'): {why}: {err}"


def check_input_dtypes(leaves, name: str) -> None:
    """UnsupportedOpError naming every input leaf of an element type jdisc cannot compile."""
    bad = []
    for leaf in leaves:
        try:
            dtype_name(leaf.dtype)
        except KeyError:
            why = dtype_problem(np.dtype(leaf.dtype).name) or "not supported"
            bad.append(f"  argument '{leaf.name}' has dtype {np.dtype(leaf.dtype).name}: {why}")
    if bad:
        raise UnsupportedOpError(f"jdisc cannot compile '{name}' for these inputs:\n"
                                 + "\n".join(bad))


def lower_to_ir(fun: Callable, *args, dynamic_axes: Any = None, constraints: Sequence[str] = ()):
    """The IR jdisc.jit would compile for these (dynamic, positional) arguments."""
    names = positional_names(fun, len(args))
    leaves, in_tree = leaf_specs(args, normalize_dynamic_axes(dynamic_axes, names), names)
    name = getattr(fun, "__name__", "fn")
    check_input_dtypes(leaves, name)
    return driver.compile(driver.FunctionSource(fun, leaves, in_tree, constraints), name,
                          until="passes").program


_CANONICAL: dict = {}


try:
    from jax._src.array import ArrayImpl as _ArrayImpl   # jax is pinned to a version range
    from jax._src.config import enable_x64 as _X64
except ImportError:     # pragma: no cover - then every call takes _entry's path
    _ArrayImpl = _X64 = None


def _array_key(args: tuple) -> tuple | None:
    """The key of _by_arrays for arguments that are all jax.Arrays (None otherwise): jax.Array
    dtypes are canonical already, so dtype and rank select the program as _leaf_signature
    does (under the x64 mode of the call)."""
    if _X64 is None:
        return None
    key = [_X64.value]
    for x in args:
        if type(x) is not _ArrayImpl:
            return None
        key += (x.dtype, x.ndim)
    return tuple(key)


def _leaf_signature(x: Any) -> tuple:
    """What selects a program for one argument leaf: its (canonical) dtype and rank; a Python
    scalar by its type (it is weakly typed)."""
    if isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
        return (type(x), 0)
    dt = getattr(x, "dtype", None)
    if dt is None:
        return (type(x), np.ndim(x))
    key = (dt, _X64.value if _X64 is not None else jax.config.jax_enable_x64)
    canon = _CANONICAL.get(key)     # float64 is float32 without x64: the mode is in the key
    if canon is None:
        try:
            canon = np.dtype(jax.dtypes.canonicalize_dtype(dt))
        except (TypeError, ValueError):
            canon = dt
        _CANONICAL[key] = canon
    return (canon, len(x.shape))


def _signatures(flat: list) -> tuple:
    """_leaf_signature of each leaf; a jax.Array's from its dtype's canonical form under this
    call's x64 mode, looked up once per call (a training step's parameters are many leaves:
    51 of them cost 15 us more per call through _leaf_signature alone)."""
    if _X64 is None:
        return tuple(map(_leaf_signature, flat))
    x64, out = _X64.value, []
    for x in flat:
        canon = _CANONICAL.get((x.dtype, x64)) if type(x) is _ArrayImpl else None
        out.append((canon, x.ndim) if canon is not None else _leaf_signature(x))
    return tuple(out)


def _structure_mismatch(fn_name: str, entry: Compiled, dynamic: Sequence[Any],
                        arg_names: Sequence[str]) -> str:
    """A short message for arguments structured unlike the compiled ones: the first argument
    that differs, what it was and what it is (never two whole treedefs)."""
    compiled = jax.tree_util.tree_unflatten(entry.in_tree, [0] * entry.in_tree.num_leaves)
    for i, (want, got) in enumerate(zip(compiled, dynamic)):
        if jax.tree_util.tree_structure(want) == jax.tree_util.tree_structure(got):
            continue
        arg = arg_names[i] if i < len(arg_names) else f"args[{i}]"
        was = "an array" if jax.tree_util.treedef_is_leaf(
            jax.tree_util.tree_structure(want)) else f"a {type(want).__name__}"
        hint = " (wrap it with jnp.asarray)" if was == "an array" and \
            isinstance(got, (list, tuple)) else ""
        return (f"{fn_name}: argument '{arg}' is a {type(got).__name__}{hint}, but the "
                f"function was compiled with {was} there")
    return f"{fn_name}: the arguments' pytree structure differs from the compiled one"


class JdiscFunction:
    """What `jdisc.jit` returns: call it like the original function."""

    def __init__(self, fun: Callable, dynamic_axes: Any, constraints: Sequence[str],
                 static_argnums: Sequence[int], static_argnames: Sequence[str],
                 fallback: str | None = None, bridge: bool | None = None, strict: bool = False,
                 donate_argnums: Sequence[int] = (), donate_argnames: Sequence[str] = ()):
        if fallback not in (None, "xla"):
            raise ArgumentError(f"fallback must be None or 'xla', got {fallback!r}")
        self.fallback = fallback
        self.bridge = bridging.default() if bridge is None else bool(bridge)
        self.strict = bool(strict)
        self._bridges: dict[Any, bridging.Bridge] = {}
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.dynamic_axes = dynamic_axes
        self.constraints = tuple(constraints)
        self.static_argnums = tuple(static_argnums)
        self.static_argnames = tuple(static_argnames)
        self.donate_argnums = tuple(donate_argnums)
        self.donate_argnames = tuple(donate_argnames)
        self._compiled: dict[Any, Compiled] = {}
        # (x64, dtype and rank of each argument) -> its program, for calls whose arguments are
        # all jax.Arrays (leaves of their own, never traced): the same program _entry finds
        self._by_arrays: dict[tuple, Compiled] = {}
        # (x64, the arguments' treedef) -> the program its last eager call ran: a later call
        # with that structure tries it first, C checking each leaf's dtype and rank (which,
        # with the structure and the x64 mode, are the key _entry would find it by)
        self._by_tree: dict[tuple, Compiled] = {}
        self._lock = threading.Lock()
        self._name_cache: dict[int, list[str]] = {}
        self._stats = {"compiles": 0, "cache_hits": 0, "calls": 0, "compile_seconds": 0.0}
        try:
            self._signature = inspect.signature(fun)
        except (TypeError, ValueError):
            self._signature = None

    # -- argument handling ----------------------------------------------------------------
    def _names(self, n: int) -> list[str]:
        names = self._name_cache.get(n)
        if names is None:
            names = self._name_cache[n] = positional_names(self.fun, n)
        return names

    def _split_args(self, args: tuple, kwargs: dict):
        """Separate static from dynamic arguments.

        Returns (dynamic positional args, their names, hashable key of the statics,
        a function of the dynamic args alone with the statics bound)."""
        static_kw: dict[str, Any] = {}
        n_given = len(args)     # positional arguments as passed, before binding keywords
        if kwargs:
            if self._signature is None:
                raise ArgumentError(f"{self.__name__}: keyword arguments need a function with "
                                    f"an inspectable signature")
            try:
                bound = self._signature.bind(*args, **kwargs)
            except TypeError as err:
                raise ArgumentError(f"{self.__name__}: {err}") from None
            args, static_kw = bound.args, dict(bound.kwargs)
            dyn_kw = [k for k in static_kw if k not in self.static_argnames]
            if dyn_kw:
                raise ArgumentError(f"{self.__name__}: pass array arguments positionally "
                                    f"(got keyword-only {dyn_kw})")
        names = self._names(len(args))
        if not self.static_argnums and not self.static_argnames and not static_kw \
                and n_given == len(args):
            return list(args), names, (len(args),), self.fun     # the common, fast case
        static_pos: dict[int, Any] = {}
        for i in self.static_argnums:
            j = i + len(args) if i < 0 else i
            if not 0 <= j < len(args):
                raise ArgumentError(f"{self.__name__}: static_argnums names argument {i} but "
                                    f"{len(args)} positional argument(s) were passed")
            static_pos[j] = args[j]
        for j, n in enumerate(names):
            if n in self.static_argnames:
                static_pos[j] = args[j]
        dynamic = [a for i, a in enumerate(args) if i not in static_pos]
        dyn_names = [n for i, n in enumerate(names) if i not in static_pos]
        key = (len(args), tuple(sorted(static_pos.items())), tuple(sorted(static_kw.items())),
               n_given)
        try:
            hash(key)
        except TypeError as err:
            raise ArgumentError(f"{self.__name__}: static arguments must be hashable: "
                                f"{err}") from None
        n_args, fun = len(args), self.fun

        def bound_fun(*dyn):
            it = iter(dyn)
            full = [static_pos[i] if i in static_pos else next(it) for i in range(n_args)]
            return fun(*full, **static_kw)

        bound_fun.__name__ = getattr(fun, "__name__", "fn")
        return dynamic, dyn_names, key, bound_fun

    def _dynamic_axes_for(self, key: tuple, dyn_names: list[str]) -> list[Any]:
        """One dynamic_axes entry per dynamic positional argument. A sequence of entries
        covers the arguments passed positionally; parameters passed by keyword have no
        dynamic axes (the dict form, keyed by parameter name, gives them some)."""
        n_args, n_given = key[0], key[3] if len(key) > 3 else key[0]
        da = self.dynamic_axes
        if da is None or isinstance(da, dict) and (
                not da or not all(isinstance(k, int) for k in da)):
            if isinstance(da, dict):   # by parameter name: static ones may be listed as None
                da = {k: v for k, v in da.items() if k in dyn_names or v is not None}
            return normalize_dynamic_axes(da, dyn_names)
        entries = [da] if isinstance(da, dict) else list(da)
        if len(entries) == n_given < n_args:
            entries += [None] * (n_args - n_given)
        if len(entries) == n_args and n_args != len(dyn_names):
            all_names = self._names(n_args)
            entries = [e for e, n in zip(entries, all_names) if n in dyn_names]
        return normalize_dynamic_axes(entries, dyn_names)

    def _donated_positions(self, n_args: int, dyn_names: list[str]) -> list[int]:
        """Positions among the dynamic args of the donated ones (donate_argnums count all
        positional args, as jax.jit's do)."""
        if not self.donate_argnums and not self.donate_argnames:
            return []
        all_names = self._names(n_args)
        nums = {i + n_args if i < 0 else i for i in self.donate_argnums}
        donated = {all_names[i] for i in nums if 0 <= i < n_args}
        donated |= set(self.donate_argnames)
        return [pos for pos, name in enumerate(dyn_names) if name in donated]

    def _jax_jit(self, fun: Callable, key: tuple, dyn_names: list[str]) -> Callable:
        """jax.jit of the statics-bound function (fallback and bridge), donating as asked."""
        nums = tuple(self._donated_positions(key[0], dyn_names))
        return jax.jit(fun, donate_argnums=nums) if nums else jax.jit(fun)

    # -- compile and call -----------------------------------------------------------------
    def _compile(self, args: tuple, kwargs: dict, key: tuple, dynamic: list,
                 dyn_names: list[str], fun: Callable, background: bool = False):
        if self._signature is not None:
            try:
                self._signature.bind(*args, **kwargs)
            except TypeError as err:
                raise ArgumentError(f"{self.__name__}: {err}") from None
        n_args = key[0]     # positional arguments after binding keywords
        t0 = time.perf_counter()
        entries = self._dynamic_axes_for(key, dyn_names)
        leaves, in_tree = leaf_specs(dynamic, entries, dyn_names,
                                     self._donated_positions(n_args, dyn_names))
        check_shared_names(leaves)
        check_input_dtypes(leaves, self.__name__)
        if background:      # the arguments are checked: the rest runs in the background
            symbolic_specs(leaves, self.constraints)    # bad dim names and constraints here
            if not sizes_meet(leaves, self.constraints):
                return None     # the program's check decides: compiled in the foreground
            return (lambda: self._build(fun, leaves, in_tree, t0)), leaves
        return self._build(fun, leaves, in_tree, t0)

    def _build(self, fun: Callable, leaves, in_tree, t0: float) -> Compiled:
        return self._finish(self._export(fun, leaves, in_tree), in_tree, fun, t0)

    def _export(self, fun: Callable, leaves, in_tree) -> ExportedFunction:
        source = driver.FunctionSource(fun, leaves, in_tree, self.constraints)
        c = driver.compile(source, self.__name__, until="export")
        self._add_stage_seconds(c.seconds)
        return c.exported

    def _add_stage_seconds(self, seconds: dict) -> None:
        total = self._stats.setdefault("stage_seconds", {})
        for stage, t in seconds.items():
            total[stage] = total.get(stage, 0.0) + t

    def _finish(self, exported: ExportedFunction, in_tree, fun: Callable, t0: float
                ) -> Compiled:
        c = driver.compile(exported, exported.name)
        self._add_stage_seconds(c.seconds)
        self._stats["compiles"] += 1
        self._stats["cache_hits"] += int(c.executable.library.cache_hit)
        self._stats["compile_seconds"] += time.perf_counter() - t0
        return Compiled(exported, c.executable, in_tree, c.program, fun)

    def _entry(self, args: tuple, kwargs: dict, wait: bool = True) -> tuple:
        """(entry, dynamic args, their flat leaves, their treedef). The key is the statics
        plus, unless strict, the pytree structure and each leaf's dtype and rank: a new dtype
        or rank compiles a program of its own, as jax.jit retraces."""
        dynamic, names, key, fun = self._split_args(args, kwargs)
        flat, treedef = jax.tree_util.tree_flatten(tuple(dynamic))
        if not self.strict:
            key = key + (treedef, _signatures(flat))
        entry = self._compiled.get(key)
        if entry is None:
            with self._lock:
                entry = self._compiled.get(key)
                if entry is None and (key in self._bridges or self.bridge and not wait and
                                      not interop.is_traced(flat) and
                                      not bridging.seen(self.fun, key, self._config())):
                    entry = self._bridged(args, kwargs, key, dynamic, names, fun,
                                          serve=not wait and not interop.is_traced(flat))
                    if isinstance(entry, bridging.Bridge):
                        return entry, dynamic, flat, treedef
                if entry is None:       # not bridged: sizes the program may refuse
                    try:
                        entry = self._compile(args, kwargs, key, dynamic, names, fun,
                                              background=False)
                    except (UnsupportedOpError, CompileError) as err:
                        entry = self._fall_back(err, self._jax_jit(fun, key, names), key,
                                                names)
                    self._compiled[key] = entry
                    if isinstance(entry, Compiled):
                        bridging.remember(self.fun, key, self._config())
        return entry, dynamic, flat, treedef

    def _fall_back(self, err: JdiscError, jitted: Callable, key: tuple, names: list[str]
                   ) -> _XlaFallback:
        if self.fallback != "xla":
            raise err
        warnings.warn(fallback_warning(self.__name__, err), stacklevel=4)
        self._stats["fallbacks"] = self._stats.get("fallbacks", 0) + 1
        return _XlaFallback(jitted, err, functools.partial(self._check_sizes, key, names))

    def _check_sizes(self, key: tuple, names: list[str], dynamic: list) -> None:
        """Raise ShapeError for a fallback call whose sizes certainly break the dims or the
        constraints (export/concrete.py); a shape that is not concrete (inside an export with
        symbolic shapes) is jax's to check."""
        if any(not isinstance(d, (int, np.integer)) for x in jax.tree_util.tree_leaves(dynamic)
               for d in np.shape(x)):
            return
        leaves, _ = leaf_specs(dynamic, self._dynamic_axes_for(key, names), names)
        why = refusal(leaves, self.constraints)     # shared names too
        if why is not None:
            raise ShapeError(f"{self.__name__}: {why}")

    def _bridged(self, args, kwargs, key, dynamic, names, fun, serve: bool = False):
        """The bridge (bridge.py; under self._lock): the first call checks the arguments here
        and makes the compile's background thread, which __call__ starts once jax.jit has
        served that call (so that its XLA compile has the CPUs), and returns the Bridge; so
        does a later call (when `serve`: an eager call) at shapes jax.jit has run while the
        compile runs; every other call waits for the compile and gets its entry (or its
        error) as without the bridge. None: the first call's sizes are not known to meet the
        dims and constraints (export/concrete.py), so the program's check must see it first."""
        b = self._bridges.get(key)
        if b is not None and serve and b.serves(dynamic):
            return b
        if b is None:
            background = self._compile(args, kwargs, key, dynamic, names, fun, background=True)
            if background is None:
                return None
            build, leaves = background
            config = self._config()

            def build_and_remember():    # in the thread: a process may exit before a 2nd call
                entry = build()
                bridging.remember(self.fun, key, config)
                return entry
            self._bridges[key] = bridging.Bridge(self._jax_jit(fun, key, names),
                                                 build_and_remember, self.__name__,
                                                 self._admits_like(leaves, key, names))
            return self._bridges[key]
        result = b.wait()
        del self._bridges[key]
        if isinstance(result, (UnsupportedOpError, CompileError)):
            result = self._fall_back(result, b.fn, key, names)
        elif isinstance(result, BaseException):
            raise result
        self._compiled[key] = result
        return result

    def _admits_like(self, first: list, key: tuple, names: list[str]) -> Callable:
        """Whether jdisc's program, compiled for the leaves `first`, would take a call's
        dynamic args (the bridge runs them with XLA only then): the same leaves, dtypes,
        dimension names and static sizes, and sizes known to meet the dims and constraints.
        False for anything else (the program's own check then decides the call)."""
        entries = self._dynamic_axes_for(key, names)
        donated = self._donated_positions(key[0], names)

        def admits(dynamic: list) -> bool:
            try:
                leaves, _ = leaf_specs(dynamic, entries, names, donated)
            except Exception:       # noqa: BLE001 - the program's check reports it
                return False
            return len(leaves) == len(first) and all(
                (a.name, a.dtype, a.axes, a.donated, len(a.shape)) ==
                (b.name, b.dtype, b.axes, b.donated, len(b.shape)) and
                all(a.shape[i] == b.shape[i] for i in range(len(a.shape)) if i not in a.axes)
                for a, b in zip(leaves, first)) and sizes_meet(leaves, self.constraints)
        return admits

    def _config(self) -> str:
        """What besides the function and the program key decides its compile (bridge.seen)."""
        return repr((self.dynamic_axes, self.constraints, self.donate_argnums,
                     self.donate_argnames))

    def compiled_for(self, *args, **kwargs) -> Compiled:
        """The compiled program serving these arguments (compiling it on first use, or
        waiting for the bridge's background compile)."""
        return self._entry(args, kwargs)[0]

    def __call__(self, *args, **kwargs):
        if not kwargs:      # jax.Arrays only, a program compiled for their dtypes and ranks
            entry = self._by_arrays.get(_array_key(args))
            if entry is not None:
                self._stats["calls"] += 1
                return entry.unflatten(entry.call_flat(args))
            if self._by_tree:   # pytrees (a dict of parameters): the program their structure
                flat, treedef = jax.tree_util.tree_flatten(args)    # last ran, if C finds
                entry = self._by_tree.get((_X64.value, treedef))    # every leaf its dtype
                outs = entry.call_fast(flat) if entry is not None else None    # and rank
                if outs is not None:
                    self._stats["calls"] += 1
                    return entry.unflatten(outs)
        entry, dynamic, flat, treedef = self._entry(args, kwargs, wait=False)
        if isinstance(entry, bridging.Bridge):
            outs = entry.call(dynamic)
            if outs is not bridging.UNSERVED:
                self._stats["calls"] += 1
                self._stats["bridged_calls"] = self._stats.get("bridged_calls", 0) + 1
                return outs
            entry, dynamic, flat, treedef = self._entry(args, kwargs)  # jdisc's program now
        if isinstance(entry, _XlaFallback):
            self._stats["calls"] += 1
            entry.check(dynamic)
            return entry.fn(*dynamic)
        if treedef != entry.in_tree:
            raise ArgumentError(_structure_mismatch(self.__name__, entry, dynamic,
                                                    self._names(len(dynamic))))
        if interop.is_traced(flat):    # inside jax.jit / vmap / grad / scan: a custom call
            outs = interop.traced_call(self, entry, flat)
        else:
            outs = entry.call_flat(flat)
            key = _array_key(args) if not kwargs else None
            if key is not None:         # the next such call skips the lookup above
                self._by_arrays[key] = entry
            elif not kwargs and _X64 is not None and not self.static_argnums and \
                    not self.static_argnames:
                self._by_tree[(_X64.value, treedef)] = entry
        self._stats["calls"] += 1
        return entry.unflatten(outs)

    def lower(self, *args, **kwargs) -> Lowered:
        """AOT staging, as `jax.jit(f).lower`: args are arrays or jax.ShapeDtypeStructs (dims
        concrete, or jax.export symbolic dims, which become dynamic axes); `.as_text()` is the
        StableHLO, `.compile()` the program (its C, memory and cost analyses, and a call)."""
        t0 = time.perf_counter()
        dynamic, names, key, fun = self._split_args(args, kwargs)
        if self._signature is not None:
            try:
                self._signature.bind(*args, **kwargs)
            except TypeError as err:
                raise ArgumentError(f"{self.__name__}: {err}") from None
        leaves, in_tree = leaf_specs(dynamic, self._dynamic_axes_for(key, names), names,
                                     self._donated_positions(key[0], names))
        check_shared_names(leaves)
        check_input_dtypes(leaves, self.__name__)
        exported = self._export(fun, leaves, in_tree)
        return Lowered(self.__name__, exported, lambda: self._finish(exported, in_tree, fun, t0),
                       self._call_entry)

    def _call_entry(self, entry: Compiled, args: tuple):
        """An AOT Executable's call: the same checks and paths as a jit call."""
        flat, treedef = jax.tree_util.tree_flatten(tuple(args))
        if treedef != entry.in_tree:
            raise ArgumentError(_structure_mismatch(self.__name__, entry, args,
                                                    self._names(len(args))))
        outs = (interop.traced_call(self, entry, flat) if interop.is_traced(flat)
                else entry.call_flat(flat))
        self._stats["calls"] += 1
        return entry.unflatten(outs)

    def __repr__(self) -> str:
        st = self._stats
        return (f"<jdisc.jit of {getattr(self.fun, '__qualname__', self.__name__)}: "
                f"dynamic_axes={self.dynamic_axes!r}"
                + (f", constraints={list(self.constraints)!r}" if self.constraints else "")
                + (", strict=True" if self.strict else "")
                + (f", fallback={self.fallback!r}" if self.fallback else "")
                + f"; {len(self._compiled)} program(s), {st['compiles']} compile(s), "
                f"{st['calls']} call(s)>")

    def explain(self, *args, **kwargs) -> str:
        """What jdisc made of the function for arguments like these: each kernel (name, kind,
        fused StableHLO ops with source lines), the run-time checks, and the memory plan. The
        text is returned (a str that a REPL prints as text)."""
        from jdisc.explain import explain_program
        entry = self.compiled_for(*args, **kwargs)
        if isinstance(entry, _XlaFallback):
            return Explanation(f"{self.__name__} runs with jax.jit (fallback='xla'): "
                               f"{entry.reason}\n")
        return Explanation(explain_program(entry.program))

    def profile(self, *args, **kwargs) -> dict[str, float]:
        """Seconds spent in each kernel so far, when compiled with JDISC_PROFILE=1."""
        import ctypes
        entry = self.compiled_for(*args, **kwargs)
        if isinstance(entry, _XlaFallback):
            raise JdiscError(f"{self.__name__} runs with jax.jit (fallback='xla'); there are "
                             f"no jdisc kernels to profile")
        lib = entry.executable.library.handle
        if not hasattr(lib, "jd_profile"):
            raise JdiscError("compile with JDISC_PROFILE=1 set to profile kernels")
        names = [k.name for k in entry.program.kernels]
        out = (ctypes.c_double * max(len(names), 1))()
        lib.jd_profile(out)
        return dict(zip(names, out))

    def stats(self) -> dict:
        """compiles, cache_hits, calls, compile_seconds (with `stage_seconds`: how they split
        over the driver's stages, `cc` being the C compiler's part of `library`); with
        `vmap_compiles` and `vjp_compiles` counting the compiles of the batched and backward
        programs that jax.vmap and jax.grad of this function made (interop.py)."""
        out = dict(self._stats)
        if "stage_seconds" in out:
            out["stage_seconds"] = dict(out["stage_seconds"])
        for key, derived in (("vmap_compiles", lambda e: list(e.vmapped.values())),
                             ("vjp_compiles", lambda e: [e.vjp] if e.vjp else [])):
            n = 0
            for entry in self._compiled.values():
                if isinstance(entry, Compiled):    # not an _XlaFallback
                    n += sum(f.jf.stats()["compiles"] for f in derived(entry))
            if n:
                out[key] = n
        return out


def jit(fun: Callable | None = None, *, dynamic_axes: Any = None,
        constraints: Sequence[str] = (), static_argnums: int | Sequence[int] = (),
        static_argnames: str | Sequence[str] = (), fallback: str | None = None,
        bridge: bool | None = None, strict: bool = False,
        donate_argnums: int | Sequence[int] = (), donate_argnames: str | Sequence[str] = ()):
    """Compile `fun` once for symbolic shapes; every later shape runs the same program.

    `dynamic_axes`: per positional argument, `None` or `{axis: name}` (or a pytree prefix of
    those), or a dict keyed by parameter name. Axes that share a name must be equal.
    `constraints`: jax.export constraint strings such as `"seq % 8 == 0"`.
    `fallback="xla"`: if jdisc cannot compile the function (UnsupportedOpError, or a
    CompileError: the C compiler failed, or an internal error in jdisc), warn once and run it
    with `jax.jit` instead (which compiles per shape). Errors in the arguments (ArgumentError,
    DtypeError, ShapeError) never fall back.
    `bridge` (default on; `bridge=False` or `JDISC_BRIDGE=0` turns it off): the first call
    of each program checks the arguments, runs with `jax.jit` at its exact shape (one XLA
    compile, counted in `stats()["bridged_calls"]`) and compiles jdisc's program in a
    background thread; while that runs, a call at the same shapes runs the same `jax.jit`
    executable (counted too), and any other call runs jdisc's program, waiting for the compile.
    The first call then costs about one `jax.jit` first call instead of jdisc's compile, and
    calls after the compile are the same as without the bridge. Not bridged: a call inside a
    JAX trace, and a function this cache directory compiled before (its compile is then mostly
    a cache hit). Errors only jdisc's compile finds (an unsupported op, a failed C compile) are
    raised by the first call that waits for the compile.
    `strict=False` (the default): a call whose arrays have a new dtype or rank, or a new pytree
    structure, compiles a program of its own (counted in `stats()["compiles"]`), as `jax.jit`
    retraces; `strict=True`: such a call raises DtypeError / ShapeError / ArgumentError naming
    the argument, and the function only ever has one program per static arguments.
    `donate_argnums` / `donate_argnames`: as with jax.jit, the caller gives the buffers of these
    arguments away, and a donated jax.Array is deleted when jax.jit would delete it (a result of
    its size in bytes exists; using it then raises jax's "Array has been deleted"). When the
    memory plan proves it safe (a result of the same dtype and shape, written element by
    element after the last read of that element of the input) and the array is 1 MiB or more,
    the result is written into the donated buffer; otherwise the result is fresh. A donation
    with no result of its size, a numpy input, an array passed twice or with a numpy view of
    it, or a call inside a jax trace is left alone, without an error: that array stays valid.
    `jdisc.jit(f).explain(...)` lists the donations the plan uses.
    """
    donate_argnums = (donate_argnums,) if isinstance(donate_argnums, int) else \
        tuple(donate_argnums)
    donate_argnames = (donate_argnames,) if isinstance(donate_argnames, str) else \
        tuple(donate_argnames)
    if not all(isinstance(i, int) for i in donate_argnums) or \
            not all(isinstance(n, str) for n in donate_argnames):
        raise ArgumentError(f"donate_argnums must be ints and donate_argnames strings, got "
                            f"{donate_argnums!r} and {donate_argnames!r}")
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    if isinstance(static_argnames, str):
        static_argnames = (static_argnames,)

    def wrap(f: Callable) -> JdiscFunction:
        if donate_argnames:
            try:
                params = set(inspect.signature(f).parameters)
            except (TypeError, ValueError):
                params = set(donate_argnames)
            unknown = sorted(set(donate_argnames) - params)
            if unknown:
                raise ArgumentError(f"donate_argnames names {unknown}, which "
                                    f"{getattr(f, '__name__', 'the function')} does not take")
        overlap = sorted(set(donate_argnums) & set(static_argnums)) or \
            sorted(set(donate_argnames) & set(static_argnames))
        if overlap:
            raise ArgumentError(f"argument(s) {overlap} are both static and donated: a static "
                                f"argument has no buffer to donate")
        return JdiscFunction(f, dynamic_axes, constraints, static_argnums, static_argnames,
                             fallback, bridge, strict, donate_argnums, donate_argnames)

    return wrap if fun is None else wrap(fun)

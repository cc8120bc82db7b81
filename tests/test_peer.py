"""Peer suite: the StableHLO interpreter's own tests, run through `jdisc.compile_stablehlo`.

The cases live outside the repository, in `<repo>/../shared/peer` (or `$JDISC_PEER_DIR`); see its
README. Every trusted `args` and `dyn` case is compiled and run, and its outputs are checked with
the suite's own rules (`peer_cases.compare`), with `jax_enable_x64` on (the suite is full of
64-bit values). Without the folder the module is skipped.

A native crash (segfault, abort) in generated code must not take pytest down with it, so the cases
run in worker subprocesses. Each worker logs `start <id>` before a case and its result after it;
when a worker dies mid-case, that case is recorded as `crashed` and a new worker resumes after it.
A case still running after CASE_TIMEOUT_S seconds is killed and recorded as a failure (`hang`).

Tests (each prints passed / failed / skipped (by reason) per variant, the pass rate over
in-scope cases and every failing case grouped by cause, and fails when a case crashed or fewer
than 95% of the in-scope cases run pass):
* `test_peer_suite_sample`, the default tier: every third in-scope case in id order
  (`JDISC_PEER_EVERY`), the same ones every run;
* `test_peer_suite_target` (slow, opt-in): every case.

The workers run with `JDISC_SUBNORMALS=keep`: the suite's expected values keep subnormals as the
StableHLO spec does, where XLA:CPU and jdisc's default flush them to zero (in the default mode 12
ceil and floor cases of subnormal inputs differ, all as `jax.jit` computes them).

Environment: `JDISC_PEER_DIR` (the peer folder), `JDISC_PEER_REPORT` (write the summary there as
JSON), `JDISC_PEER_WORKERS` (worker processes; default: usable CPUs, at most 8).

Standalone: `python tests/test_peer.py [--filter SUBSTR] [--report PATH]` runs the same suite and
prints the summary; `--run` is the worker mode the harness itself uses.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import pytest

VARIANTS = ("args", "dyn")
TARGET_PASS_RATE = 0.95
CASE_TIMEOUT_S = 120.0
HERE = Path(__file__).resolve().parent
REPO = HERE.parent


# --------------------------------------------------------------------------- locating the cases

def find_peer_dir() -> Path | None:
    """`$JDISC_PEER_DIR` if set, else `<repo>/../shared/peer` (or `<repo>/shared/peer`, where a
    copy of the checkout carries it inside); None unless the folder holds peer_cases.py."""
    env = os.environ.get("JDISC_PEER_DIR")
    candidates = [Path(env)] if env else [REPO.parent / "shared" / "peer", REPO / "shared" / "peer"]
    for d in candidates:
        if (d / "peer_cases.py").is_file():
            return d.resolve()
    return None


def load_peer_cases(peer_dir: Path):
    """Import `peer_cases.py` from the peer folder by path (it is not a package on sys.path)."""
    name = "jdisc_peer_cases"
    path = peer_dir / "peer_cases.py"
    cached = sys.modules.get(name)
    if cached is not None and Path(cached.__file__).resolve() == path.resolve():
        return cached
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module          # dataclasses look their module up while it executes
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


PEER_DIR = find_peer_dir()
pytestmark = pytest.mark.skipif(
    PEER_DIR is None,
    reason="peer cases not found (set JDISC_PEER_DIR or provide <repo>/../shared/peer)")


# --------------------------------------------------------------------------- scope

def _op_pattern(*names: str) -> re.Pattern:
    """Matches `stablehlo.<name>` / `chlo.<name>`, pretty or generic ("stablehlo.<name>") form."""
    return re.compile(r"\b(?:stablehlo|chlo)\.(?:" + "|".join(names) + r")\b")


_COLLECTIVES = _op_pattern("all_reduce", "all_gather", "all_to_all", "reduce_scatter",
                           "collective_permute", "collective_broadcast", "partition_id",
                           "replica_id")
_COMMUNICATION = _op_pattern("send", "recv", "infeed", "outfeed")
_INTERPRETER_DEBUG = re.compile(r"\binterpreter\.(?:probe|print)\b|\bstablehlo\.print\b")
_LOW_BIT_INT = re.compile(r"[<x]u?i[24]>")              # tensor<4xi4>, tensor<ui2>, tensor<?xi4>
_SMALL_FLOAT = re.compile(r"\bf(?:8|6|4)E\d")            # f8E4M3FN, f6E2M3FN, f4E2M1FN, f8E8M0FNU
_SMALL_FLOAT_DTYPES = ("float8_", "float6_", "float4_")
_LOW_BIT_DTYPES = ("int4", "uint4", "int2", "uint2")


def out_of_scope_reason(case) -> str | None:
    """Why a case is outside what a single-device compiler is asked to run, or None.

    Decided from the module text and the input/output dtypes, first matching rule wins.
    """
    text = case.mlir
    dtypes = [str(a.dtype) for a in case.inputs] + [o.get("dtype", "") for o in case.outputs]
    if _COMMUNICATION.search(text):
        return "send / recv / infeed / outfeed"
    if "interpreter.run_parallel" in text or _COLLECTIVES.search(text):
        return "collectives / run_parallel (multi-device)"
    if _INTERPRETER_DEBUG.search(text):
        return "interpreter.probe / print"
    if "!quant." in text:
        return "quantized types"
    if _LOW_BIT_INT.search(text) or any(d in _LOW_BIT_DTYPES for d in dtypes):
        return "2- and 4-bit integers"
    if _SMALL_FLOAT.search(text) or any(d.startswith(_SMALL_FLOAT_DTYPES) for d in dtypes):
        return "f8 / f6 / f4 types"
    return None


# --------------------------------------------------------------------------- running one case

def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


_QUOTED_OP = re.compile(r"\bop '([^']+)'")
_DOTTED_NAME = re.compile(r"\b[a-z_]+(?:\.[a-z_0-9]+)+")


def _unsupported_items(message: str) -> list[tuple[str, str]]:
    """(op, line) for each problem an UnsupportedOpError lists, in order.

    The pass that checks support lists one `  <op> at <loc>: <reason>` line per op under a header;
    other raises are one line. The op is the quoted `op '...'` when there is one, else the first
    dotted name, else the words before ' at '.
    """
    lines = [ln.strip() for ln in message.strip().splitlines() if ln.strip()] or ["?"]
    if len(lines) > 1 and lines[0].startswith("jdisc cannot compile"):
        lines = lines[1:]
    items = []
    for line in lines:
        m = _QUOTED_OP.search(line)
        op = m.group(1) if m else None
        if op is None:
            m = _DOTTED_NAME.search(line)
            op = m.group(0) if m else re.split(r" at |;|:", line)[0].strip() or "?"
        items.append((op, line))
    return items


def _failure(cause: str, detail: str, **extra) -> dict:
    return {"status": "failed", "cause": cause, "detail": detail, **extra}


def classify_compile_error(exc: BaseException, jdisc) -> dict:
    """A failure of `compile_stablehlo`, as {status, cause (the group), detail}."""
    if isinstance(exc, jdisc.UnsupportedOpError):
        items = _unsupported_items(str(exc))
        ops = list(dict.fromkeys(op for op, _ in items))
        more = f" (also {', '.join(ops[1:])})" if len(ops) > 1 else ""
        return _failure(f"unsupported: {ops[0]}", f"unsupported: {items[0][1]}{more}",
                        unsupported_ops=ops)
    if isinstance(exc, jdisc.CompileError):
        # the first line says the C compiler failed; its first diagnostic says why
        diag = next((ln.strip() for ln in str(exc).splitlines()[1:]
                     if re.search(r"\berror\b", ln)), "")
        return _failure("compile error", f"compile error: {_first_line(exc)}"
                        + (f" {diag[:200]}" if diag else ""))
    if isinstance(exc, jdisc.JdiscError):
        name = type(exc).__name__
        return _failure(f"compile error: {name}", f"compile error: {name}: {_first_line(exc)}")
    return classify_exception(exc, "compile")


def classify_exception(exc: BaseException, phase: str) -> dict:
    name = type(exc).__name__
    return _failure(f"exception: {name} ({phase})", f"exception: {name}: {_first_line(exc)}",
                    traceback=traceback.format_exc(limit=-4))


def check_outputs(outs, case, compare) -> dict:
    """Compare every output with its expectation under the suite's rules."""
    import numpy as np
    outs = [np.asarray(o) for o in outs]
    if len(outs) != len(case.outputs):
        return _failure("wrong result (output count)",
                        f"wrong result ({len(outs)} outputs, expected {len(case.outputs)})")
    for k, (out, spec, exp) in enumerate(zip(outs, case.outputs, case.expected)):
        if exp is None and "expected_output" in spec:
            exp = outs[spec["expected_output"]]
        ok, why = compare(out, exp, spec)
        if not ok:
            kind = ("shape" if why.startswith("shape") else "dtype" if why.startswith("dtype")
                    else "values")
            return _failure(f"wrong result ({kind})", f"wrong result (output {k}: {why})")
    return {"status": "passed", "cause": "", "detail": ""}


def run_case(case, jdisc, compare) -> dict:
    """Compile and run one case; never raises (bar KeyboardInterrupt)."""
    t0 = time.perf_counter()
    try:
        fn = jdisc.compile_stablehlo(case.mlir)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:                   # SystemExit from a library must not escape
        result = classify_compile_error(exc, jdisc)
    else:
        try:
            outs = fn(*case.inputs)
            result = check_outputs(outs, case, compare)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            result = classify_exception(exc, "run")
    return {"id": case.id, "variant": case.variant, **result,
            "seconds": round(time.perf_counter() - t0, 3)}


# --------------------------------------------------------------------------- worker process

def worker_main(peer_dir: Path, ids_file: Path, log_file: Path) -> int:
    """Run the listed cases in this process, logging `start` and `result` lines (JSON) to log_file.

    Each line is flushed before the next step, so after a native crash the log shows which case
    was running.
    """
    import faulthandler
    faulthandler.enable()                           # a Python stack on stderr after a crash
    import jax
    # The suite is full of i64/f64 values; with x64 off, jax would canonicalise jdisc's 64-bit
    # result buffers to 32 bits when wrapping them as jax Arrays.
    jax.config.update("jax_enable_x64", True)
    import jdisc
    peer = load_peer_cases(peer_dir)
    wanted = set(json.loads(ids_file.read_text()))
    with open(log_file, "a", buffering=1) as log:
        for case in peer.iter_cases(variants=VARIANTS, trusted_only=True,
                                    name_filter=wanted.__contains__):
            log.write(json.dumps({"event": "start", "id": case.id}) + "\n")
            log.flush()
            result = run_case(case, jdisc, peer.compare)
            log.write(json.dumps({"event": "result", **result}) + "\n")
            log.flush()
    return 0


# --------------------------------------------------------------------------- guarded suite run

class _Worker:
    """Runs a list of case ids in successive subprocesses until each has a result."""

    def __init__(self, index: int, ids: list[str], variants: dict, ctx: dict):
        self.index, self.ids, self.variants, self.ctx = index, ids, variants, ctx
        self.results: dict[str, dict] = {}

    def run(self) -> dict[str, dict]:
        attempt = 0
        while True:
            remaining = [i for i in self.ids if i not in self.results]
            if not remaining:
                return self.results
            attempt += 1
            before = len(self.results)
            self._attempt(remaining, attempt)
            if len(self.results) == before:
                raise RuntimeError(f"peer worker {self.index} made no progress on attempt "
                                   f"{attempt}; see {self.ctx['tmp']}")

    def _attempt(self, ids: list[str], attempt: int) -> None:
        tmp: Path = self.ctx["tmp"]
        stem = tmp / f"worker{self.index}-{attempt}"
        ids_file, log_file = stem.with_suffix(".ids.json"), stem.with_suffix(".log.jsonl")
        err_file = stem.with_suffix(".stderr")
        ids_file.write_text(json.dumps(ids))
        cmd = [sys.executable, str(Path(__file__).resolve()), "--run",
               "--peer-dir", str(self.ctx["peer_dir"]), "--ids", str(ids_file),
               "--log", str(log_file)]
        with open(err_file, "wb") as err:
            proc = subprocess.Popen(cmd, cwd=REPO, env=self.ctx["env"], stdin=subprocess.DEVNULL,
                                    stdout=err, stderr=subprocess.STDOUT, start_new_session=True)
        reader = _LogReader(log_file)
        current, since, hung = None, time.monotonic(), False
        try:
            while True:
                rc = proc.poll()
                for rec in reader.new_records():
                    since = time.monotonic()
                    if rec["event"] == "start":
                        current = rec["id"]
                    else:
                        rec.pop("event")
                        self.results[rec["id"]] = rec
                        current = None
                if rc is not None:
                    break
                if time.monotonic() - since > CASE_TIMEOUT_S:
                    hung = True
                    break
                if self.ctx["stop"].is_set():
                    raise RuntimeError(f"peer worker {self.index} stopped: another worker failed")
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)     # the worker and its C compiler, if any
                proc.wait()
        rc = proc.returncode
        for rec in reader.new_records():                # lines written just before exit
            if rec["event"] == "result":
                rec.pop("event")
                self.results[rec["id"]] = rec
                if rec["id"] == current:
                    current = None
        tail = _tail(err_file)
        if current is not None:
            base = {"id": current, "variant": self.variants[current], "seconds": None}
            if hung:
                self.results[current] = {**base, **_failure(
                    "hang", f"hang: still running after {CASE_TIMEOUT_S:.0f} s (killed)")}
            else:
                how = _describe_exit(rc)
                self.results[current] = {**base, "status": "crashed", "cause": f"crashed ({how})",
                                         "detail": f"crashed: worker process {how}",
                                         "stderr_tail": tail}
        elif hung or rc != 0:
            how = f"stalled for {CASE_TIMEOUT_S:.0f} s" if hung else f"exited ({_describe_exit(rc)})"
            raise RuntimeError(f"peer worker {self.index} {how} outside any case:\n{tail}")


class _LogReader:
    """Reads complete JSON lines appended to a file by another process."""

    def __init__(self, path: Path):
        self.path, self.offset, self.partial = path, 0, b""

    def new_records(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self.partial + data
        *lines, self.partial = data.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]


def _describe_exit(rc: int | None) -> str:
    if rc is not None and rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def default_workers() -> int:
    if os.environ.get("JDISC_PEER_WORKERS"):
        return max(1, int(os.environ["JDISC_PEER_WORKERS"]))
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8))


def run_suite(peer_dir: Path, workers: int | None = None, name_filter=None,
              every: int = 1) -> dict:
    """Run every trusted args/dyn case (guarded against crashes), or every `every`-th of the
    in-scope ones in id order; return the summary dict."""
    import jdisc
    peer = load_peer_cases(peer_dir)
    t0 = time.perf_counter()
    records, variants, to_run = [], {}, []
    for case in peer.iter_cases(variants=VARIANTS, trusted_only=True, name_filter=name_filter):
        variants[case.id] = case.variant
        reason = out_of_scope_reason(case)
        if reason:
            records.append({"id": case.id, "variant": case.variant, "status": "skipped",
                            "cause": reason, "detail": reason, "seconds": 0.0})
        else:
            to_run.append(case.id)
    to_run = sorted(to_run)[::every]
    workers = max(1, min(workers or default_workers(), len(to_run) or 1))
    tmp = Path(tempfile.mkdtemp(prefix="jdisc-peer-"))
    env = dict(os.environ)
    env["JDISC_CACHE_DIR"] = str(tmp / "cache")           # fresh: every case really compiles
    # the interpreter's expected values keep subnormals (IEEE, as the spec says); XLA:CPU, and
    # jdisc by default, flush them (ceil of the smallest subnormal is 0 there, not 1): the
    # cases run in jdisc's IEEE mode, which this suite then covers too
    env["JDISC_SUBNORMALS"] = "keep"
    jdisc_root = str(Path(jdisc.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (jdisc_root, env.get("PYTHONPATH")) if p)
    ctx = {"tmp": tmp, "peer_dir": peer_dir, "env": env, "stop": threading.Event()}
    pool = concurrent.futures.ThreadPoolExecutor(workers)
    try:
        shards = [_Worker(k, to_run[k::workers], variants, ctx) for k in range(workers)]
        futures = [pool.submit(w.run) for w in shards]
        for f in futures:
            records.extend(f.result().values())
    except BaseException:
        ctx["stop"].set()           # Ctrl-C or a harness error: kill the other workers too
        raise
    finally:
        pool.shutdown(wait=True)
        shutil.rmtree(tmp, ignore_errors=True)
    records.sort(key=lambda r: r["id"])
    return summarize(records, peer_dir, workers, time.perf_counter() - t0, jdisc.__version__,
                     every)


# --------------------------------------------------------------------------- summary

def _counts(records: list[dict]) -> dict:
    c = collections.Counter(r["status"] for r in records)
    in_scope = c["passed"] + c["failed"] + c["crashed"]
    return {"cases": len(records), "in_scope": in_scope, "passed": c["passed"],
            "failed": c["failed"], "crashed": c["crashed"], "skipped": c["skipped"],
            "pass_rate": round(c["passed"] / in_scope, 4) if in_scope else None}


def summarize(records: list[dict], peer_dir: Path, workers: int, seconds: float,
              version: str, every: int = 1) -> dict:
    failing = [r for r in records if r["status"] in ("failed", "crashed")]
    skipped = [r for r in records if r["status"] == "skipped"]
    unsupported = collections.Counter(op for r in failing for op in r.get("unsupported_ops", ()))
    # crashes first (they fail the summary test), then the most common causes
    by_cause = sorted(collections.Counter(r["cause"] for r in failing).items(),
                      key=lambda kv: (kv[0].startswith("crashed") is False, -kv[1], kv[0]))
    return {
        "peer_dir": str(peer_dir), "jdisc_version": version, "variants": list(VARIANTS),
        "workers": workers, "seconds": round(seconds, 1), "every": every,
        "totals": _counts(records),
        "per_variant": {v: _counts([r for r in records if r["variant"] == v]) for v in VARIANTS},
        "skipped_by_reason": dict(collections.Counter(r["cause"] for r in skipped).most_common()),
        "failures_by_cause": dict(by_cause),
        "unsupported_ops_named": dict(unsupported.most_common()),
        "cases": records,
    }


def format_summary(s: dict, list_failures: bool = True) -> str:
    t = s["totals"]
    rate = lambda c: "-" if c["pass_rate"] is None else f"{100 * c['pass_rate']:.1f}%"
    lines = [f"jdisc peer suite ({s['peer_dir']}, trusted {'+'.join(s['variants'])} cases): "
             f"{t['cases']} cases in {s['seconds']:.0f} s with {s['workers']} worker(s)"
             + (f", one in {s['every']} in-scope cases run" if s.get("every", 1) > 1 else ""),
             f"  {'variant':8} {'in scope':>8} {'passed':>7} {'failed':>7} {'crashed':>8} "
             f"{'skipped':>8} {'pass rate':>10}"]
    for name, c in [*s["per_variant"].items(), ("total", t)]:
        lines.append(f"  {name:8} {c['in_scope']:8} {c['passed']:7} {c['failed']:7} "
                     f"{c['crashed']:8} {c['skipped']:8} {rate(c):>10}")
    lines.append(f"  target: >= {100 * TARGET_PASS_RATE:.0f}% of in-scope cases pass")
    lines.append("skipped by reason:")
    for reason, n in s["skipped_by_reason"].items():
        per = collections.Counter(r["variant"] for r in s["cases"] if r["cause"] == reason)
        lines.append(f"  {n:4}  {reason}  ({', '.join(f'{v} {per[v]}' for v in s['variants'])})")
    lines.append("failures by cause:")
    for cause, n in s["failures_by_cause"].items():
        lines.append(f"  {n:4}  {cause}")
    if s["unsupported_ops_named"]:
        lines.append("ops named by UnsupportedOpError (cases naming each, any position):")
        lines.append("  " + ", ".join(f"{op} {n}" for op, n in s["unsupported_ops_named"].items()))
    if list_failures:
        lines.append("failing cases, by cause:")
        failing = collections.defaultdict(list)
        for r in s["cases"]:
            if r["status"] in ("failed", "crashed"):
                failing[r["cause"]].append(r)
        for cause in s["failures_by_cause"]:
            lines.append(f"  [{cause}]")
            for r in failing[cause]:
                detail = r["detail"] if r["detail"] != cause else ""
                lines.append(f"    {r['id']}" + (f": {detail}" if detail else ""))
    return "\n".join(lines)


def write_report(summary: dict) -> None:
    path = os.environ.get("JDISC_PEER_REPORT")
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(summary, indent=1) + "\n")


# --------------------------------------------------------------------------- tests

SAMPLE_EVERY = int(os.environ.get("JDISC_PEER_EVERY", "3"))


@pytest.fixture(scope="module")
def peer_summary() -> dict:
    summary = run_suite(PEER_DIR)
    write_report(summary)
    return summary


@pytest.fixture(scope="module")
def peer_sample() -> dict:
    return run_suite(PEER_DIR, every=SAMPLE_EVERY)


def _check(summary: dict, capsys) -> None:
    with capsys.disabled():
        print("\n" + format_summary(summary), flush=True)
    crashed = [r for r in summary["cases"] if r["status"] == "crashed"]
    assert not crashed, (
        f"{len(crashed)} case(s) crashed the worker process (a native crash in jdisc):\n"
        + "\n".join(f"  {r['id']}: {r['detail']}\n{r.get('stderr_tail', '')}" for r in crashed))
    rate = summary["totals"]["pass_rate"] or 0.0
    assert rate >= TARGET_PASS_RATE, (
        f"peer suite pass rate {100 * rate:.1f}% < target {100 * TARGET_PASS_RATE:.0f}%\n"
        + format_summary(summary, list_failures=False))


def test_peer_suite_sample(peer_sample, capsys):
    """The default tier: every SAMPLE_EVERY-th in-scope case (JDISC_PEER_EVERY, default 3; the
    same cases every run), no crash and the target pass rate."""
    _check(peer_sample, capsys)


@pytest.mark.slow
def test_peer_suite_target(peer_summary, capsys):
    """Every case: no crash and the target pass rate (the summary, with every failing case)."""
    _check(peer_summary, capsys)


# --------------------------------------------------------------------------- command line

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="store_true", help="worker mode (used by the harness)")
    ap.add_argument("--peer-dir", type=Path, default=PEER_DIR)
    ap.add_argument("--ids", type=Path, help="worker mode: JSON list of case ids to run")
    ap.add_argument("--log", type=Path, help="worker mode: JSON-lines progress log to append to")
    ap.add_argument("--filter", help="only case ids containing this substring")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--report", type=Path, help="write the summary JSON here")
    args = ap.parse_args(argv)
    if args.peer_dir is None:
        print("peer cases not found (set JDISC_PEER_DIR)", file=sys.stderr)
        return 2
    if args.run:
        return worker_main(args.peer_dir, args.ids, args.log)
    name_filter = (lambda cid: args.filter in cid) if args.filter else None
    summary = run_suite(args.peer_dir, args.workers, name_filter)
    print(format_summary(summary))
    if args.report:
        args.report.write_text(json.dumps(summary, indent=1) + "\n")
    write_report(summary)
    return 1 if summary["totals"]["crashed"] else 0


if __name__ == "__main__":
    sys.exit(main())

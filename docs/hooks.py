"""mkdocs hooks: the performance page's tables and plots, made from benchmarks/results/*.json at
build time, so that no number on it is typed by hand.

A page line `<!-- results: KIND FILE [FILE ...] -->` becomes what the benchmark script's own
table printer writes for those result files:

    bench      `jdisc bench --json` files: each workload's table and summary, W7's table
               (a text block)
    compile    benchmarks/compile_time.py files (a markdown table, one column per file)
    units      benchmarks/unit_compile_times.py files (a markdown table, one row per file)
    spectral   benchmarks/spectral_linalg.py files (a markdown table with geomeans)
    tree       benchmarks/tree_search.py files (a markdown table with geomeans)
    transposes benchmarks/transposes.py files (a markdown table, one column per file)
    first_call benchmarks/first_call.py files (a text block per file)
    captured   benchmarks/captured_weights.py files (a text block per file)
    interop    benchmarks/interop.py files (a text block per file)
    zoo        benchmarks/zoo_speed.py files (a markdown table and summary per file)
    decode     benchmarks/decode.py files (W7's table, a text block per file)
    machine    the machine, date and load lines of `jdisc bench` files (a list)
    printed    Markdown a script printed, saved as it was (benchmarks/row_reductions.py)

and `<!-- plot: FILE NAME.png -->` shows jdisc.bench.plot's latency-vs-shape plot of a
`jdisc bench` file, drawn into the site as NAME.png (pages at the docs' top level only).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import shlex
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MARK = re.compile(r"^<!-- (results|plot): (.+?) -->$", re.M)


def _script(name: str):
    spec = importlib.util.spec_from_file_location(
        f"_bench_{name}", os.path.join(ROOT, "benchmarks", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _printed(fn, *args) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fn(*args)
    return out.getvalue().rstrip("\n")


def _bench(paths: list[str]) -> str:
    from jdisc.bench import print_table
    parts = []
    for p in paths:
        data = json.load(open(p))
        text = "\n".join(_printed(print_table, name, res).lstrip("\n")
                         for name, res in data["workloads"].items())
        if "W7" in data:      # the decode loop (jdisc/bench/decode.py)
            from jdisc.bench.decode import print_decode
            text = "\n\n".join(t for t in (text, _printed(print_decode, data["W7"])) if t)
        parts.append(f"`{os.path.relpath(p, ROOT)}`:\n\n```text\n{text}\n```")
    return "\n\n".join(parts)


def _machine(paths: list[str]) -> str:
    from jdisc.bench import machine_line
    lines = []
    for p in paths:
        data = json.load(open(p))
        load = data.get("load_samples") or []
        load_text = f"; load average {min(load):.2f}-{max(load):.2f}" if load else ""
        lines.append(f"- `{os.path.relpath(p, ROOT)}`: {machine_line(data['machine'])}"
                     f"{load_text}; {len(data['shapes'])} shapes, {data['repeats']} repeats")
    return "\n".join(lines)


def _paragraphs(text: str) -> str:
    """A blank line wherever a Markdown table starts or ends (a script prints none there)."""
    out: list[str] = []
    for line in text.strip().splitlines():
        if out and out[-1] and out[-1].startswith("|") != line.startswith("|"):
            out.append("")
        out.append(line)
    return "\n".join(out)


def _results(kind: str, paths: list[str]) -> str:
    if kind == "bench":
        return _bench(paths)
    if kind == "machine":
        return _machine(paths)
    if kind == "printed":
        return "\n\n".join(f"`{os.path.relpath(p, ROOT)}`:\n\n{_paragraphs(open(p).read())}"
                             for p in paths)
    if kind == "compile":
        return _printed(_script("compile_time").print_table, paths)
    if kind == "units":
        return _printed(_script("unit_compile_times").print_table, paths)
    if kind == "kernels":
        return _paragraphs(_printed(_script("kernel_times").print_table, paths))
    if kind == "spectral":
        return _printed(_script("spectral_linalg").print_table, paths)
    if kind == "tree":
        return _printed(_script("tree_search").print_table, paths)
    if kind == "zoo":
        with contextlib.chdir(ROOT):     # the tables name the files from the repository root
            return _paragraphs(_printed(_script("zoo_speed").main, ["--table", *paths]))
    if kind == "transposes":
        return _printed(_script("transposes").print_table, paths)
    if kind in ("first_call", "captured"):
        script = _script("first_call" if kind == "first_call" else "captured_weights")
        with contextlib.chdir(ROOT):     # the tables name the files from the repository root
            return "\n\n".join(
                f"```text\n{_printed(script.main, ['--table', os.path.relpath(p, ROOT)])}\n```"
                for p in paths)
    if kind == "decode":
        from jdisc.bench.decode import print_decode
        return "\n\n".join(f"`{os.path.relpath(p, ROOT)}`:\n\n```text\n"
                             f"{_printed(print_decode, json.load(open(p)))}\n```" for p in paths)
    if kind == "interop":
        script = _script("interop")
        blocks = []
        for p in paths:
            d = json.load(open(p))
            text = _printed(script.print_report, d["machine"], d["overhead"], d["training"])
            blocks.append(f"`{os.path.relpath(p, ROOT)}`:\n\n```text\n{text.strip()}\n```")
        return "\n\n".join(blocks)
    raise ValueError(f"docs/hooks.py: unknown results kind {kind!r}")


def on_files(files, config):
    """Draw every plot a page asks for, as a generated file of the site."""
    from mkdocs.structure.files import File
    from jdisc.bench.plot import plot_latency
    for page in files.documentation_pages():
        for kind, args in _MARK.findall(page.content_string):
            if kind != "plot":
                continue
            src, name = shlex.split(args)
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, name)
                plot_latency(json.load(open(os.path.join(ROOT, src)))["workloads"], path,
                             title=src)
                content = open(path, "rb").read()
            files.append(File.generated(config, name, content=content))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    def replace(m: re.Match) -> str:
        words = shlex.split(m.group(2))
        if m.group(1) == "plot":
            return f"![jdisc and XLA median latency at each shape, from `{words[0]}`]({words[1]})"
        return _results(words[0], [os.path.join(ROOT, w) for w in words[1:]])
    return _MARK.sub(replace, markdown)

"""`jdisc bench --plot OUT.png`: latency against shape, jdisc and XLA, one panel per workload.

matplotlib is an optional extra (`pip install 'jdisc[plot]'`); it is imported only here.
"""

from __future__ import annotations

from jdisc.bench.workloads import BenchError, shape_label


def check_matplotlib() -> None:
    """Fail before a long benchmark run, not after it, when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise BenchError("--plot needs matplotlib: pip install 'jdisc[plot]'") from None


def plot_latency(results: dict, path: str, title: str = "") -> None:
    """One panel per workload: median latency (ms, log scale) of jdisc and XLA at each shape,
    shapes in the benchmark's order (by B*S), labelled as in the tables."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(4.5 * len(results), 4), squeeze=False)
    for ax, (name, res) in zip(axes[0], results.items()):
        rows = res["rows"]
        xs = range(len(rows))
        ax.plot(xs, [r["jdisc_ms"] for r in rows], "o-", label="jdisc (one compile)")
        ax.plot(xs, [r["xla_ms"] for r in rows], "s--", label="XLA (a compile per shape)")
        ax.set_xticks(list(xs), [shape_label(name, r["B"], r["S"]) for r in rows], rotation=45,
                      ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_title(f"{name}: {res['description']}", fontsize=9)
        ax.set_xlabel("shape")
        ax.set_ylabel("median latency, ms")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

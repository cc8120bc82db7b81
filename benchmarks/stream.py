"""Dynamic-shape stream benchmark on the built-in workloads: jdisc against jax.jit.

    python benchmarks/stream.py [--workloads W1,W2,W3,W4] [--shapes 10] [--repeats 7] [--quick]
                                [--json OUT.json] [--plot OUT.png] [--seed 0]

The same as the installed command `jdisc bench`; the benchmark itself is jdisc/bench/__init__.py (see its
docstring for what is measured and how). benchmarks/control_flow.py uses its helpers from here.
"""

from jdisc.bench import (add_run_arguments, fresh_cache_dir, geomean, log,  # noqa: F401
                         machine_info, machine_line, main, max_abs_diff, timed, warm_up)

if __name__ == "__main__":
    main()

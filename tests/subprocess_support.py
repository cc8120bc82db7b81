"""Running jdisc in a fresh process: `python -m jdisc ...` or a `python -c` script, with this
checkout first on the path and the test session's (or a given) cache directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def env_with(**extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in (extra.pop("PYTHONPATH", ""),)
                                                        if p])
    env.update(extra)
    return env


def run_python(code: str, *args: str, cwd=None, timeout: float = 300, **env: str
               ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=cwd,
                          env=env_with(**env), capture_output=True, text=True, timeout=timeout)


def run_jdisc(*args: str, cwd=None, timeout: float = 300, **env: str
              ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jdisc", *map(str, args)], cwd=cwd,
                          env=env_with(**env), capture_output=True, text=True, timeout=timeout)


def start_jdisc(*args: str, cwd=None, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jdisc", *map(str, args)], cwd=cwd,
                            env=env_with(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def error_line(proc: subprocess.CompletedProcess, command: str) -> str:
    """The one-line reason of a failed command (asserting that it failed that way)."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"jdisc {command}: error: "), proc.stderr
    return lines[0]

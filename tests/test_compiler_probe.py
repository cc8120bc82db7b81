"""The C compiler probes (custom_calls/probe.py): a miscompiling compiler gets its workaround
flag, a correct one gets none, and the verdict is cached on disk."""

import os

from jdisc.custom_calls import compiler, probe

_WRONG = '#include <stdio.h>\nint main(void) { printf("wrong\\n"); return 0; }\n'
_RIGHT = '#include <stdio.h>\nint main(void) { printf("ok\\n"); return 0; }\n'


def test_probe_verdicts_and_cache(tmp_path, monkeypatch):
    cc = compiler.compiler_command()
    monkeypatch.setattr(probe, "_verdicts", {})
    monkeypatch.setattr(probe, "PROBES", [("bad", _WRONG, ["-fno-fix-me"]),
                                          ("good", _RIGHT, ["-fnever"])])
    flags = probe.workaround_flags(cc, ["-O2"], "id", "host", str(tmp_path))
    assert flags == ["-fno-fix-me"]
    (entry,) = os.listdir(tmp_path / "probes")
    # a second process reads the verdict instead of probing again
    monkeypatch.setattr(probe, "_verdicts", {})
    monkeypatch.setattr(probe, "PROBES", [])
    assert probe.workaround_flags(cc, ["-O2"], "id", "host", str(tmp_path)) == ["-fno-fix-me"]
    # another compiler identity is probed afresh
    assert probe.workaround_flags(cc, ["-O2"], "id2", "host", str(tmp_path)) == []


def test_real_lane_loop_probe_passes_with_the_flags_jdisc_uses(tmp_path):
    # whatever this machine's compiler is, the flags jdisc compiles with make the probe right
    cc = compiler.compiler_command()
    cflags, _ = compiler._flag_parts(False)
    assert probe._run_probes(cc, cflags) == []

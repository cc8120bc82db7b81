"""Release hygiene: one version, written in jdisc/version.py, that the installed metadata, the
generated C and the changelog agree on."""

from __future__ import annotations

import importlib.metadata
import pathlib
import re

import jdisc
from jdisc import version

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_version_is_written_once():
    assert jdisc.__version__ == version.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|rc\d+)?", jdisc.__version__)
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject
    assert 'version = {attr = "jdisc.version.__version__"}' in pyproject
    assert not re.search(r'^version\s*=\s*"', pyproject, re.M), "a second version string"


def test_installed_metadata_has_the_version():
    assert importlib.metadata.version("jdisc") == jdisc.__version__


def test_the_changelog_has_an_entry_for_the_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert releases[0] == "Unreleased" or releases[0] == jdisc.__version__, releases
    assert jdisc.__version__ in releases, f"no CHANGELOG.md entry for {jdisc.__version__}"
    dated = re.findall(r"^## \[(\d[^\]]*)\] - (\d{4}-\d{2}-\d{2})$", text, re.M)
    assert [v for v, _ in dated] == [r for r in releases if r != "Unreleased"], \
        "every release entry has a date"

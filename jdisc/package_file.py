"""The on-disk form of a jdisc package: one zip file (suggested suffix `.jdisc`).

    manifest.json    format and versions (jdisc, jax, jaxlib); the symbolic signature (flat
                     named inputs and outputs, dtypes, dimension names, constraints, pytree
                     structure); the target the library was built for; SHA-256 and size of
                     every other member
    stablehlo.vhlo   the program as a StableHLO portable artifact (VHLO bytecode)
    kernel.c         the generated C (kernels and host launcher)
    lib.so           that C compiled for the target in the manifest
    params.npz       arrays baked in with `bake_params` (numpy's format, read without pickle)
    data.bin         the library's data section: constants of the program larger than 1 KiB
                     (lowering/data.py), when it has any

One file rather than a directory: a model is shipped by copying one thing; it is written to a
temporary file and renamed over the destination, so a reader never sees half of it (a directory
cannot be replaced atomically); and nothing outside the manifest can sit beside the members.

Reading checks everything before anything is used: the file must be a complete zip (a
truncated one is not: its directory is at the end), the manifest's format and jdisc release
series must be this jdisc's, the members must be exactly those the manifest lists, and each
must have the recorded size and SHA-256. The hashes guard against corruption, not against a
malicious author, who can write a consistent manifest: a package runs native code, so load only
packages from sources you trust.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import zipfile
from typing import Any

import jax

from jdisc.errors import PackageError
from jdisc.version import __version__

FORMAT = "jdisc-package"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
_EPOCH = (1980, 1, 1, 0, 0, 0)   # fixed member times: the same package is the same bytes


def series(version: str) -> tuple[str, ...]:
    """The release series packages are compatible within: major.minor."""
    return tuple(version.split(".")[:2])


def write(path: str | os.PathLike, manifest: dict, members: dict[str, bytes]) -> dict:
    """Record each member's hash and size in the manifest and write the package atomically;
    returns the manifest written."""
    manifest = dict(manifest, members={
        name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        for name, data in sorted(members.items())})
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf:
                for name, data in [(MANIFEST, json.dumps(manifest, indent=1).encode())] + sorted(
                        members.items()):
                    info = zipfile.ZipInfo(name, _EPOCH)
                    info.external_attr = 0o644 << 16
                    info.compress_type = zipfile.ZIP_DEFLATED
                    zf.writestr(info, data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())     # mkstemp made it 0600: give the usual mode
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return manifest


def read(path: str | os.PathLike) -> tuple[dict, dict[str, bytes]]:
    """(manifest, members) of a package, every member verified; PackageError otherwise."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise PackageError(f"{path} is a directory; a jdisc package is one file "
                           f"(written by pkg.save or `jdisc compile`)")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise PackageError(f"cannot read package {path}: {err.strerror or err}") from None
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, EOFError, ValueError) as err:
        raise PackageError(f"{path} is not a complete jdisc package (truncated, or not a "
                           f"package at all): {err}") from None
    with zf:
        manifest = _read_manifest(zf, path)
        check_compatible(manifest, path)
        listed = manifest.get("members")
        if not isinstance(listed, dict):
            raise PackageError(f"{path}: the manifest lists no members")
        present = set(zf.namelist()) - {MANIFEST}
        if present != set(listed):
            extra, missing = sorted(present - set(listed)), sorted(set(listed) - present)
            raise PackageError(f"{path}: members do not match the manifest (not listed: "
                               f"{extra or 'none'}; missing: {missing or 'none'})")
        members = {name: _read_member(zf, name, info, path) for name, info in listed.items()}
    return manifest, members


def _read_manifest(zf: zipfile.ZipFile, path: str) -> dict:
    try:
        manifest = json.loads(zf.read(MANIFEST))
    except KeyError:
        raise PackageError(f"{path} has no {MANIFEST}: not a jdisc package") from None
    except (zipfile.BadZipFile, EOFError, ValueError, OSError) as err:
        raise PackageError(f"{path}: its {MANIFEST} is damaged: {err}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise PackageError(f"{path}: {MANIFEST} does not describe a jdisc package")
    return manifest


def check_compatible(manifest: dict, path: str) -> None:
    """Same package format and the same jdisc release series (major.minor), else refuse."""
    version = str(manifest.get("jdisc", "unknown"))
    if manifest.get("format_version") != FORMAT_VERSION or series(version) != series(__version__):
        raise PackageError(
            f"{path} was written by jdisc {version} (package format "
            f"{manifest.get('format_version')}); this is jdisc {__version__} (format "
            f"{FORMAT_VERSION}), which loads packages of jdisc {'.'.join(series(__version__))}.x "
            f"only. Export the model again with this jdisc, or load it with jdisc {version}.")


def _read_member(zf: zipfile.ZipFile, name: str, info: Any, path: str) -> bytes:
    try:
        size, digest = int(info["size"]), str(info["sha256"])
    except (TypeError, KeyError, ValueError):
        raise PackageError(f"{path}: the manifest's entry for {name} is malformed") from None
    if zf.getinfo(name).file_size != size:
        raise PackageError(f"{path}: member {name} is {zf.getinfo(name).file_size} bytes, the "
                           f"manifest says {size}; the package is damaged")
    try:
        data = zf.read(name)
    except (zipfile.BadZipFile, EOFError, ValueError, OSError) as err:
        raise PackageError(f"{path}: member {name} is damaged: {err}") from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise PackageError(f"{path}: member {name} has SHA-256 {actual[:16]}..., the manifest "
                           f"says {digest[:16]}...; the package is damaged or was modified, and "
                           f"nothing from it was loaded")
    return data


# ---------------------------------------------------------------------------------------------
# Pytree structure, as JSON: ["leaf"], ["none"], ["tuple", [...]], ["list", [...]],
# ["dict", [keys], [...]]. Other node types (namedtuples, dataclasses, custom nodes) are not
# stored: such a package takes and returns flat named leaves.


def encode_tree(treedef: Any) -> list | None:
    if treedef is None:
        return None
    data = treedef.node_data()
    if data is None:
        return ["leaf"]
    kind, meta = data
    children = [encode_tree(c) for c in treedef.children()]
    if any(c is None for c in children):
        return None
    if kind is type(None):
        return ["none"]
    if kind in (tuple, list):
        return [kind.__name__, children]
    if kind is dict and all(isinstance(k, (str, int)) for k in meta):
        return ["dict", list(meta), children]
    return None


def decode_tree(spec: list | None) -> Any:
    """The PyTreeDef `encode_tree` described, or None."""
    return None if spec is None else jax.tree_util.tree_structure(_example(spec))


def _example(spec: list) -> Any:
    kind = spec[0]
    if kind == "leaf":
        return 0
    if kind == "none":
        return None
    if kind in ("tuple", "list"):
        items = [_example(c) for c in spec[1]]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        return {k: _example(c) for k, c in zip(spec[1], spec[2])}
    raise PackageError(f"unknown pytree node {kind!r} in the manifest")


def _umask() -> int:
    """The process's umask (reading it means setting it; set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask

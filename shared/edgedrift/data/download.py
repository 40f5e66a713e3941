"""Data files from a local data directory, a cache, or a verified download of the public original.

Files are looked up in a local data directory first (``EDGEDRIFT_DATA_DIR``, e.g. the shared test data),
then in a download cache (``EDGEDRIFT_CACHE_DIR`` or ``~/.cache/edgedrift``), and only then downloaded from
the public original, verified against a SHA-256 (when one is known) so that every run sees the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

__all__ = ["ChecksumError", "cache_dir", "data_dir", "fetch", "file_sha256", "resolve_source"]

_DOWNLOAD_TIMEOUT_S = 60.0
_CHUNK = 1 << 20
_PROGRESS_EVERY = 4 << 20
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class ChecksumError(ValueError):
    """A file's SHA-256 differs from the expected one."""


def data_dir() -> Path | None:
    """The local data directory from ``EDGEDRIFT_DATA_DIR``, or None when the variable is unset/empty."""
    value = os.environ.get("EDGEDRIFT_DATA_DIR", "")
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"EDGEDRIFT_DATA_DIR={value!r} is not an existing directory")
    return path


def cache_dir() -> Path:
    """The download cache: ``EDGEDRIFT_CACHE_DIR`` or ``~/.cache/edgedrift`` (created on first download)."""
    value = os.environ.get("EDGEDRIFT_CACHE_DIR", "")
    return Path(value).expanduser() if value else Path.home() / ".cache" / "edgedrift"


def _env_key(name: str) -> str:
    return "EDGEDRIFT_" + re.sub(r"[^A-Z0-9]", "_", name.upper())


def resolve_source(name: str, url: str, sha256: str | None) -> tuple[str, str | None]:
    """URL and checksum after the ``EDGEDRIFT_<NAME>_URL`` / ``EDGEDRIFT_<NAME>_SHA256`` overrides."""
    key = _env_key(name)
    url = os.environ.get(f"{key}_URL") or url
    override = os.environ.get(f"{key}_SHA256")
    if override:
        sha256 = override
    if sha256 is not None:
        sha256 = sha256.strip().lower()
        if not _SHA256_RE.match(sha256):
            raise ValueError(f"{name}: expected SHA-256 must be 64 hex digits, got {sha256!r}")
    return url, sha256


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _checksum_error(name: str, where: str, expected: str, actual: str) -> ChecksumError:
    return ChecksumError(f"{name}: SHA-256 mismatch for {where}: expected {expected}, got {actual}")


def _download(name: str, url: str, dest: Path, sha256: str | None) -> None:
    """Stream ``url`` to a temporary file next to ``dest``, verify it, then atomically move it into place."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        h = hashlib.sha256()
        done = 0
        next_report = _PROGRESS_EVERY
        print(f"edgedrift: downloading {name} from {url}", file=sys.stderr)
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=_DOWNLOAD_TIMEOUT_S) as resp:
                    length = resp.headers.get("Content-Length")
                    total = f" of {int(length) / 1e6:.1f} MB" if length and length.isdigit() else ""
                    while chunk := resp.read(_CHUNK):
                        out.write(chunk)
                        h.update(chunk)
                        done += len(chunk)
                        if done >= next_report:
                            print(f"edgedrift: {name}: {done / 1e6:.1f} MB{total}", file=sys.stderr)
                            next_report += _PROGRESS_EVERY
            except (urllib.error.URLError, OSError) as exc:
                raise OSError(
                    f"{name}: download from {url} failed: {exc}. Put {dest.name} into EDGEDRIFT_DATA_DIR "
                    f"or {dest.parent}, or point {_env_key(name)}_URL at a reachable copy."
                ) from exc
        actual = h.hexdigest()
        if sha256 is not None and actual != sha256:
            raise _checksum_error(name, f"download from {url}", sha256, actual)
        os.replace(tmp, dest)
        print(f"edgedrift: {name}: {done / 1e6:.1f} MB saved to {dest} (sha256 {actual})", file=sys.stderr)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def fetch(name: str, url: str, sha256: str | None, filename: str) -> Path:
    """Path of data file ``filename``: from ``data_dir()``, else the cache, else downloaded into the cache.

    The SHA-256 (when known) is checked wherever the file comes from; a download is verified before it is
    moved into the cache, so a failed or corrupted download never leaves a file behind. A corrupted cached
    file is replaced by a fresh download. ``EDGEDRIFT_<NAME>_URL`` and ``EDGEDRIFT_<NAME>_SHA256`` override
    ``url`` and ``sha256`` (e.g. for a mirror or a local test server).
    """
    url, sha256 = resolve_source(name, url, sha256)
    local = data_dir()
    if local is not None and (local / filename).is_file():
        path = local / filename
        if sha256 is not None and (actual := file_sha256(path)) != sha256:
            raise _checksum_error(name, str(path), sha256, actual)
        return path
    cached = cache_dir() / name / filename
    if cached.is_file():
        if sha256 is None or (actual := file_sha256(cached)) == sha256:
            return cached
        print(
            f"edgedrift: {name}: cached {cached} has sha256 {actual}, expected {sha256}; downloading again",
            file=sys.stderr,
        )
        cached.unlink()
    _download(name, url, cached, sha256)
    return cached

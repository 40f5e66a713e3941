"""EdgeDrift learning core: the code both the edge agent and the cloud trainer run."""

from importlib.metadata import PackageNotFoundError, version

try:
    #: The installed version, read from the package metadata (its one source is ``shared/VERSION``).
    __version__ = version("edgedrift-core")
except PackageNotFoundError:  # a source tree on sys.path without an install
    __version__ = "0+unknown"

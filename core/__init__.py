"""lexkeep core: data model, DuckDB store, trace readers, identifier extraction."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("lexkeep")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0.0.0+unknown"

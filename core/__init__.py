"""lexkeep core: data model, DuckDB store, trace readers, identifier extraction."""

# Written out, not read with importlib.metadata at import: that costs ~15 ms at the start of
# every command. tests/test_cli_help.py checks it against pyproject.toml.
__version__ = "0.1.0"

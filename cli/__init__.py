"""lexkeep command line: thin Typer commands over the library.

The command modules evaluate their annotations when they are defined (no
`from __future__ import annotations`): Typer reads every command's parameters at each start,
and resolving postponed annotations cost ~11 ms of it.
"""

"""Print a digest of every table of a lexkeep store, to show that two ingests stored the same.

    python benchmarks/store_digest.py STORE.duckdb [--per-table]

Every table of the `main` schema is read in a canonical order (`ORDER BY ALL` over the kept
columns, the table names sorted) and each row's values are hashed (SHA-256 over their
`repr`, lists and JSON as DuckDB's text of them). The schema is hashed too: each table's
`CREATE` statement, its constraints and indexes, so a store whose keys were built otherwise
differs. Left out, because two ingests of the same files must differ there:

- `ingest_runs.started_at`: when the ingest ran;
- `schema_migrations.applied_at`: when the store was created.

Ids from sequences (`ingest_runs.id`) are kept: they are numbered in ingest order, not drawn
at random. `--per-table` prints each table's row count and digest too, to find where two
stores differ. The store is opened read-only.
"""

from __future__ import annotations

import argparse
import hashlib
import sys

import duckdb

# Columns that must differ between two ingests of the same files (see the module docstring).
EXCLUDED = {"ingest_runs": ("started_at",), "schema_migrations": ("applied_at",)}


def table_digests(path: str) -> list[tuple[str, int, str]]:
    """(table, rows, hex digest) for every table of the store at `path`, and a `schema` row."""
    con = duckdb.connect(path, read_only=True)
    try:
        out: list[tuple[str, int, str]] = []
        schema = hashlib.sha256()
        for query in (
            "SELECT table_name, sql FROM duckdb_tables() WHERE schema_name = 'main' ORDER BY 1",
            "SELECT table_name, constraint_type, constraint_text FROM duckdb_constraints()"
            " WHERE schema_name = 'main' ORDER BY ALL",
            "SELECT table_name, index_name, sql FROM duckdb_indexes()"
            " WHERE schema_name = 'main' ORDER BY ALL",
        ):
            for row in con.execute(query).fetchall():
                schema.update(repr(row).encode())
        out.append(("(schema)", 0, schema.hexdigest()))
        tables = [
            name
            for (name,) in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' ORDER BY 1"
            ).fetchall()
        ]
        for table in tables:
            columns = [
                (name, dtype)
                for name, dtype in con.execute(
                    "SELECT column_name, data_type FROM duckdb_columns()"
                    " WHERE schema_name = 'main' AND table_name = ? ORDER BY column_index",
                    [table],
                ).fetchall()
                if name not in EXCLUDED.get(table, ())
            ]
            select = ", ".join(
                f'"{name}"::VARCHAR' if dtype == "JSON" or dtype.endswith("[]") else f'"{name}"'
                for name, dtype in columns
            )
            digest = hashlib.sha256(repr([name for name, _ in columns]).encode())
            rows = 0
            result = con.execute(f'SELECT {select} FROM "{table}" ORDER BY ALL')
            while chunk := result.fetchmany(10_000):
                rows += len(chunk)
                for row in chunk:
                    digest.update(repr(row).encode())
                    digest.update(b"\n")
            out.append((table, rows, digest.hexdigest()))
        return out
    finally:
        con.close()


def main(argv: list[str] | None = None) -> int:
    """Print the store's digest (and each table's with --per-table)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store")
    parser.add_argument("--per-table", action="store_true")
    args = parser.parse_args(argv)
    parts = table_digests(args.store)
    whole = hashlib.sha256()
    for table, rows, hexdigest in parts:
        whole.update(f"{table}\t{rows}\t{hexdigest}\n".encode())
        if args.per_table:
            print(f"{table}\t{rows}\t{hexdigest[:16]}")
    print(whole.hexdigest())
    return 0


if __name__ == "__main__":
    sys.exit(main())

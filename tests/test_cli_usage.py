"""Problems a first real user hit: clear errors (exit 2, never a crash) for ordinary mistakes."""

from __future__ import annotations

from pathlib import Path

from conftest import SAMPLE_TRACES


def test_audit_output_into_missing_folder_is_a_clear_error(cli, tmp_path: Path):
    target = tmp_path / "no-such-folder" / "audit.json"
    result = cli("audit", SAMPLE_TRACES, "--format", "json", "-o", target)
    assert result.exit_code == 2
    assert "internal error" not in result.stderr
    assert f"Error: cannot write {target}" in result.stderr
    assert "Hint:" in result.stderr


def test_audit_output_onto_a_folder_is_a_clear_error(cli, tmp_path: Path):
    result = cli("audit", SAMPLE_TRACES, "-o", tmp_path)
    assert result.exit_code == 2
    assert "internal error" not in result.stderr
    assert "it is a folder" in result.stderr
    assert list(tmp_path.iterdir()) == []  # no temp file left behind


def test_audit_output_file_is_written_and_no_temp_remains(cli, tmp_path: Path):
    target = tmp_path / "audit.json"
    result = cli("audit", SAMPLE_TRACES, "--format", "json", "-o", target)
    assert result.exit_code == 1
    assert '"schema_version"' in target.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["audit.json"]

"""Pausing the cyclic collector (core/collector.py), and freezing what a paused block leaves
alive in a single-shot process (the CLI)."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from lexkeep.core import collector


@pytest.fixture
def unfrozen():
    """Leave the collector as found: enabled, nothing frozen by the test."""
    gc.enable()
    yield
    gc.unfreeze()
    gc.enable()


def _made_inside(block) -> tuple[list[object], bool]:
    kept: list[object] = []
    with block():
        assert not gc.isenabled()
        kept.extend([i, str(i)] for i in range(10_000))  # lists: tracked by the collector
    return kept, gc.isenabled()


def test_paused_block_re_enables_and_leaves_its_objects_collectable(unfrozen, monkeypatch):
    monkeypatch.setattr(collector, "_freeze_survivors", False)
    before = gc.get_freeze_count()
    kept, enabled = _made_inside(collector.paused)
    assert enabled and gc.get_freeze_count() == before
    assert gc.is_tracked(kept[0])


def test_single_shot_process_freezes_what_a_paused_block_leaves(unfrozen, monkeypatch):
    monkeypatch.setattr(collector, "_freeze_survivors", False)
    collector.single_shot()  # undone by monkeypatch
    before = gc.get_freeze_count()
    kept, enabled = _made_inside(collector.paused)
    assert enabled
    assert gc.get_freeze_count() >= before + len(kept)  # skipped by every later collection
    del kept  # still freed by reference counting


def test_a_disabled_collector_stays_disabled(unfrozen, monkeypatch):
    monkeypatch.setattr(collector, "_freeze_survivors", False)
    gc.disable()
    with collector.paused():
        pass
    assert not gc.isenabled()


def test_the_cli_declares_itself_single_shot():
    code = (
        "import sys\n"
        "from lexkeep.core import collector\n"
        "from lexkeep.cli.main import main\n"
        "assert not collector._freeze_survivors\n"
        "sys.argv = ['lexkeep', '--version']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(collector._freeze_survivors)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "True"

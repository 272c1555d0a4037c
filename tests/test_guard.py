"""The identifier guard: proposed tool arguments vs. what the conversation supplied (seed 003)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_context_support import load

from lexkeep.compaction.guard import decode_arguments, guard_arguments, guard_to_json
from lexkeep.core.errors import InputError, NotFoundError
from lexkeep.core.nearmiss import Difference
from lexkeep.core.store import Store

INVOICE = "INV-2025-08-44719"
CUSTOMER = "cus_NffrFeUfNV2Hib"


def invoice_records(cid: str = "c1") -> list[dict]:
    """The seed's support conversation: the user types the invoice, a tool returns a customer."""
    run = f"{cid}-r0"
    return [
        {"type": "conversation", "id": cid},
        {"type": "run", "id": run, "conversation_id": cid, "status": "completed"},
        {
            "type": "message",
            "id": f"{cid}-u0",
            "conversation_id": cid,
            "run_id": run,
            "role": "user",
            "text": f"Why was invoice {INVOICE} charged twice? My order number is 88412345.",
        },
        {
            "type": "message",
            "id": f"{cid}-a0",
            "conversation_id": cid,
            "run_id": run,
            "role": "assistant",
            "text": "Let me look that invoice up.",
        },
        {
            "type": "tool_call",
            "id": "call_1",
            "conversation_id": cid,
            "message_id": f"{cid}-a0",
            "name": "lookup_invoice",
            "arguments": {"invoice_id": INVOICE},
        },
        {
            "type": "tool_result",
            "call_id": "call_1",
            "conversation_id": cid,
            "text": f'{{"invoice": "{INVOICE}", "customer": "{CUSTOMER}", "charges": 2}}',
        },
    ]


@pytest.fixture
def support(store: Store, tmp_path: Path) -> Store:
    """A store holding the invoice conversation, loaded through the real ingest."""
    load(store, tmp_path, invoice_records())
    return store


def test_seed_invoice_truncated_is_reported_with_the_nearest_value(support):
    report = guard_arguments(support, "c1", '{"invoice_id": "INV-2025-08-4471"}')
    assert not report.ok and report.exit_code == 1
    [finding] = report.unsupplied
    assert (finding.path, finding.value) == ("$.invoice_id", "INV-2025-08-4471")
    assert finding.nearest == INVOICE
    assert finding.difference is Difference.TRUNCATED
    assert finding.nearest_source == "user"


def test_verbatim_values_pass(support):
    report = guard_arguments(support, "c1", {"invoice_id": INVOICE, "note": "refund please"})
    assert report.ok and report.exit_code == 0
    assert INVOICE in report.checked


def test_a_value_supplied_by_a_tool_result_passes(support):
    report = guard_arguments(support, "c1", f'{{"customer": "{CUSTOMER}"}}')
    assert report.ok, report.unsupplied
    assert report.checked == (CUSTOMER,)


def test_nearest_value_can_come_from_a_tool_result(support):
    report = guard_arguments(support, "c1", {"customer": CUSTOMER.upper()})
    [finding] = report.unsupplied
    assert (finding.nearest, finding.difference, finding.nearest_source) == (
        CUSTOMER,
        Difference.CASE,
        "tool_result",
    )


def test_numbers_are_checked_as_their_json_text(support):
    assert guard_arguments(support, "c1", '{"order": 88412345}').ok
    report = guard_arguments(support, "c1", '{"order": 88412354}')
    [finding] = report.unsupplied
    assert (finding.value, finding.nearest, finding.difference) == (
        "88412354",
        "88412345",
        Difference.EDIT,
    )


def test_nested_leaves_and_values_with_no_near_miss(support):
    report = guard_arguments(
        support, "c1", {"items": [{"sku": "ZX-9000-QQ"}, {"ref": INVOICE}], "dry_run": True}
    )
    [finding] = report.unsupplied
    assert finding.path == "$.items[0].sku"
    assert finding.value == "ZX-9000-QQ"
    assert (finding.nearest, finding.difference) == (None, None)
    doc = guard_to_json(report)
    assert doc["schema_version"] == 1 and doc["ok"] is False
    assert doc["unsupplied"][0]["nearest"] is None


def test_a_value_inside_a_longer_user_token_is_not_supplied(support):
    # 'INV-2025-08-4471' occurs inside 'INV-2025-08-44719' but not at a digit boundary.
    report = guard_arguments(support, "c1", ["INV-2025-08-4471"])
    assert [u.path for u in report.unsupplied] == ["$[0]"]


def test_keys_booleans_and_nulls_are_not_values():
    leaves = decode_arguments('{"INV-2025-08-99999": null, "a": [true, 1.5, "x"]}')
    assert [(leaf.path, leaf.text) for leaf in leaves] == [("$.a[1]", "1.5"), ("$.a[2]", "x")]


def test_bad_json_and_unknown_conversation(support):
    with pytest.raises(InputError) as err:
        guard_arguments(support, "c1", '{"invoice_id": ')
    assert err.value.path == "ARGUMENTS_JSON"
    assert "not valid JSON" in err.value.message
    with pytest.raises(NotFoundError):
        guard_arguments(support, "nope", "{}")


def test_other_conversations_supply_nothing(support, tmp_path):
    load(
        support,
        tmp_path,
        [{"type": "conversation", "id": "c2"}]
        + [r for r in invoice_records("c2") if r["type"] == "run"],
        name="c2",
    )
    report = guard_arguments(support, "c2", {"invoice_id": INVOICE})
    assert [u.value for u in report.unsupplied] == [INVOICE]

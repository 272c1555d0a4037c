"""The identifier guard: proposed tool arguments vs. what the conversation supplied (seed 003)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_context_support import load

from lexkeep.compaction.guard import (
    PIECE_CHARS,
    _pieces,
    decode_arguments,
    guard_arguments,
    guard_to_json,
)
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


def test_a_long_argument_is_checked_to_its_end(support):
    """An argument longer than the extractor's 200,000 characters per text (a file a
    write_file call writes) was scanned only to there: an identifier nobody supplied after it
    passed the guard, exit 0. Long values are scanned in pieces cut at whitespace."""
    line = f"see invoice {INVOICE} again\n"
    content = line * (250_000 // len(line)) + "then INV-2025-08-4471 at the end"
    report = guard_arguments(support, "c1", {"path": "notes.txt", "content": content})
    assert report.complete
    [finding] = report.unsupplied
    assert (finding.path, finding.value) == ("$.content", "INV-2025-08-4471")
    assert report.checked.count(INVOICE) == 250_000 // len(line)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="ab \n,-", max_size=3 * PIECE_CHARS), st.integers(0, PIECE_CHARS))
def test_pieces_rejoin_to_the_text_and_cut_only_after_a_separator(text, pad):
    text = "x" * pad + text
    pieces = list(_pieces(text))
    assert "".join(pieces) == text
    assert all(len(p) <= PIECE_CHARS for p in pieces)
    for piece in pieces[:-1]:
        assert piece[-1] in " \n," or " " not in piece and "\n" not in piece and "," not in piece


def test_a_value_inside_a_longer_user_token_is_not_supplied(support):
    # 'INV-2025-08-4471' occurs inside 'INV-2025-08-44719' but not at a digit boundary.
    report = guard_arguments(support, "c1", ["INV-2025-08-4471"])
    assert [u.path for u in report.unsupplied] == ["$[0]"]


def test_keys_booleans_and_nulls_are_not_values():
    leaves = decode_arguments('{"INV-2025-08-99999": null, "a": [true, 1.5, "x"]}')
    assert [(leaf.path, leaf.text) for leaf in leaves] == [("$.a[1]", "1.5"), ("$.a[2]", "x")]


def test_paths_name_one_place_each_and_quote_keys_that_are_not_plain_names():
    """`{"a.b": {"c": …}}` and `{"a": {"b.c": …}}` were both `$.a.b.c`, and a key holding ESC
    went to the terminal in the text report. Keys that are not plain names are quoted JSON in
    brackets (`$["a.b"].c`), as JSONPath writes them."""
    arguments = '{"a.b": {"c": "x"}, "a": {"b.c": "y"}, "x y": ["z"], "\\u001b[2J": "w"}'
    leaves = decode_arguments(arguments)
    assert [leaf.path for leaf in leaves] == [
        '$["a.b"].c',
        '$.a["b.c"]',
        '$["x y"][0]',
        '$["\\u001b[2J"]',
    ]


def test_numbers_keep_the_text_the_arguments_write():
    """orjson reads a big integer or a long decimal as a float; the guard scans the text."""
    leaves = decode_arguments(
        '{"rate": 0.10000000000000000555, "n": [1.50, 98765432109876543210, 7], "s": "1.50"}'
    )
    assert [(leaf.path, leaf.text) for leaf in leaves] == [
        ("$.rate", "0.10000000000000000555"),
        ("$.n[0]", "1.50"),
        ("$.n[1]", "98765432109876543210"),
        ("$.n[2]", "7"),
        ("$.s", "1.50"),
    ]
    assert all(type(leaf.text) is str for leaf in leaves)


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


def test_the_documented_agent_loop_runs(support, tmp_path, monkeypatch):
    """docs/context.md's agent loop: the truncated invoice is refused, the real one runs."""
    from types import SimpleNamespace

    doc = (Path(__file__).resolve().parent.parent / "docs" / "context.md").read_text()
    code = doc.split("## An agent loop with both")[1].split("```python")[1].split("```")[0]
    support.close()  # the loop opens the store file itself, read-only
    namespace: dict = {}
    exec(compile(code, "docs/context.md", "exec"), namespace)
    namespace["DB"] = str(support.path)
    seen: dict = {"prompts": [], "ran": [], "results": []}

    def call(name: str, args: dict) -> SimpleNamespace:
        return SimpleNamespace(name=name, arguments=orjson.dumps(args).decode())

    script = [
        SimpleNamespace(tool_calls=[call("lookup_invoice", {"invoice_id": "INV-2025-08-4471"})]),
        SimpleNamespace(tool_calls=[call("lookup_invoice", {"invoice_id": INVOICE})]),
        SimpleNamespace(tool_calls=[], text="Two charges found."),
    ]

    def model(**kwargs):
        if "system" in kwargs:
            seen["prompts"].append(kwargs["system"])
        else:
            seen["results"].append(kwargs["tool_results"])
        return script.pop(0)

    def lookup_invoice(invoice_id: str) -> dict:
        seen["ran"].append(invoice_id)
        return {"charges": 2}

    assert namespace["next_run"](model, {"lookup_invoice": lookup_invoice}, "why?") == (
        "Two charges found."
    )
    assert INVOICE in seen["prompts"][0]  # the pinned identifier reached the model
    assert seen["ran"] == [INVOICE]  # the truncated value never reached the tool
    refused = seen["results"][0][0]
    assert refused["values"][0]["nearest"] == INVOICE
    assert refused["values"][0]["difference"] == "truncated"


def test_values_escaped_in_a_json_tool_result_count_as_supplied(store, tmp_path):
    records = invoice_records("c3")
    records[-1] = {
        "type": "tool_result",
        "call_id": "call_1",
        "conversation_id": "c3",
        # What a JSON-speaking tool prints: backslashes and slashes escaped.
        "text": r'{"report": "C:\\Users\\ana\\report-2025.txt", "link": "https:\/\/x.io\/r\/77"}',
    }
    load(store, tmp_path, records, name="c3")
    report = guard_arguments(
        store, "c3", {"path": "C:\\Users\\ana\\report-2025.txt", "url": "https://x.io/r/77"}
    )
    assert report.ok, report.unsupplied
    assert len(report.checked) == 2
    # A near miss is pointed at the value the tool supplied, never at its escaped text: the
    # agent is told what to send instead.
    near = guard_arguments(
        store, "c3", {"path": "C:\\Users\\ana\\report-2025.tx", "url": "https://x.io/r/777"}
    )
    assert {(u.nearest, u.difference) for u in near.unsupplied} == {
        ("C:\\Users\\ana\\report-2025.txt", "truncated"),
        ("https://x.io/r/77", "extended"),
    }


def test_an_incomplete_scan_is_not_ok(support, tmp_path):
    """A value whose scan ran out of its time budget was checked only in part: a caller that
    asks only `report.ok` must not run the call (the report fails closed). `passed` still says
    that nothing unsupplied was found, for a caller that accepts a partial check."""
    from lexkeep.core.rules import load_rules

    rules_file = tmp_path / "tight.toml"
    rules_file.write_text("[settings]\ntimeout_ms = 1\n", encoding="utf-8")
    # the supplied invoice, then digits that keep the number kinds busy and are no identifier
    dense = INVOICE + " " + "1 " * 8000
    report = guard_arguments(support, "c1", {"note": dense}, rules=load_rules(rules_file))
    assert report.complete is False, "the scan must run out of time for this test to mean much"
    assert report.unsupplied == ()
    assert report.passed is True
    assert report.ok is False and report.exit_code == 1
    doc = guard_to_json(report)
    assert (doc["ok"], doc["passed"], doc["complete"]) == (False, True, False)
    # the same arguments scanned in full pass
    full = guard_arguments(support, "c1", {"note": dense})
    assert full.complete and full.passed and full.ok and full.exit_code == 0


def test_a_date_typed_without_a_year_is_nearest_only_near_when_it_was_typed(store, tmp_path):
    """`April 3` typed in 2026 was offered as the nearest known value of `2019-04-03`, a date
    seven years away, as the audit called them the same date."""
    records = [
        {"type": "message", "id": "d-u0", "conversation_id": "d", "role": "user",
         "time": "2026-03-30T10:00:00Z", "text": "Please move the booking to April 3."},
    ]  # fmt: skip
    load(store, tmp_path, records)
    far = guard_arguments(store, "d", {"date": "2019-04-03"})
    [finding] = far.unsupplied
    assert finding.nearest is None
    near = guard_arguments(store, "d", {"date": "2026-04-03"})
    [finding] = near.unsupplied
    assert (finding.nearest, finding.difference) == ("April 3", Difference.DATE)

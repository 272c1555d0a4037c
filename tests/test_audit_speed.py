"""The audit's speed-ups give the same answers as the definitions they stand in for.

- `_SURE_CALL` (SQL) may only say "this call keeps the value" when decoding the arguments and
  checking every decoded string with `is_kept` says so too (engine._keeps' definition).
- The ASCII fast path of `_call_tokens` gives `core.nearmiss.candidates`, `fold` and `skeleton`.
- End to end, arguments built to fool a raw-text check (duplicate keys, keys, escapes) get the
  verdict the definition gives.
"""

from __future__ import annotations

import functools
import io
import json

import duckdb
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lexkeep.audit import render as render_module
from lexkeep.audit.engine import (
    _ASCII_BARE,
    _FOLDED_ARGS,
    _SURE_CALL,
    _SURE_VALUE,
    _call_tokens,
    _edit_grams,
    _Expected,
    _GroupedLeaves,
    _near_grams,
    _value_forms,
    decode_arguments,
    fast_best_near_miss,
    run_audit,
)
from lexkeep.audit.render import render
from lexkeep.core.nearmiss import (
    _grouped_runs,
    ascii_grouped_run,
    ascii_run_spans,
    best_near_miss,
    bounded_distance,
    candidates,
    classify,
    edit_pieces,
    fold,
    grouped_runs,
    is_kept,
    may_be_edited,
    may_be_grouped,
    skeleton,
)


@functools.cache
def _con() -> duckdb.DuckDBPyConnection:
    return duckdb.connect()  # one in-memory database for the whole module: connecting costs ms


def _sure(rows: list[tuple[str, str, str]]) -> list[bool]:
    """Evaluate the engine's SQL shortcut on (value, arguments_raw, arguments_kind) rows."""
    con = _con()
    con.execute(
        "CREATE OR REPLACE TABLE calls (n INTEGER, value VARCHAR, raw VARCHAR, kind VARCHAR)"
    )
    con.execute(
        "INSERT INTO calls SELECT unnest(?), unnest(?), unnest(?), unnest(?)",
        [list(range(len(rows))), *(list(col) for col in zip(*rows, strict=True))],
    )
    got = con.execute(
        f"""
        WITH v AS (SELECT n, value, raw AS arguments_raw, kind AS arguments_kind,
                          {_SURE_VALUE} AS sure_value, instr(raw, value) AS p
                   FROM calls ids)
        SELECT coalesce({_SURE_CALL}, false) FROM v ORDER BY n
        """
    ).fetchall()
    return [bool(r[0]) for r in got]


def _keeps(value: str, raw: str, kind: str) -> bool:
    return any(is_kept(value, leaf) for leaf in decode_arguments(raw, kind))


V = "INV-2025-08-44719"
# (value, raw arguments, kind, what the definition says)
CASES = [
    (V, json.dumps({"invoice_id": V}), "json_string", True),
    (V, json.dumps({"command": ["bash", "-lc", f"grep {V} /var/log/x.log"]}), "json_string", True),
    (V, json.dumps({V: 1}), "json_string", False),  # a key is not an argument string
    (V, json.dumps({V + "x": "a", "b": V}), "json_string", True),  # definition: kept
    (V, '{"a":"' + V + '","a":"other"}', "json_string", False),  # duplicate key: last wins
    (V, '{"a":"other","a":"' + V + '"}', "json_string", True),
    (V, '{"\\u0061":"' + V + '","a":"x"}', "json_string", False),  # escaped duplicate key
    (V, '{"a":{"b":"' + V + '","b":"x"}}', "json_string", False),  # nested duplicate
    (V, '{"a":"x\\n' + V + '"}', "json_string", True),  # escape before: SQL cannot tell
    (V, '{"a":"' + V + '\\u00e9"}', "json_string", False),  # decodes to a letter after it
    (V, '{"a":"\\u00e9' + V + '"}', "json_string", False),
    (V, '{"a":"' + V + '\\"x"}', "json_string", True),
    (V, '{"a":"\\"' + V + '"}', "json_string", True),
    (V, '{"a":"' + V + "é" + '"}', "json_string", False),  # a non-ASCII letter after it
    (V, '{"a":"' + V + "。" + '"}', "json_string", True),  # non-ASCII punctuation after it
    (V, '{"a": "' + V, "json_string", True),  # invalid JSON: the raw text is the string
    (V, '{"a": "x' + V + '"', "json_string", False),
    (V, '{"a":"' + V + '",}', "json_string", True),  # DuckDB accepts this, Python does not
    (V, f"apply {V} now", "freeform", True),
    (V, f'{{"{V}": 1}}', "freeform", True),
    (V, json.dumps([V]), "array", True),
    ("123456789", '{"account": 123456789}', "object", True),
    ("123456789", '{"account": -123456789.5}', "object", True),
    ("123456789", '{"account": 1234567890}', "object", False),
    ("123456789", '{"a": 1e123456789}', "object", False),
    ("123456789", '{"a": 1.5e-123456789}', "object", True),
    ("true", '{"a": true}', "object", False),  # booleans hold no identifier
    ("null", '{"a": null, "b": "null"}', "object", True),
    ("nan", '{"a": NaN}', "object", False),
    ("NaN", '{"a": NaN}', "object", True),
    ("e", '{"a": 1e5}', "object", False),
    ("a,b", '{"x":"a","y":"b"}', "object", False),
    ("a,b", '{"x":"a,b"}', "object", True),
    ('say "hi"', json.dumps({"a": 'say "hi"'}), "object", True),  # SQL cannot tell
    ("C:\\dir", json.dumps({"a": "C:\\dir"}), "object", True),
    ("C:\\dir", '{"a": "C:\\dir"}', "object", True),  # invalid escape: raw text
    ("ORD_448812", '{"q":"ORD_4488120"}', "object", False),
    ("ORD_448812", '{"q":"xORD_448812"}', "object", False),
    ("ORD_448812", '{"q":"/ORD_448812/"}', "object", True),
    ("ORD_448812", '{"q":"\\/ORD_448812\\/"}', "object", True),
    ("ORD_448812", '{"q":"\\\\ORD_448812"}', "object", True),
    ("ORD_448812", '{"q":"\\\\\\\\ORD_448812"}', "object", True),
    ("#W2378156", '{"q":"order #W2378156."}', "object", True),
    ("日本-42", '{"q":"日本-42 x"}', "object", True),
    ("日本-42", '{"q":"x日本-42"}', "object", False),
]


def test_sql_shortcut_never_claims_more_than_the_definition():
    got = _sure([(v, raw, kind) for v, raw, kind, _ in CASES])
    for (value, raw, kind, expected), sure in zip(CASES, got, strict=True):
        assert _keeps(value, raw, kind) == expected, (value, raw)
        if sure:
            assert expected, f"SQL says {raw!r} keeps {value!r}, decoding says no"
    # ... and it does decide the plain cases, or it would save nothing.
    assert got[0] and got[1] and got[-2]


_PIECES = [*'INV-2025_ab:/#.\\"{}[], \n\tél0\u00e9', "\\n", "\\u0041", '\\"', "\\/"]
_TEXT = st.lists(st.sampled_from(_PIECES), max_size=12).map("".join)


@settings(max_examples=150, deadline=None)
@given(
    value=st.sampled_from(["INV-25", "ab", "2025", "a:b", "l0", "a", "e", "true", "日本-42"]),
    parts=st.lists(_TEXT, max_size=4),
    shape=st.sampled_from(["obj", "dup", "key", "raw", "list", "free"]),
)
def test_sql_shortcut_random_arguments(value, parts, shape):
    text = value.join(parts) if len(parts) > 1 else value
    kind = "object"
    if shape == "obj":
        raw = json.dumps({"a": text, "b": parts})
    elif shape == "dup":
        raw = '{"a":' + json.dumps(text) + ',"a":' + json.dumps(parts) + "}"
    elif shape == "key":
        raw = json.dumps({text: 1, "x": parts})
    elif shape == "list":
        raw, kind = json.dumps([text, *parts], ensure_ascii=False), "array"
    elif shape == "free":
        raw, kind = text, "freeform"
    else:
        raw = '{"a": "' + text + '"}'  # often invalid JSON
    if _sure([(value, raw, kind)])[0]:
        assert _keeps(value, raw, kind), (value, raw, kind)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=60))
def test_ascii_tokens_equal_candidates(text):
    raw = json.dumps({"a": text})
    expected = [(t, fold(t), skeleton(t)) for t in candidates(text)]
    assert _call_tokens(raw, "object", {}) == expected


def test_ascii_and_unicode_tokens_mixed():
    leaves = ["INV-2025-08-44719, see /var/log/x.log.", "Ｏｒｄｅｒ ORD‐448812 ０１２", "x"]
    raw = json.dumps({"a": leaves[0], "b": [leaves[1], leaves[2]]}, ensure_ascii=False)
    expected = [(t, fold(t), skeleton(t)) for leaf in leaves for t in candidates(leaf)]
    assert _call_tokens(raw, "object", {}) == expected


def _line(**record) -> str:
    return json.dumps(record, ensure_ascii=False)


def _audit_lines(tmp_path, lines: list[str], **options):
    """The audit of a lexkeep JSONL dump made of `lines`."""
    path = tmp_path / "dump.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return run_audit(paths=[str(path)], **options)


@pytest.mark.parametrize(
    ("arguments", "verdict"),
    [
        ('{"invoice_id":"INV-2025-08-44719"}', "kept"),
        ('{"invoice_id":"INV-2025-08-44719","invoice_id":"none"}', "missing"),
        ('{"INV-2025-08-44719":"x"}', "missing"),
        ('{"q":"INV-2025-08-44719\\u00e9"}', "altered"),
        ('{"q":"see\\nINV-2025-08-44719"}', "kept"),
        ('{"q":"inv-2025-08-44719"}', "altered"),
        # JSON escapes of ASCII characters (a writer that escapes everything, Go's & < >):
        ('{"q":"\\u0049NV-2025-08-44719"}', "kept"),
        ('{"q":"INV\\u002d2025-08-44719 \\u0026 more"}', "kept"),
        ('{"q":"\\u0049NV-2025-08-4471"}', "altered"),  # decoded: truncated by one
    ],
)
def test_tricky_arguments_end_to_end(tmp_path, arguments, verdict):
    """Both the fast path and the normal ingest give the verdict of the definition."""
    lines = [
        _line(type="message", id="m1", conversation_id="c1", role="user",
              text="Please refund invoice INV-2025-08-44719 today."),
        _line(type="compaction", id="b1", conversation_id="c1", summary="refund asked"),
        _line(type="tool_call", id="t1", conversation_id="c1", name="refund",
              arguments=arguments),
    ]  # fmt: skip
    for fast in (True, False):
        report = _audit_lines(tmp_path, lines, fast=fast)
        got = [(f.value, f.verdict.value) for f in report.findings]
        assert got == [("INV-2025-08-44719", verdict)], (fast, got)


@settings(max_examples=400, deadline=None)
@given(
    value=st.text("ab01-_", min_size=1, max_size=20),
    cut=st.integers(-12, 12),
    extra=st.text("ab01-", max_size=8),
    at_end=st.booleans(),
)
def test_size_filter_keeps_every_near_miss(value, cut, extra, at_end):
    """A token whose skeleton length `_Expected.sizes` rejects is never a near miss."""
    token = value[:cut] if cut > 0 else value[-cut:] if cut < 0 else value
    token = token + extra if at_end else extra + token
    miss = classify(value, token)
    if miss is not None and fold(value) != fold(token):
        assert len(skeleton(token)) in _Expected.of(value).sizes, (value, token, miss)


def test_folded_arguments_equal_the_regexp_they_replace():
    text = "".join(map(chr, range(1, 0x3100))) + "\u2028\u3000\ufeff\u00a0\u0085\u200b😀 a - b\\\\c"
    con = _con()
    expr = _FOLDED_ARGS.replace("t.arguments_raw", "?")
    got, want = con.execute(
        f"SELECT {expr}, regexp_replace(lower(?), '[\\s\\-_.:/#\\\\+()]+', '', 'g')", [text, text]
    ).fetchone()
    assert got == want
    assert len(want) < len(text) - 12


@settings(max_examples=400, deadline=None)
@given(st.text(st.characters(max_codepoint=0x7F) | st.sampled_from("‐é０ﬁ\u00ad"), max_size=30))
def test_value_forms_equal_fold_and_skeleton(value):
    assert _value_forms(value) == (fold(value), skeleton(value))


def test_sql_shortcut_survives_many_rows_of_broken_json():
    """Thousands of rows (DuckDB may reorder an AND's terms across vectors): no JSON error."""
    good = (V, '{"a":"' + V + '"}', "object")
    broken = (V, '{"a": "' + V + '" ', "object")  # one '{', not JSON
    got = _sure([good, broken] * 3000)
    assert got == [True, False] * 3000


def test_json_report_bytes_equal_through_a_text_file_or_a_string(tmp_path):
    """The JSON report written straight to a UTF-8 file's bytes equals the text rendering."""
    lines = [
        _line(type="message", id="m1", conversation_id="c1", role="user",
              text="Refund INV-2025-08-44719, see /srv/données/rapport.log please."),
        _line(type="compaction", id="b1", conversation_id="c1", summary="résumé"),
        _line(type="tool_call", id="t1", conversation_id="c1", name="refund",
              arguments='{"invoice_id":"INV-2025-08-44719","log":"/srv/données/rapport.log"}'),
    ]  # fmt: skip
    report = _audit_lines(tmp_path, lines)
    text = io.StringIO()
    render(report, "json", text)
    out = tmp_path / "report.json"
    with out.open("w", encoding="utf-8", newline="") as fh:
        fh.write("")  # something written through the text layer first must stay first
        render(report, "json", fh)
    assert out.read_bytes() == text.getvalue().encode("utf-8")
    assert "données" in text.getvalue() and text.getvalue().endswith("}\n")


def _reference_leaves(value, out: list) -> None:
    """The decoded strings, by the definition: depth first, in document order."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _reference_leaves(item, out)
    elif isinstance(value, list):
        for item in value:
            _reference_leaves(item, out)
    elif isinstance(value, int) and not isinstance(value, bool):
        out.append(str(value))


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=12,
)


# The shape the fast path takes: an object of strings and lists of strings.
_ARGS = st.dictionaries(
    st.text(max_size=3), st.text(max_size=3) | st.lists(st.text(max_size=3), max_size=4)
)


@settings(max_examples=200, deadline=None)
@given(_JSON | _ARGS | st.dictionaries(st.text(max_size=3), _JSON | _ARGS))
@example({"command": ["bash", "-lc", "x"], "cwd": "/srv", "n": 3})
def test_decoded_leaves_follow_the_document_order(value):
    raw = json.dumps(value)
    expected: list = []
    _reference_leaves(value, expected)
    assert decode_arguments(raw, "object") == expected


@pytest.mark.parametrize("users", [0, 1, 7])
def test_json_report_in_chunks_equals_json_dump_of_the_whole(tmp_path, monkeypatch, users):
    """Findings written JSON_CHUNK at a time: the bytes of json.dumps(indent=2) of it all,
    with no findings, one, and several chunks (and with notes or without)."""
    monkeypatch.setattr(render_module, "JSON_CHUNK", 3)
    lines = [_line(type="message", id="m0", conversation_id="c1", role="user", text="hi")]
    lines += [
        _line(type="message", id=f"m{i}", conversation_id="c1", role="user",
              text=f"Refund INV-2025-08-{44710 + i} and ORD_{448810 + i}, « très » urgent")
        for i in range(1, users + 1)
    ]  # fmt: skip
    lines += [
        _line(type="compaction", id="b1", conversation_id="c1", summary="résumé"),
        _line(type="tool_call", id="t1", conversation_id="c1", name="refund",
              arguments='{"invoice_id":"INV-2025-08-44711"}'),
    ]  # fmt: skip
    report = _audit_lines(tmp_path, lines)
    assert len(report.findings) == 2 * users
    text = io.StringIO()
    render(report, "json", text)
    expected = json.dumps(render_module.report_dict(report), ensure_ascii=False, indent=2)
    assert text.getvalue() == expected + "\n"
    assert bool(report.notes) == (users == 0)


def test_a_near_miss_hidden_by_json_escapes_is_found(tmp_path):
    """Every character of the near miss escaped: no probe of the raw text finds it, the
    decoded arguments do."""
    escaped = "".join(f"\\u{ord(c):04x}" for c in "ORD_448811")
    lines = [
        _line(type="message", id="m1", conversation_id="c1", role="user",
              text="Where is order ORD_448812?"),
        _line(type="compaction", id="b1", conversation_id="c1", summary="order asked"),
        _line(type="tool_call", id="t1", conversation_id="c1", name="lookup",
              arguments='{"q":"' + escaped + '"}'),
    ]  # fmt: skip
    for fast in (True, False):
        report = _audit_lines(tmp_path, lines, fast=fast)
        got = [(f.value, f.verdict.value) for f in report.findings]
        assert got == [("ORD_448812", "altered")], (fast, got)


# -- the near-miss search's shortcuts (grouped values) -----------------------------------------

_GROUP_TEXT = st.text(
    st.sampled_from("0123456789abXY-_./#:\\+@~ \t\n\x0b\x0c\r()=,\"'"), max_size=40
)


@settings(max_examples=400, deadline=None)
@given(value=st.text(st.sampled_from("0123456789abcXYZ-_./# ()٣é"), max_size=24))
def test_expected_value_tests_equal_the_nearmiss_ones(value):
    """`_Expected.of` answers may_be_grouped, may_be_edited and edit_pieces once per value."""
    expected = _Expected.of(value)
    want = skeleton(value)
    assert expected.grouped == may_be_grouped(want)
    assert expected.edited == (may_be_grouped(want) and may_be_edited(want))
    assert expected.pieces == edit_pieces(want)
    # ... and the pieces the near-miss filters count (_near_grams, _edit_grams)
    grams, needed = _near_grams(want)
    tested = needed > 0 and expected.date is None
    assert (expected.near_grams, expected.near_needed) == ((grams, needed) if tested else ((), 0))
    if expected.edited and want.isascii():
        assert (expected.grams, expected.grams_needed) == _edit_grams(want)
    else:
        assert (expected.grams, expected.grams_needed) == ((), 0)


@settings(max_examples=400, deadline=None)
@given(_GROUP_TEXT)
@example("call +1 (555) 010-9999 or DE89 3704 0044 0532 0130 00 (x)")
def test_ascii_run_spans_build_the_grouped_runs(text):
    """grouped_runs of ASCII text = ascii_grouped_run at each of ascii_run_spans, and each
    run's join is its span folded as `_GroupedLeaves` folds a whole string."""
    spans = ascii_run_spans(text)
    runs = grouped_runs(text)
    assert [ascii_grouped_run(text, start, end) for start, end in spans] == runs
    assert runs == _grouped_runs(text)  # the `regex` path, for any text
    for (start, end), run in zip(spans, runs, strict=True):
        assert text[start:end].encode().lower().translate(None, _ASCII_BARE) == run[2].encode()


@settings(max_examples=500, deadline=None)
@given(
    value=st.text(st.sampled_from("0123456789ab -()"), min_size=4, max_size=16),
    texts=st.lists(_GROUP_TEXT | st.just("+1 (555) 010-9999 é"), max_size=3),
)
@example("+15550109999", ["+1 (555) 010-9998 and +1 (555) 010-9999"])
@example("DE89 3704 0044 0532 0130 00", ["iban DE89 3704 0044 0532 0131 00"])
def test_near_miss_with_grouped_leaves_equals_best_near_miss(value, texts):
    """The audit's lazy grouped runs (only those whose join holds a needle) give the same
    near miss as core.nearmiss.best_near_miss over every run of the texts."""
    tokens = [(t, fold(t), skeleton(t)) for text in texts for t in candidates(text)]
    got = fast_best_near_miss(_Expected.of(value), tokens, _GroupedLeaves(list(texts)))
    assert got == best_near_miss(value, texts)


# -- the grouped edit search's filter (two-character pieces) -----------------------------------

_EDITS = st.lists(
    st.tuples(
        st.sampled_from(["substitute", "delete", "insert", "transpose"]),
        st.integers(0, 40),
        st.sampled_from("0123456789ab"),
    ),
    max_size=2,
)


def _edited(want: str, edits: list[tuple[str, int, str]]) -> str:
    """`want` with `edits` applied one after the other (positions taken modulo its length)."""
    text = want
    for op, at, ch in edits:
        if not text:
            break
        at %= len(text)
        if op == "substitute":
            text = text[:at] + ch + text[at + 1 :]
        elif op == "delete":
            text = text[:at] + text[at + 1 :]
        elif op == "insert":
            text = text[:at] + ch + text[at:]
        elif at + 1 < len(text):
            text = text[:at] + text[at + 1] + text[at] + text[at + 2 :]
    return text


@settings(max_examples=600, deadline=None)
@given(
    want=st.text(st.sampled_from("0123456789ab"), min_size=6, max_size=20),
    edits=_EDITS,
    before=st.text(st.sampled_from("0123456789xy"), max_size=6),
    after=st.text(st.sampled_from("0123456789xy"), max_size=6),
)
@example("12345678", [("transpose", 2, "0")], "", "")
@example("123456789012", [("transpose", 2, "0"), ("transpose", 6, "0")], "", "")
def test_text_within_the_edit_limit_holds_the_needed_pieces(want, edits, before, after):
    """Any text holding a string within the edit limit of `want` (transpositions included)
    holds at least the number of its two-character pieces that the filter asks for."""
    limit = 1 if len(want) < 12 else 2
    got = _edited(want, edits)
    if bounded_distance(want, got, limit) > limit:
        return  # beyond the limit: no near miss to keep
    grams, needed = _edit_grams(want)
    text = (before + got + after).encode()
    assert sum(gram in text for gram in grams) >= needed


@settings(max_examples=400, deadline=None)
@given(
    value=st.text(st.sampled_from("0123456789"), min_size=6, max_size=16),
    edits=_EDITS,
    cuts=st.lists(st.integers(1, 15), max_size=3),
    noise=st.lists(_GROUP_TEXT, max_size=2),
)
@example("5550109999", [("substitute", 9, "8")], [3, 6], [])
@example("89370400440532013000", [("transpose", 4, "0")], [4, 8, 12, 16], ["x 1"])
def test_grouped_edit_filter_keeps_every_grouped_near_miss(value, edits, cuts, noise):
    """A value written in groups with an edit or two is found as best_near_miss finds it:
    the filter before the grouped edit search never drops a run that holds one."""
    got = _edited(value, edits)
    bounds = sorted(cuts)
    groups = " ".join(got[a:b] for a, b in zip([0, *bounds], [*bounds, None], strict=True))
    texts = [*noise, f"id {groups} ok"]
    tokens = [(t, fold(t), skeleton(t)) for text in texts for t in candidates(text)]
    found = fast_best_near_miss(_Expected.of(value), tokens, _GroupedLeaves(list(texts)))
    assert found == best_near_miss(value, texts)


# -- the first call that keeps a value, among sure and unsure ones ------------------------------

# Arguments of a call after (or before) the boundary: kept surely by SQL, kept only by the
# decoded definition (an escape before the value), holding the value without keeping it.
_FIRST_ARGS = {
    "sure": json.dumps({"invoice_id": V}),
    "decoded": '{"note": "x\\n' + V + '"}',
    "inside": json.dumps({"invoice_id": V + "9"}),
    "other": json.dumps({"invoice_id": "INV-1"}),
}


@settings(max_examples=30, deadline=None)
@given(
    before=st.lists(st.sampled_from(sorted(_FIRST_ARGS)), max_size=4),
    after=st.lists(st.sampled_from(sorted(_FIRST_ARGS)), max_size=5),
)
@example(before=["decoded", "sure"], after=["inside", "sure", "decoded", "sure"])
def test_first_keeping_call_is_the_evidence_among_sure_and_unsure_ones(
    tmp_path_factory, before, after
):
    """The evidence of a kept value is the first call after the boundary that keeps it by the
    definition, and `used before` says whether one before it does, whatever mix of calls SQL
    decides and calls Python decodes come after the first one."""
    calls = [(f"b{i}", kind) for i, kind in enumerate(before)]
    calls += [("boundary", None)] + [(f"a{i}", kind) for i, kind in enumerate(after)]
    records: list[dict[str, object]] = [
        {"type": "message", "id": "m1", "conversation_id": "c1", "role": "user",
         "text": f"refund {V} please"},
    ]  # fmt: skip
    for call_id, kind in calls:
        if kind is None:
            records.append({"type": "compaction", "id": "x1", "conversation_id": "c1"})
        else:
            records.append(
                {"type": "tool_call", "id": call_id, "conversation_id": "c1", "name": "f",
                 "arguments": _FIRST_ARGS[kind]}
            )  # fmt: skip
    path = tmp_path_factory.mktemp("first") / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    report = run_audit(paths=[str(path)])
    (finding,) = [f for f in report.findings if f.value == V]
    keeping = [i for i, kind in enumerate(after) if _keeps(V, _FIRST_ARGS[kind], "json_string")]
    if keeping:
        assert finding.verdict.value == "kept"
        assert finding.evidence is not None and finding.evidence.call_id == f"a{keeping[0]}"
    else:
        assert finding.verdict.value != "kept"
    assert finding.used_before == any(
        _keeps(V, _FIRST_ARGS[kind], "json_string") for kind in before
    )


# -- the near-miss candidates' filter (two-character pieces of plain arguments) -----------------

_RANKS = {"case": 0, "separator": 1, "date": 1, "truncated": 2, "extended": 2, "edit": 3}


def _changed(value: str, how: str, at: int, ch: str) -> str:
    """`value` changed the ways a near miss changes it."""
    at %= len(value)
    if how == "lower":
        return value.lower()
    if how == "separator":
        return value.replace("-", "_") if "-" in value else value[:at] + "-" + value[at:]
    if how == "truncate":
        return value[: -1 - at % 2]
    if how == "extend":
        return value + ch
    if how == "groups":
        return value[:at] + " " + value[at:]
    return _edited(value, [(how, at, ch)])


@settings(max_examples=50, deadline=None)
@given(
    value=st.sampled_from(
        ["INV-2025-08-44719", "ORD_448812", "482913650", "HJK482", "#W2378156", "PAY-14821"]
    ),
    changes=st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "lower",
                    "separator",
                    "truncate",
                    "extend",
                    "groups",
                    "substitute",
                    "delete",
                    "insert",
                    "transpose",
                ]  # fmt: skip
            ),
            st.integers(0, 30),
            st.sampled_from("0123456789X"),
            st.sampled_from(["plain", "plain", "escaped", "noise"]),
        ),
        min_size=1,
        max_size=4,
    ),
)
@example("INV-2025-08-44719", [("transpose", 9, "0", "plain"), ("truncate", 0, "0", "plain")])
@example("482913650", [("groups", 3, "0", "escaped"), ("substitute", 2, "7", "plain")])
@example("INV-2025-08-44719", [("transpose", 9, "0", "plain")])
@example("482913650", [("transpose", 2, "0", "plain")])
def test_near_miss_evidence_equals_the_definition(tmp_path_factory, value, changes):
    """The altered value and its call are those of core.nearmiss.best_near_miss over each call's
    decoded arguments, the first call of the closest miss winning, whatever mix of plain and
    escaped arguments, near misses and noise the calls after the boundary hold."""
    records: list[dict[str, object]] = [
        {"type": "message", "id": "m1", "conversation_id": "c1", "role": "user",
         "text": f"please look up {value} now"},
        {"type": "compaction", "id": "x1", "conversation_id": "c1"},
    ]  # fmt: skip
    calls = []
    for n, (how, at, ch, shape) in enumerate(changes):
        near = _changed(value, how, at, ch)
        text = {
            "plain": f"find {near} in 2025 logs",
            "escaped": f"find\n{near}\tin logs",
            "noise": f"{value[:3].lower()} {value[-3:]} 20 25 {ch}{value[1:4]}",
        }[shape]
        raw = json.dumps({"q": text})
        calls.append((f"k{n}", raw))
        records.append(
            {"type": "tool_call", "id": f"k{n}", "conversation_id": "c1", "name": "f",
             "arguments": raw}
        )  # fmt: skip
    path = tmp_path_factory.mktemp("near") / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (finding,) = [f for f in run_audit(paths=[str(path)]).findings if f.value == value]
    best = None
    for call_id, raw in calls:
        leaves = decode_arguments(raw, "json_string")
        if any(is_kept(value, leaf) for leaf in leaves):
            assert finding.verdict.value == "kept"
            return
        miss = best_near_miss(value, leaves)
        key = None if miss is None else (_RANKS[miss.difference], miss.distance)
        if key is not None and (best is None or key < best[2]):
            best = (miss, call_id, key)
    if best is None:
        assert finding.verdict.value == "missing"
    else:
        assert finding.verdict.value == "altered"
        assert finding.evidence is not None
        assert (finding.evidence.found, finding.evidence.call_id) == (best[0].found, best[1])
        assert finding.evidence.difference == best[0].difference.value


@settings(max_examples=300, deadline=None)
@given(
    want=st.text(st.sampled_from("0123456789abc@~"), min_size=1, max_size=20),
    cut=st.integers(0, 20),
    edits=_EDITS,
)
@example("123456789012", 0, [("transpose", 2, "0"), ("transpose", 6, "0")])
@example("1234567", 0, [("transpose", 2, "0")])
@example("1234567890", 0, [])
def test_near_miss_of_a_skeleton_holds_the_needed_pieces(want, cut, edits):
    """Any skeleton a near miss may have (an extension, a truncation to 60% and 4 characters,
    an edit within the limit) holds at least the pieces _near_grams asks for."""
    grams, needed = _near_grams(want)
    candidates_ = [want + "x" * (cut % 3), "x" + want]
    size = max(4, -(-3 * len(want) // 5))
    while size / len(want) < 0.6:
        size += 1
    if size < len(want):
        candidates_ += [want[:size], want[len(want) - size :]]
    if len(want) >= 6:
        limit = 1 if len(want) < 12 else 2
        got = _edited(want, edits)
        if bounded_distance(want, got, limit) <= limit:
            candidates_.append(got)
    for got in candidates_:
        assert sum(gram in got for gram in grams) >= needed, (want, got)

"""Extractor unit tests: every built-in kind (positives, negatives, boundaries), overlaps,
trimming, ASCII digits, context gates, and the time budget."""

from __future__ import annotations

import time

import pytest

from lexkeep.core.identifiers import extract
from lexkeep.core.rules import RuleSet, default_rules


def found(text: str) -> list[tuple[str, str]]:
    """(kind, value) pairs, checking every span against the text on the way."""
    result = extract(text)
    assert result.complete
    for ident in result.identifiers:
        assert text[ident.start : ident.end] == ident.value
    return [(i.kind, i.value) for i in result.identifiers]


POSITIVES = [
    # tier A
    ("see https://x.io/a?b=1 now", [("url", "https://x.io/a?b=1")]),
    (
        "docs: https://en.wikipedia.org/wiki/Foo_(bar).",
        [("url", "https://en.wikipedia.org/wiki/Foo_(bar)")],
    ),
    ("(at https://x.io/a)", [("url", "https://x.io/a")]),
    ("[label](https://x.io/b), then", [("url", "https://x.io/b")]),
    ("mail ann.lee+x@example.co.uk.", [("email", "ann.lee+x@example.co.uk")]),
    ("clone git@github.com:org/repo.git now", [("scp_remote", "git@github.com:org/repo.git")]),
    (
        "id 123e4567-e89b-12d3-a456-426614174000;",
        [("uuid", "123e4567-e89b-12d3-a456-426614174000")],
    ),
    ("at 2025-08-14T10:30:00Z sharp", [("iso_datetime", "2025-08-14T10:30:00Z")]),
    ("for 2025-08-13?", [("date_iso", "2025-08-13")]),
    ("ping 10.0.0.12:8080.", [("ipv4", "10.0.0.12:8080")]),
    ("host fe80::1ff:fe23:4567:890a up", [("ipv6", "fe80::1ff:fe23:4567:890a")]),
    ("mac 00:1A:2B:3C:4D:5E", [("mac", "00:1A:2B:3C:4D:5E")]),
    ("commit 9fceb02d0ae5 broke it", [("hex", "9fceb02d0ae5")]),
    ("fixes CVE-2024-3094.", [("cve", "CVE-2024-3094")]),
    ("tail /var/log/app.log.", [("path_posix", "/var/log/app.log")]),
    (r"open C:\Users\x\a.txt, please", [("path_win", r"C:\Users\x\a.txt")]),
    # tier B
    ("edit src/foo/bar.py now", [("path_rel", "src/foo/bar.py")]),
    ("on server-prod-01.company.com:8080.", [("hostname", "server-prod-01.company.com:8080")]),
    ("attach offer_letter.pdf.", [("file_name", "offer_letter.pdf")]),
    ("order #W2378156.", [("hash_ref", "#W2378156")]),
    ("post in #ops-alerts.", [("hash_name", "#ops-alerts")]),
    ("see PROJ-1234.", [("ticket", "PROJ-1234")]),
    ("invoice INV-2025-08-44719 is due", [("compound_code", "INV-2025-08-44719")]),
    ("got ERR_CONN_RESET again", [("const_code", "ERR_CONN_RESET")]),
    ("user yusuf_rossi_9620 here", [("snake_id", "yusuf_rossi_9620")]),
    ("status in_progress", [("snake_id", "in_progress")]),
    ("manager rm-de-10 is", [("kebab_id", "rm-de-10")]),
    ("key cus_NffrFeUfNV2Hib ok", [("prefixed_token", "cus_NffrFeUfNV2Hib")]),
    ("cc @octocat.", [("handle", "@octocat")]),
    ("token 'abc123xyz' ok", [("quoted_code", "abc123xyz")]),
    ("access code 12345-67890.", [("dashed_number", "12345-67890")]),
    ("my password is securePass123.", [("keyed_code", "securePass123")]),
    ("call +1 415-555-0132 today", [("phone", "+1 415-555-0132")]),
    ("call (415) 555-0199.", [("phone", "(415) 555-0199")]),
    ("card 4111 1111 1111 1111", [("card_number", "4111 1111 1111 1111")]),
    ("pay to DE89 3704 0044 0532 0130 00", [("iban", "DE89 3704 0044 0532 0130 00")]),
    ("tracking 9400 1112 0200 1234 5678 90", [("digit_groups", "9400 1112 0200 1234 5678 90")]),
    ("UPS 1Z 999 AA1 01 2345 678 4", [("ups_tracking", "1Z 999 AA1 01 2345 678 4")]),
    ("product 1656367028 please", [("digit_run", "1656367028")]),
    ("flight HAT136 and code 8JX2QD", [("alnum_code", "HAT136"), ("alnum_code", "8JX2QD")]),
    ("labelled 'needs-review'.", [("quoted_token", "needs-review")]),
    ("on branch feature/new-renderer.", [("branch_name", "feature/new-renderer")]),
    # tier C: only after a context word
    ("my zip is 19122.", [("short_number", "19122")]),
    ("zip 19122-1234", [("zip_plus4", "19122-1234")]),
    ("card ending in 7447", [("short_number", "7447")]),
    ("the API returned HTTP 503", [("http_status", "503")]),
    ("departing on May 20", [("date_text", "May 20")]),
    ("account 1234-5678-9012", [("keyed_number", "1234-5678-9012")]),
]


@pytest.mark.parametrize(("text", "expected"), POSITIVES, ids=[e[0][0] for _, e in POSITIVES])
def test_positive(text: str, expected: list[tuple[str, str]]) -> None:
    assert found(text) == expected


NEGATIVES = [
    "It costs $1,234.56 or 12 USD.",  # money
    "Growth was 12.5% this year.",  # percent
    "The file is 144.2 MB and took 250ms.",  # quantities
    "Upgrade to v2.0.1 or Python 3.11.4.",  # versions
    "Meet at 10:30am or 14:05:33.",  # clock times
    "Back in 2024, and again in 1999.",  # bare years
    "Read README.md, setup.py and main.rs.",  # plain file names
    "Use UTF-8, SHA-256 and GPT-4 on ARM64.",  # tech vocabulary
    "This is a well-known follow-up.",  # hyphenated words
    "and/or km/h 1/2 24/7",  # slashes in prose
    "#python is fun ###STOP###",  # hashtags and markers
    "I have 12345 apples",  # bare 5-digit number, no context word
    "version 7.1.17.0 is out",  # 4-part version, not an IPv4 address
    "123456 and 000000 are placeholders",  # sequential / repeated digits
    "the colour #ff00aa",  # CSS colour
    "Node.js and os.system and e.g. this",  # dotted words
    "you may 20 times",  # 'may' is not a month here
    "Sales in 2019 2020 2021 grew.",  # a list of years
    "We compared 2019 2020 2021 2022 and 2023.",
]


@pytest.mark.parametrize("text", NEGATIVES)
def test_negative(text: str) -> None:
    assert found(text) == []


def test_url_wins_over_path_and_host_inside_it() -> None:
    assert found("go to https://x.example.com/src/app.py?id=1656367028 now") == [
        ("url", "https://x.example.com/src/app.py?id=1656367028")
    ]


def test_uuid_wins_over_digits_inside_it() -> None:
    text = "110bcd25-a55d-453a-8046-1297901ea002"
    assert found(text) == [("uuid", text)]


def test_iso_datetime_wins_over_its_date() -> None:
    assert found("2025-08-14T10:30:00Z") == [("iso_datetime", "2025-08-14T10:30:00Z")]


def test_email_claims_the_handle_inside_it() -> None:
    assert found("ann@example.org") == [("email", "ann@example.org")]


def test_spans_are_exact_offsets_of_the_original_text() -> None:
    text = "Héllo — order #W2378156, thanks"
    [ident] = extract(text).identifiers
    assert (ident.start, ident.end) == (14, 23)
    assert text[ident.start : ident.end] == "#W2378156"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("(order #W2378156)", "#W2378156"),
        ('"INV-2025-08-44719"', "INV-2025-08-44719"),
        ("see https://x.io/a).", "https://x.io/a"),
        ("**https://x.io/b**", "https://x.io/b"),
        ("path /var/log/app.log;", "/var/log/app.log"),
        ("INV-2025-08-44719: failed", "INV-2025-08-44719"),
    ],
)
def test_trailing_punctuation_and_unbalanced_brackets_are_stripped(text: str, value: str) -> None:
    assert [v for _, v in found(text)] == [value]


@pytest.mark.parametrize(
    "text",
    [
        "xINV-2025-08-44719",  # glued to a letter on the left
        "INV-2025-08-44719x",  # glued to a letter on the right
        "1656367028z",
        "z1656367028",
    ],
)
def test_identifiers_glued_to_letters_are_not_cut_out(text: str) -> None:
    assert found(text) == []


# A match is never cut to a partial span: a longer token gives the whole of it, or nothing.
WHOLE_OR_NOTHING = [
    # Claude Code's file mentions: the agent opens the path, never "@src/app/main.py"
    ("open @src/app/main.py please", [("path_rel", "src/app/main.py")]),
    ("(@public/tokenizer.css)", [("path_rel", "public/tokenizer.css")]),
    (
        "in node_modules/@types/node/index.d.ts",
        [("path_rel", "node_modules/@types/node/index.d.ts")],
    ),
    ("Please add these in @README.md too", []),
    # a relative path is the whole token, not the part up to its extension
    ("edit src/foo/bar.py-old now", [("path_rel", "src/foo/bar.py-old")]),
    (
        "cp config/app.yaml config/app.yaml-old",
        [("path_rel", "config/app.yaml"), ("path_rel", "config/app.yaml-old")],
    ),
    ("tail logs/app.log.1", [("path_rel", "logs/app.log.1")]),
    ("open src/app.ts.Then run it", [("path_rel", "src/app.ts")]),  # a missing space
    (
        "see assets/logo.svg@2x and src/a.py+b.",
        [("path_rel", "assets/logo.svg@2x"), ("path_rel", "src/a.py+b")],
    ),
    ("see src/app.ts.", [("path_rel", "src/app.ts")]),
    ("open src/Bar.Py-old", []),  # no lower-case extension anywhere in its last name
    ("move it to @vercel.json and @next.config.js", []),
    ("cc @octocat and @ann.lee", [("handle", "@octocat"), ("handle", "@ann.lee")]),
    # quotes escaped inside pasted JSON open and close no quoted token
    ('{"v": "<svg stroke-linecap=\\"round\\" id=\\"shareBtn\\">"}', []),
    ('{"v": "<link rel=\\"icon\\" type=\\"image/svg+xml\\">"}', []),
    # a tier C number followed by '-' and more: a ZIP+4, a code, a range
    ("zip 19122-1234", [("zip_plus4", "19122-1234")]),
    ("postal code: 19122-1234.", [("zip_plus4", "19122-1234")]),
    ("zip 19122-12345", [("dashed_number", "19122-12345")]),  # whole: no short_number piece
    ("order 12345-6789", [("dashed_number", "12345-6789")]),
    ("room 101-B", []),
    ("ad set 101-105", []),
    ("status 200-299", []),
    ("product 1656367028-2", [("dashed_number", "1656367028-2")]),  # no digit_run piece
    # a card number in groups: one identifier, never a phone and a short number
    ("card 4111 1111 1111 1111", [("card_number", "4111 1111 1111 1111")]),
    ("card number: 4111-1111-1111-1111.", [("card_number", "4111-1111-1111-1111")]),
    ("amex 3782 822463 10005, exp 12/26", [("card_number", "3782 822463 10005")]),
    ("card 4111 1111 1111 1111 12/26", [("card_number", "4111 1111 1111 1111")]),
    ("call 415 555 0132", [("phone", "415 555 0132")]),
    # an IBAN in groups: one identifier, not a code, a card and a phone
    (
        "IBAN: GB29 NWBK 6016 1331 9268 19, BIC NWBKGB2L.",
        [("iban", "GB29 NWBK 6016 1331 9268 19"), ("alnum_code", "NWBKGB2L")],
    ),
    (
        "refund to FR14 2004 1010 0505 0001 3M02 606",
        [("iban", "FR14 2004 1010 0505 0001 3M02 606")],
    ),
    ("iban GB29NWBK60161331926819 ok", [("iban", "GB29NWBK60161331926819")]),
    ("code GB29NWBK60161331926818 ok", [("alnum_code", "GB29NWBK60161331926818")]),  # mod 97
    ("AB12 CODE WORD TEXT", [("alnum_code", "AB12")]),  # no IBAN: too few digits
    ("iban de89 3704 0044 0532 0130 00 ok", [("iban", "de89 3704 0044 0532 0130 00")]),
    # an IBAN whose last group is full (Belgium: 16 characters) before a short word: the word
    # is no last group of the IBAN
    ("pay BE68 5390 0754 7034 now", [("iban", "BE68 5390 0754 7034")]),
    ("pay be68 5390 0754 7034 now", [("iban", "be68 5390 0754 7034")]),
    ("pay BE68 5390 0754 7034 to me", [("iban", "BE68 5390 0754 7034")]),
    ("NO93 8601 1117 947 ok", [("iban", "NO93 8601 1117 947")]),
    # in lower case and groups, a mistyped IBAN (bad mod-97) of its country's length is still
    # an IBAN, not a card number inside it; run together, only the check tells a code from one
    ("iban de89 3704 0044 0532 0130 01 ok", [("iban", "de89 3704 0044 0532 0130 01")]),
    ("iban gb29 nwbk 6016 1331 9268 18.", [("iban", "gb29 nwbk 6016 1331 9268 18")]),
    ("iban De89 3704 0044 0532 0130 01", [("iban", "De89 3704 0044 0532 0130 01")]),
    (
        "iban de89 3704 0044 0532 0130 0 ok",
        [("card_number", "3704 0044 0532 0130")],
    ),  # no IBAN: a known limit
    (
        "iban xx89 3704 0044 0532 0130 01 ok",
        [("card_number", "3704 0044 0532 0130")],
    ),  # no IBAN: a known limit
    # a tracking number in groups of four: one identifier, not a phone piece
    (
        "USPS 9400 1112 0200 1234 5678 90 arrives",
        [("digit_groups", "9400 1112 0200 1234 5678 90")],
    ),
    ("ref 4111 1111 1111 1111 1111", [("digit_groups", "4111 1111 1111 1111 1111")]),
    # numbers in space-separated groups: the whole number or nothing, never a phone piece
    ("in 2021 2022 2023 2024 2025 sales grew", []),  # a list of years
    ("sales in 2019 2020 2021 grew", []),
    ("in 2019 2020 2021 2022 we grew", []),  # four years are no card number
    ("account 0012 3456 7890", [("digit_groups", "0012 3456 7890")]),
    ("account 0012 3456 7890 12", [("digit_groups", "0012 3456 7890 12")]),
    ("card 4111 1111 1111", [("digit_groups", "4111 1111 1111")]),
    ("order 1234 5678 90", []),
    ("call 415 555 0132 1234", []),
    ("call 1 415 555 0132 1234", []),
    ("call +49 30 1234 5678 9", [("phone", "+49 30 1234 5678 9")]),
    ("call +49 (0)30 1234 5678.", [("phone", "+49 (0)30 1234 5678")]),
    ("call +33 1 23 45 67 89", [("phone", "+33 1 23 45 67 89")]),
    ("call +91 98765 43210", [("phone", "+91 98765 43210")]),
    ("call +44 20 7946 0958 today", [("phone", "+44 20 7946 0958")]),
    ("call +1 (415) 555-0199", [("phone", "+1 (415) 555-0199")]),
    ("call +1(415)555-0199", [("phone", "+1(415)555-0199")]),
    ("phones 415-555-0132 415-555-0199", [("phone", "415-555-0132"), ("phone", "415-555-0199")]),
    ("call +1 415-555-0132 250ms", [("phone", "+1 415-555-0132")]),
    ("call +49 30 1234 5678 9012 345", []),  # more digits than any phone number holds
    ("see x:4111 1111 1111 1111", []),
    ("UPS 1Z 999 AA1 01 2345 678 4 arrives", [("ups_tracking", "1Z 999 AA1 01 2345 678 4")]),
    ("UPS 1Z 999 AA1 01 2345 6784.", [("ups_tracking", "1Z 999 AA1 01 2345 6784")]),
    ("UPS 1Z999AA10123456784", [("alnum_code", "1Z999AA10123456784")]),
    ("ref AB1 23 4567 890", []),
    # an scp-style remote (git, scp, rsync): the whole remote, never the email inside it
    ("git@github.com:org/repo.git", [("scp_remote", "git@github.com:org/repo.git")]),
    (
        "clone 'git@gitlab.com:group/sub/repo.git'.",
        [("scp_remote", "git@gitlab.com:group/sub/repo.git")],
    ),
    ("scp a.tgz deploy@10.0.0.5:/var/www/app", [("scp_remote", "deploy@10.0.0.5:/var/www/app")]),
    (
        "rsync -a x/ ubuntu@ec2.example.com:~/backups/",
        [("scp_remote", "ubuntu@ec2.example.com:~/backups/")],
    ),
    ("git@github.com:org/repo.git#main", []),
    ("the git@github.com: prefix", [("email", "git@github.com")]),
    ("mail ann@example.org: done", [("email", "ann@example.org")]),
]


@pytest.mark.parametrize(("text", "expected"), WHOLE_OR_NOTHING)
def test_a_longer_token_is_never_cut_to_a_piece(text: str, expected: list[tuple[str, str]]) -> None:
    assert found(text) == expected


def test_a_long_path_is_whole_or_nothing() -> None:
    # A name over 255 characters is no path segment (NAME_MAX): nothing, not its first 255.
    assert found(f"tail /tmp/{'a' * 300}/app.log") == []
    assert found(f"tail /tmp/{'a' * 255}/app.log") == [("path_posix", f"/tmp/{'a' * 255}/app.log")]
    # Deeper than 65 segments: the whole path, not its first 65 segments.
    deep = "/" + "/".join(["ab"] * 70) + "/app.log"
    assert found(f"see {deep}.") == [("path_posix", deep)]
    # Longer than PATH_MAX allows (2,048 segments): nothing.
    assert found("/ab" * 2100) == []
    assert found("ls /var/log//app.log") == []


def test_a_long_url_is_whole() -> None:
    # Past 4,096 characters a URL was cut, and the rest of it gave pieces (a digit_run).
    url = f"https://x.io/a?q={'a' * 5000}&id=1656367028"
    assert found(f"see {url} now") == [("url", url)]
    url = f"https://x.io/{'b1/' * 4000}?id=1656367028"
    assert found(f"({url}).") == [("url", url)]


def test_a_long_windows_path_is_whole_or_nothing() -> None:
    assert found(f"open C:\\x\\{'a' * 300}\\app.log") == []
    deep = "C:\\" + "\\".join(["ab"] * 70) + "\\app.log"
    assert found(f"open {deep}.") == [("path_win", deep)]
    assert found("C:" + "\\ab" * 2100) == []
    assert found("open C:\\logs\\\\app.log") == []


def test_non_ascii_digits_are_not_digits() -> None:
    # Arabic-Indic and fullwidth digits would never match the ASCII an agent types.
    assert found("order ١٦٥٦٣٦٧٠٢٨ and １６５６３６７０２８") == []


def test_no_global_ignore_case() -> None:
    # Upper-case shapes never match lower-case text (lower-case ids have their own kinds).
    upper_only = {"ticket", "compound_code", "const_code", "alnum_code", "cve"}
    kinds = {kind for kind, _ in found("proj-1234 inv-2025-08-44719 err_conn_reset hat136")}
    assert kinds.isdisjoint(upper_only)
    assert found("the hat136 and err_conn") == [("snake_id", "err_conn")]


def test_tier_c_needs_the_context_word_before() -> None:
    assert found("19122 is my zip") == []
    assert found("zip code 19122") == [("short_number", "19122")]
    # no zip_plus4 without the word before it; the whole number is still a dashed_number
    assert found("19122-1234 is my zip") == [("dashed_number", "19122-1234")]


def test_every_builtin_kind_is_exercised_here() -> None:
    # Suppressors are exercised by NEGATIVES; every reported kind has a positive above.
    reported = {k.id for k in default_rules().kinds if not k.suppressor}
    covered = {kind for _, expected in POSITIVES for kind, _ in expected}
    assert reported - covered == set()


def _adversarial(n: int = 100_000) -> dict[str, str]:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    return {
        "digits": "1" * n,
        "dashes": "1-" * (n // 2),
        "slashes": "/a" * (n // 2),
        "base64": "".join(alphabet[(i * 37 + i // 7) % 64] for i in range(n)),
        "dots": "1." * (n // 2),
        "spaced": "1 " * (n // 2),
    }


@pytest.mark.parametrize("name", sorted(_adversarial()))
def test_100kb_adversarial_input_stays_bounded(name: str) -> None:
    text = _adversarial()[name]
    default_rules()  # loading is not part of the budget
    start = time.perf_counter()
    result = extract(text)
    elapsed = time.perf_counter() - start
    # The engine stops at the 50 ms budget; Python work between calls adds a little. A scan
    # that ran out says so instead of pretending to be complete.
    assert elapsed < 1.0
    for ident in result.identifiers:
        assert text[ident.start : ident.end] == ident.value


def test_budget_exhaustion_marks_the_scan_incomplete() -> None:
    from lexkeep.core.rules import build_rules

    tight = build_rules({"settings": {"timeout_ms": 1}}, origin="tight.toml")
    text = "order 1656367028 at https://x.io/a " * 3000
    assert extract(text, tight).complete is False


def test_text_longer_than_max_chars_is_incomplete() -> None:
    from lexkeep.core.rules import build_rules

    short = build_rules({"settings": {"max_chars": 10}}, origin="short.toml")
    result = extract("order #W2378156 and more", short)
    assert result.complete is False
    assert result.identifiers == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A version word a few words back does not make an address a version.
        (
            "deploy build 7f3e2a1b9c to 10.20.30.40",
            [("hex", "7f3e2a1b9c"), ("ipv4", "10.20.30.40")],
        ),
        ("the release went to 10.0.0.7 and 10.0.0.8", [("ipv4", "10.0.0.7"), ("ipv4", "10.0.0.8")]),
        ("after the build, ssh 192.168.1.20", [("ipv4", "192.168.1.20")]),
    ],
)
def test_an_address_near_a_version_word_is_found(
    text: str, expected: list[tuple[str, str]]
) -> None:
    assert found(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "release 1.2.3.4 is out",
        "build 7.1.17.0 passed",
        "Windows build 10.0.19041.1",
        "firmware: 7.1.17.0",
        "(version 4.2.1.0)",
        "ver. 1.0.0.3",
    ],
)
def test_a_four_part_version_right_after_a_version_word_is_no_address(text: str) -> None:
    assert [kind for kind, _ in found(text) if kind == "ipv4"] == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("edit app/[slug]/page.tsx now", "app/[slug]/page.tsx"),
        ("see pages/[...slug].tsx", "pages/[...slug].tsx"),
        ("in app/(marketing)/about/page.tsx.", "app/(marketing)/about/page.tsx"),
        ("open src/routes/[id]/+page.svelte", "src/routes/[id]/+page.svelte"),
        ("(app/[[...slug]]/page.tsx)", "app/[[...slug]]/page.tsx"),
        ("src/routes/[[lang]]/(app)/+layout.ts", "src/routes/[[lang]]/(app)/+layout.ts"),
        ("src/app/api/[id]/route.ts", "src/app/api/[id]/route.ts"),
        ("src/routes/blog/[slug=word]/+page.ts", "src/routes/blog/[slug=word]/+page.ts"),
        ("app/@modal/(group)/[id]/page.tsx", "app/@modal/(group)/[id]/page.tsx"),
    ],
)
def test_route_paths_with_brackets_are_whole(text: str, value: str) -> None:
    assert found(text) == [("path_rel", value)]


@pytest.mark.parametrize(
    "text",
    [
        "see [docs]/(intro)/a.md",  # a path does not start with a bracket
        "arr[i]/n.x and f(x)/g.y",  # brackets glued to a word are code, not a segment
        "data/[0].json",  # a route parameter is a name
        "a/[b c]/d.md",  # no spaces in a segment
        "app/[slug/page.tsx",  # unbalanced
        "app/(x]/page.tsx",
        "app/[[slug]/page.tsx",
        "app/[/page.tsx",
    ],
)
def test_prose_with_brackets_is_no_route_path(text: str) -> None:
    # A path after a bracket may be found ("[src/app.ts]"), never one holding a bracket.
    assert [v for kind, v in found(text) if "[" in v or "(" in v] == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("edit /srv/web/app/[slug]/page.tsx now", "/srv/web/app/[slug]/page.tsx"),
        ("edit ./app/(marketing)/about/page.tsx", "./app/(marketing)/about/page.tsx"),
        ("in ~/site/pages/[...slug].tsx", "~/site/pages/[...slug].tsx"),
        ("under /repo/src/routes/[[lang]]/", "/repo/src/routes/[[lang]]/"),
    ],
)
def test_absolute_route_paths_are_whole(text: str, value: str) -> None:
    assert found(text) == [("path_posix", value)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("see /srv/app/[0]/x.json", []),  # a folder not taken is no reason to cut the path
        ("see /srv/app/(a b)/x", []),
        ("see /etc/hosts[1] and /usr/bin/ls(1)", ["/etc/hosts", "/usr/bin/ls"]),
        ("logs in /var/log/(/tmp too)", ["/var/log/", "/tmp"]),
    ],
)
def test_absolute_paths_with_other_brackets_are_whole_or_nothing(
    text: str, expected: list[str]
) -> None:
    assert [v for kind, v in found(text) if kind == "path_posix"] == expected


@pytest.mark.parametrize(
    "text",
    [
        "sizes 100 200 300 tried",
        "widths 10 200 300",
        "1 100 200 300",
        "call 612 345 678",  # three groups of three: a list, unless written with + or dashes
    ],
)
def test_three_short_numbers_are_no_phone(text: str) -> None:
    assert found(text) == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("call 415 555 0132", "415 555 0132"),
        ("call 020 7946 0958", "020 7946 0958"),
        ("call +34 612 345 678", "+34 612 345 678"),
        ("call (612) 345 678", "(612) 345 678"),
    ],
)
def test_a_phone_in_groups_with_a_group_of_four_or_a_sign_stays_a_phone(
    text: str, value: str
) -> None:
    assert found(text) == [("phone", value)]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("call 415-555-0132 2 times", "415-555-0132"),
        ("at 10:30 415-555-0132", "415-555-0132"),
        ("at 10:30 +1 415-555-0132", "+1 415-555-0132"),
        ("call +1 415-555-0132 3 times", "+1 415-555-0132"),
        ("room 12 (415) 555-0199", "(415) 555-0199"),
        ("call 1-800-555-0199 3 times", "1-800-555-0199"),
        ("dial 415-555-0132 1234 is the pin", "415-555-0132"),
        ("on 2 +49 30 1234 5678", "+49 30 1234 5678"),  # a "+" starts a number
        ("at 10:30 +49 30 1234 5678", "+49 30 1234 5678"),
        ("ref AB1 1 415-555-0132", "1 415-555-0132"),
    ],
)
def test_a_phone_in_dashes_next_to_a_bare_number_is_found(text: str, value: str) -> None:
    """The number beside it is no further group of it: its groups are joined by dashes."""
    assert [(k, v) for k, v in found(text) if k == "phone"] == [("phone", value)]


@pytest.mark.parametrize(
    "text",
    [
        "call 415 555 0132 2 times",  # groups with spaces: the 2 may be a further group
        "at 10:30 415 555 0132",
        "ref 12 415 555-0132",
    ],
)
def test_a_phone_in_spaced_groups_next_to_a_number_is_still_nothing(text: str) -> None:
    assert [v for k, v in found(text) if k == "phone"] == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        # Mauritius and Seychelles IBANs end in a currency code: the last group is letters
        # that an amount or a quantity would otherwise claim ("000M", "1497 USD")
        ("pay MU17 BOMM 0101 1010 3030 0200 000M UR now", "MU17 BOMM 0101 1010 3030 0200 000M UR"),
        ("pay SC18 SSCB 1101 0000 0000 0000 1497 USD.", "SC18 SSCB 1101 0000 0000 0000 1497 USD"),
        ("iban mu17 bomm 0101 1010 3030 0200 000m ur", "mu17 bomm 0101 1010 3030 0200 000m ur"),
        ("iban sc18 sscb 1101 0000 0000 0000 1497 usd", "sc18 sscb 1101 0000 0000 0000 1497 usd"),
        ("iban MU17BOMM0101101030300200000MUR", "MU17BOMM0101101030300200000MUR"),
        ("QA58 DOHB 0000 1234 5678 90AB CDEF G", "QA58 DOHB 0000 1234 5678 90AB CDEF G"),
        # run together and valid, an IBAN of hex letters is an IBAN, not a hex hash
        ("iban DE89370400440532013000", "DE89370400440532013000"),
        ("iban BE68539007547034 ok", "BE68539007547034"),
    ],
)
def test_ibans_whose_groups_read_as_amounts_or_hex_are_ibans(text: str, value: str) -> None:
    assert found(text) == [("iban", value)]


@pytest.mark.parametrize(
    "text",
    [
        "pay BE68 5390 0754 7034 USD",  # a currency after a whole Belgian IBAN is no group of it
        "MU17 BOMM 0101 1010 3030 0200 UR",  # letters where a Mauritius IBAN is too short
        "at DE89 3704 0044 10:30",  # no IBAN cut before a clock time
        "v DE89 3704 0044 10.5",
    ],
)
def test_no_iban_takes_letters_or_numbers_that_are_no_part_of_it(text: str) -> None:
    assert [v for k, v in found(text) if k == "iban"] == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("see node_modules/@types/node/ for it", "node_modules/@types/node/"),
        ("look in src/components/.", "src/components/"),
        ("(under src/components/)", "src/components/"),
        ("open @src/components/ please", "src/components/"),
        ("the packages/core/src/ folder", "packages/core/src/"),
        ("routes in app/(marketing)/about/", "app/(marketing)/about/"),
        ("call api/v2/users/ now", "api/v2/users/"),
        ("move them to **src/lib/**", "src/lib/"),
    ],
)
def test_a_folder_path_ending_in_a_slash_is_one_path(text: str, value: str) -> None:
    assert found(text) == [("path_rel", value)]


@pytest.mark.parametrize(
    "text",
    [
        "and/or yes/no client/server input/output",
        "use it w/ care, in src/ and lib/",  # one name: a word with a slash as often as a folder
        "red/green/blue and he/she/they",  # no slash at the end: prose
        "glob src/components/*.tsx",  # more than the folder: a pattern, not the folder
        "in src/**/test/",
        "src/components/.github",
        "it is done./next/ ok",  # a name ending in '.': a sentence
        "exp 12/26/ ok",  # numbers alone: a date, not a folder
        "sizes 1/2.5/ ok",
    ],
)
def test_prose_with_slashes_is_no_folder_path(text: str) -> None:
    assert [v for k, v in found(text) if k == "path_rel"] == []


def test_a_relative_path_never_starts_after_a_plus() -> None:
    assert found("see x+src/a.py") == [("path_rel", "x+src/a.py")]
    assert found("see .x+src/a.py now") == []  # not the piece after the '+'


@pytest.mark.parametrize(
    "text",
    [
        "version is 7.1.17.0",
        "the version was 7.1.17.0 yesterday",
        "version = 7.1.17.0",
        "version == 7.1.17.0",
        "version -> 7.1.17.0",
        "firmware version is 4.2.1.0",
        "build number 7.1.17.0",
        "the build is 7.1.17.0",
        "release was 1.2.3.4",
    ],
)
def test_a_four_part_version_after_version_is_or_was_is_no_address(text: str) -> None:
    assert [kind for kind, _ in found(text) if kind == "ipv4"] == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("the release went to 10.0.0.7", "10.0.0.7"),
        ("the release is on 10.0.0.7", "10.0.0.7"),
        ("version 2 is on 10.0.0.5", "10.0.0.5"),
        ("the build is done, ssh 10.0.0.5", "10.0.0.5"),
        ("ship the version to 10.0.0.5", "10.0.0.5"),
    ],
)
def test_an_address_a_word_after_a_version_phrase_is_found(text: str, value: str) -> None:
    assert [v for kind, v in found(text) if kind == "ipv4"] == [value]


@pytest.mark.parametrize(
    "text",
    [
        "card 4111-1111-1111-1111 1111 please",
        "ref 9400-1112-0200 1234 5678",
        "card 4111-1111-1111 1112 please",  # mixed separators and no Luhn check digit
        "card 4111 1111-1111-1112 please",
        "id 1234-5678 9012-3456 please",
        "card 3782-822463 10006 please",
    ],
)
def test_a_number_in_groups_of_four_with_mixed_separators_gives_no_piece(text: str) -> None:
    """A number in groups typed with '-' and ' ' mixed is one number or none: no phone or card
    piece of it, and no card unless its Luhn check digit holds."""
    assert found(text) == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("card 4111-1111-1111 1111 please", "4111-1111-1111 1111"),
        ("card 4111 1111-1111-1111 please", "4111 1111-1111-1111"),
        ("card 4111-1111 1111-1111.", "4111-1111 1111-1111"),
        ("card 5500 0000 0000-0004, exp 12/26", "5500 0000 0000-0004"),
        ("amex 3782-822463 10005", "3782-822463 10005"),
        ("diners 3056 930902-5904", "3056 930902-5904"),
    ],
)
def test_a_card_typed_with_mixed_separators_is_one_card_number(text: str, value: str) -> None:
    """'4111-1111-1111 1111' gave nothing: with its Luhn check digit it is the card, whole."""
    assert found(text) == [("card_number", value)]


@pytest.mark.parametrize(
    "text",
    [
        "try 1000 2000 3000 and compare",
        "batch sizes 1024 2048 4096",
        "at 1500 2500 3500 rpm",
        "try 1000 2000 3000 4000",  # four numbers: no card either
        "try 1000 2000 3000 4000 5000",
        "counts 1200 1400 1600 1800 2000 2200",
    ],
)
def test_a_list_of_round_or_evenly_spaced_numbers_is_no_identifier(text: str) -> None:
    assert found(text) == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("aadhaar 2345 6789 0123", "2345 6789 0123"),
        ("ref 1234 5678 9012", "1234 5678 9012"),
        ("account 0012 3456 7890", "0012 3456 7890"),
        ("ref 1000 2000 3001", "1000 2000 3001"),
    ],
)
def test_a_number_in_groups_that_is_no_list_is_still_found(text: str, value: str) -> None:
    assert found(text) == [("digit_groups", value)]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("node_modules/@types/node", "node_modules/@types/node"),
        ("look in node_modules/@types/node.", "node_modules/@types/node"),
        ("see packages/@scope/pkg/src now", "packages/@scope/pkg/src"),
        ("(node_modules/@babel/core)", "node_modules/@babel/core"),
    ],
)
def test_a_path_through_an_npm_scope_is_one_path(text: str, value: str) -> None:
    assert found(text) == [("path_rel", value)]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("https://ex.example/a?b=<script>", "https://ex.example/a"),
        ("open https://ex.example/a?id=7&b=<x> now", "https://ex.example/a?id=7"),
        ('fetch "https://ex.example/search?q=" please', "https://ex.example/search"),
        ("see https://ex.example/a/?b=.", "https://ex.example/a/"),
        # a value that ends in '=' is a whole value (base64 padding), not a cut-off one
        ("https://ex.example/a?t=YWJj=", "https://ex.example/a?t=YWJj="),
        ("https://ex.example/a?b=1", "https://ex.example/a?b=1"),
    ],
)
def test_a_url_ends_before_a_query_parameter_left_without_its_value(text: str, value: str) -> None:
    assert found(text) == [("url", value)]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("book it with access token 'abc123xyz' please", "abc123xyz"),
        ("my username 'john' and password 'john1234'.", "john1234"),
        ("password is `securePass123`", "securePass123"),
        ("the organization ID is `00D8d000000KxyzABC` now", "00D8d000000KxyzABC"),
        ("peek at 'Spring2023Draft' for review", "Spring2023Draft"),
    ],
)
def test_a_quoted_run_of_letters_and_digits_is_one_identifier(text: str, value: str) -> None:
    assert found(text) == [("quoted_code", value)]


@pytest.mark.parametrize(
    "text",
    ["the 'v2' api", "'abc1' is short", "say 'hello'", "'123456' only digits", "'COVID19' data"],
)
def test_short_quoted_words_versions_and_numbers_are_no_quoted_code(text: str) -> None:
    assert [kind for kind, _ in found(text) if kind == "quoted_code"] == []


def test_a_quoted_upper_case_code_stays_an_alnum_code() -> None:
    assert found("The publisher ID is 'PUB001'.") == [("alnum_code", "PUB001")]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("use my access code 12345-67890 for verification", "12345-67890"),
        ("order 112-4567890-1234567 never arrived", "112-4567890-1234567"),
        ("SSN 123-45-6789.", "123-45-6789"),
        ("ISBN 978-3-16-148410-0", "978-3-16-148410-0"),
        ("job 1656367028-2 failed", "1656367028-2"),
    ],
)
def test_a_number_in_groups_joined_by_dashes_is_one_identifier(text: str, value: str) -> None:
    assert found(text) == [("dashed_number", value)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("see lines 1153-1175 of the file", []),  # a range
        ("salary 50000-60000 a year", []),
        ("open 0900-1700 daily", []),
        ("from 2019-2020 on", []),
        ("due 2024-13-20", []),  # a mistyped date, not a number
        ("card 4111 1111-1111 1112", []),  # typed loosely and no Luhn check: nothing
        ("card 4111 1111-1111 1111", [("card_number", "4111 1111-1111 1111")]),
        ("zip 19122-1234", [("zip_plus4", "19122-1234")]),
        ("call 415-555-0132", [("phone", "415-555-0132")]),
        ("on 2025-08-14", [("date_iso", "2025-08-14")]),
        ("card 4111-1111-1111-1111", [("card_number", "4111-1111-1111-1111")]),
    ],
)
def test_ranges_dates_phones_and_cards_are_no_dashed_number(
    text: str, expected: list[tuple[str, str]]
) -> None:
    assert found(text) == expected


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("my user name is dr_x and password is securePass123.", "securePass123"),
        ("using the access token abc123xyz?", "abc123xyz"),
        ("access token (abc123xyz456), traveler details", "abc123xyz456"),
        ("user name john1234, please", "john1234"),
    ],
)
def test_a_bare_password_or_token_after_its_word_is_one_identifier(text: str, value: str) -> None:
    assert [v for kind, v in found(text) if kind == "keyed_code"] == [value]


@pytest.mark.parametrize(
    "text",
    [
        "securePass123 alone",  # no context word before it
        "my password is secret",  # no digit
        "the token abc12 is short",
        "the key 123456",  # no letter
        "password SECURE123 in capitals",  # an alnum_code already
    ],
)
def test_no_keyed_code_without_its_word_a_letter_and_a_digit(text: str) -> None:
    assert [kind for kind, _ in found(text) if kind == "keyed_code"] == []


@pytest.mark.parametrize(
    "text",
    [
        "a rate of 1.5E10 per second",  # scientific notation
        '<path d="M534.135C745.736 516.7 750.015 497.644L426.389 324.876C425.561 321"/>',
        "build 3.ABC1234 failed",
    ],
)
def test_no_code_or_hash_piece_inside_a_number_with_a_dot(text: str) -> None:
    assert [kind for kind, _ in found(text) if kind in {"alnum_code", "hex"}] == []


def test_a_code_or_hash_ending_a_sentence_is_still_found() -> None:
    assert found("code HAT136. Then commit 9fceb02.") == [
        ("alnum_code", "HAT136"),
        ("hex", "9fceb02"),
    ]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("account 1234-5678-9012", "1234-5678-9012"),
        ("acct 1234-5678-9012 please", "1234-5678-9012"),
        ("my account no. 1234-5678-9012.", "1234-5678-9012"),
        ("ref 1234-5678-9012", "1234-5678-9012"),
        ("Reference: 1234-5678-9012", "1234-5678-9012"),
        ("account number is 415-555-0132", "415-555-0132"),  # the word says what it is
        ("account # 123-456-7890", "123-456-7890"),
    ],
)
def test_a_dashed_number_after_an_account_or_reference_word_is_no_phone(
    text: str, value: str
) -> None:
    assert found(text) == [("keyed_number", value)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # 12 digits in groups of four joined by '-' or '.': no phone number in any plan
        ("use 1234-5678-9012 for it", [("dashed_number", "1234-5678-9012")]),
        ("the code 1234.5678.9012 failed", []),
        # without such a word, a phone shape stays a phone
        ("call 415-555-0132", [("phone", "415-555-0132")]),
        # a "+" and a country code say phone whatever word is before it
        ("account phone +1 415-555-0132", [("phone", "+1 415-555-0132")]),
        # a date is a date after any word
        ("ref 2024-05-20", [("date_iso", "2024-05-20")]),
        ("ref lines 1153-1175", []),  # a range
    ],
)
def test_four_four_four_digits_are_no_phone(text: str, expected: list[tuple[str, str]]) -> None:
    assert found(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "the order was placed in 2024",
        "order 1234 placed in 2023",
        "customer since 1999",
        "ticket from 2019 to 2021",
        "the order from March 2024 never came",
        "order placed in early 2024",
        "my account dates from 1998",
    ],
)
def test_a_year_after_its_preposition_is_no_short_number(text: str) -> None:
    assert [v for k, v in found(text) if k == "short_number" and v.startswith(("19", "20"))] == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("card ending in 2024", "2024"),  # last four digits that look like a year
        ("zip 2000", "2000"),  # a postcode (Sydney)
        ("room 1999 please", "1999"),
        ("order 1234 placed in 2023", "1234"),
    ],
)
def test_a_number_the_context_word_names_stays_a_short_number(text: str, value: str) -> None:
    assert found(text) == [("short_number", value)]


def _only(kinds: set[str], timeout_ms: int) -> RuleSet:
    """The built-in rules with every kind but `kinds` disabled, under a budget of timeout_ms
    (and texts up to 2 MB)."""
    from lexkeep.core.rules import build_rules

    disabled = [kind.id for kind in default_rules().kinds if kind.id not in kinds]
    settings = {"timeout_ms": timeout_ms, "max_chars": 2_000_000}
    return build_rules({"disabled": disabled, "settings": settings}, origin="tight.toml")


@pytest.mark.parametrize("selector", [False, True])
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Few candidates: the suppressors still run around them, and the number no suppressor
        # claims is reported. The filler costs the budget: digit_run may start at each of its
        # words (after a space) and never matches one.
        ("we have 1000000 users now, order 7391846 shipped. " + "1234567x " * 60_000, ["7391846"]),
        # Candidates all through the text: the suppressors cannot cover them all in the
        # budget, and what they did not cover is not reported.
        ("we have 1000000 users now, " * 20_000, []),
    ],
    ids=["sparse", "dense"],
)
def test_an_incomplete_scan_reports_nothing_a_suppressor_claims(
    text: str, expected: list[str], selector: bool
) -> None:
    """A scan that ran out of budget skipped the suppressors, so `1000000 users` (a quantity)
    was reported as a digit_run: an incomplete scan never reports what a complete one would
    have suppressed. `selector`: the compiled kind selection (long texts in segments) is in
    use, else the trigger windows."""
    from lexkeep.core.identifiers import _plan, forget, prepare

    head = text[:50]
    assert [i.value for i in extract(head).identifiers] == expected  # what a complete scan says
    tight = _only({"digit_run", "quantity"}, 10)
    forget(tight)
    if selector:
        prepare(tight)
        if _plan(tight).selector() is None:
            pytest.skip("the compiled selection needs the hyperscan package")
    try:
        result = extract(text, tight)
    finally:
        forget(tight)
    assert result.complete is False
    assert [i.value for i in result.identifiers] == expected

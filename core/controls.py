"""Characters plain text must not hold, and how output shows them when it does.

Plain text here is text without the characters that drive a terminal, end a string, or make
a reader see something else than what a program or a model reads:

- control characters: every C0 control but tab and line feed (NUL, ESC, BEL, form feed…), a
  carriage return that does not end a line before a line feed (it moves the cursor back over
  what was printed), DEL and the C1 controls U+0080–U+009F (U+009B is CSI, an escape sequence
  in one character);
- bidirectional formatting characters that reorder what follows them (Trojan Source,
  CVE-2021-42574): the embeddings and overrides U+202A–U+202E and the isolates U+2066–U+2069;
- invisible format characters that hide or restyle other text: the deprecated U+206A–U+206F
  (symmetric swapping, Arabic shaping, national digit shapes), the interlinear annotation
  characters U+FFF9–U+FFFB, the tag characters U+E0000–U+E007F (invisible ASCII a model still
  reads) outside an emoji subdivision flag, and a variation selector right after a different
  one (a run of them carries hidden bytes; one after a character is a style, and the same one
  repeated, a common copy-and-paste slip, carries nothing).

Ordinary text stays plain, including its invisible characters that neither reorder nor hide
anything: zero-width joiner U+200D (emoji sequences, Indic scripts), zero-width non-joiner
U+200C (Persian), the directional marks U+200E, U+200F and U+061C (right-to-left text), zero
width space U+200B (Thai, Khmer), word joiner U+2060, U+FEFF, soft hyphen, one variation
selector after a character, and a subdivision flag (U+1F3F4, 2–7 tag letters or digits,
U+E007F).
"""

from __future__ import annotations

import re
import unicodedata

_VS = "\ufe00-\ufe0f\U000e0100-\U000e01ef"
_TAGS = "\U000e0000-\U000e007f"
_BIDI = "\u202a-\u202e\u2066-\u2069"
# One character class (and a carriage return not before a line feed), so that text without
# any of them costs one quick scan. Two kinds of match are ordinary text after all, decided
# by `_allowed`: a variation selector after a character or after the same selector, and the
# tag characters of a subdivision flag.
UNSAFE = re.compile(
    f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_BIDI}\u206a-\u206f\ufff9-\ufffb{_TAGS}{_VS}]|\r(?!\n)"
)
_IS_BIDI = re.compile(f"[{_BIDI}]")
# A subdivision flag: England is U+1F3F4, the tags g b e n g, then CANCEL TAG U+E007F.
_FLAG = re.compile("\U0001f3f4[\U000e0030-\U000e0039\U000e0061-\U000e007a]{2,7}\U000e007f")
_BLACK_FLAG = "\U0001f3f4"


def _is_vs(char: str) -> bool:
    code = ord(char)
    return 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF


def _is_tag(char: str) -> bool:
    return 0xE0000 <= ord(char) <= 0xE007F


def _allowed(m: re.Match[str]) -> bool:
    """A match that is ordinary text after all: a variation selector after a character or
    after the same selector, or a tag character inside a subdivision flag."""
    char, text, at = m.group(), m.string, m.start()
    if _is_vs(char):
        return at == 0 or text[at - 1] == char or not _is_vs(text[at - 1])
    if _is_tag(char):
        start = at
        while start and at - start < 8 and _is_tag(text[start - 1]):
            start -= 1
        if start and text[start - 1] == _BLACK_FLAG:
            flag = _FLAG.match(text, start - 1)
            return flag is not None and flag.end() > at
    return False


def first_control(text: str) -> re.Match[str] | None:
    """The first character of `text` that plain text must not hold, or None."""
    for m in UNSAFE.finditer(text):
        if not _allowed(m):
            return m
    return None


def describe(match: re.Match[str]) -> str:
    """What `first_control` found, for a message: `control character U+001B`, or
    `bidirectional formatting character U+202E (RIGHT-TO-LEFT OVERRIDE)`."""
    char = match.group()[0]
    code = f"U+{ord(char):04X}"
    if _IS_BIDI.match(char):
        return f"bidirectional formatting character {code} ({unicodedata.name(char)})"
    if ord(char) >= 0x200B:
        return f"invisible format character {code} ({unicodedata.name(char, 'unnamed')})"
    return f"control character {code}"


def _escape(m: re.Match[str]) -> str:
    if _allowed(m):
        return m.group()
    code = ord(m.group()[0])
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def visible(text: str) -> str:
    """`text` with each such character written as `\\uXXXX` (`\\UXXXXXXXX` above U+FFFF)."""
    if first_control(text) is None:  # the common case: no copy
        return text
    return UNSAFE.sub(_escape, text)


def _json_escape(m: re.Match[str]) -> str:
    if _allowed(m):
        return m.group()
    code = ord(m.group()[0])
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON spells a character above U+FFFF as a surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


# Every such character outside ASCII starts with one of these bytes in UTF-8 (DEL is 0x7F).
_UNSAFE_LEADS = (b"\xc2", b"\xe2", b"\xef", b"\xf3")


def maybe_unsafe(data: bytes) -> bool:
    """False when UTF-8 `data` surely holds no character outside ASCII's C0 controls that
    plain text must not hold: no DEL, and no byte that starts one in UTF-8.

    A few C-speed byte searches (a report of tens of MB takes milliseconds); a regular
    expression of those bytes took about 20 ns a byte.
    """
    if b"\x7f" in data:
        return True
    return not data.isascii() and any(lead in data for lead in _UNSAFE_LEADS)


def visible_json(data: bytes) -> bytes:
    """JSON text with each such character in its strings written as a `\\uXXXX` escape.

    The document decodes to the same values. For JSON whose C0 controls are already escaped,
    as every JSON writer does (orjson writes DEL, the C1 controls and the rest as they are).
    """
    if not maybe_unsafe(data):
        return data
    text = data.decode("utf-8")
    if first_control(text) is None:
        return data
    return UNSAFE.sub(_json_escape, text).encode("utf-8")

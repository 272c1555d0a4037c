"""Control characters: what plain text must not hold, and how output shows it when it does.

Plain text here is text without the control characters that drive a terminal or end a string:
every C0 control but tab and line feed (NUL, ESC, BEL, form feed…), a carriage return that
does not end a line before a line feed (it moves the cursor back over what was printed), DEL
and the C1 controls U+0080–U+009F (U+009B is CSI, an escape sequence in one character).
"""

from __future__ import annotations

import re

# A carriage return right before a line feed is an ordinary CRLF line end.
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")


def first_control(text: str) -> re.Match[str] | None:
    """The first control character of `text` that plain text must not hold, or None."""
    return CONTROL.search(text)


def visible(text: str) -> str:
    """`text` with each such control character written as the six characters `\\uXXXX`."""
    if CONTROL.search(text) is None:  # the common case: no copy
        return text
    return CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)

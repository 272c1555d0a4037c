"""Laying out a report's rows on a terminal or in a log: a table when it fits, records when not.

A table folds a cell wider than its column at any character, so on an ordinary terminal a
`path:line` came out as slivers that can be neither read nor copied. The human reports use a
table only when its values and `path:line` cells fit whole (`fit_widths`); narrower, each row
is a record, one field a line (`record_lines`), whose values are never broken: a value wider
than the line is written whole, on a line of its own, for the terminal to wrap without
inserting a line break (a copy, or a click on it, then gets the whole of it).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len

# A field's value in a record: whole (an identifier, a path, an id: never broken) or prose
# (a sentence, a list of words: broken at spaces when the line is too narrow).
WHOLE = False
PROSE = True


def longest_word(text: str) -> int:
    """The width, in terminal cells, of the widest space-separated word of `text`."""
    return max((cell_len(word) for word in text.split()), default=0)


def fit_widths(natural: Sequence[int], floors: Sequence[int], room: int) -> list[int] | None:
    """Column widths adding up to at most `room`, or None when the floors alone do not fit.

    Each column starts at its `natural` width (its widest line); the widest one above its
    floor gives up one cell at a time until the columns fit. A floor is what a column must
    keep for no value of it to be broken (a whole `path:line`, the longest word of prose).
    """
    floors = [min(floor, width) for floor, width in zip(floors, natural, strict=True)]
    if sum(floors) > room:
        return None
    widths = list(natural)
    excess = sum(widths) - room
    while excess > 0:
        widest = max(
            (i for i, width in enumerate(widths) if width > floors[i]), key=widths.__getitem__
        )
        widths[widest] -= 1
        excess -= 1
    return widths


def wrap_words(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` cells, broken at spaces only: a word wider than
    that (a path, a URL) stays whole, on a line of its own."""
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        if line and cell_len(line) + 1 + cell_len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return lines


def record_lines(
    fields: Sequence[tuple[str, str, bool]], width: int | None, *, indent: int = 2
) -> list[str]:
    """The lines of one record (record_groups), one list."""
    return [line for group in record_groups(fields, width, indent=indent) for line in group]


def record_groups(
    fields: Sequence[tuple[str, str, bool]], width: int | None, *, indent: int = 2
) -> list[list[str]]:
    """The lines of one record: each (label, value, prose) field as `label  value`, labels
    padded to one width, after `indent` spaces.

    `width` None (a log or a file): each field is one line however long, so a search of the
    log finds it whole. Else a value that does not fit beside its label continues under
    itself, broken at spaces when it is prose; a whole value goes to a line of its own below
    the label. A line that cannot fit at its indent starts at the left edge, and one wider
    than `width` is written anyway: it is never broken. The lines come a list a field, so a
    field can be styled apart.
    """
    label_width = max((cell_len(label) for label, _, _ in fields), default=0)
    lead = indent + label_width + 2
    groups: list[list[str]] = []
    for label, value, prose in fields:
        lines: list[str] = []
        groups.append(lines)
        head = " " * indent + label + " " * (label_width - cell_len(label) + 2)
        if width is None or lead + cell_len(value) <= width:
            lines.append(head + value)
            continue
        beside = width - lead
        if prose and beside > 0 and longest_word(value) <= beside:
            # A sentence continues under itself, aligned after the label.
            first, *rest = wrap_words(value, beside)
            lines.append(head + first)
            lines.extend(" " * lead + part for part in rest)
            continue
        lines.append(head.rstrip())
        below = indent + 2
        parts = wrap_words(value, width - below) if prose else [value]
        lines.extend(
            (" " * below if below + cell_len(part) <= width else "") + part for part in parts
        )
    return groups

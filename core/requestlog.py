"""Which messages of a logged request are new: request logs repeat the conversation so far.

A request log holds one record per API request, each with the conversation's whole message
list as the client sent it. Usually each list is the previous one plus the newest messages, but
clients also drop messages: after an Anthropic `compaction` block the earlier messages go, a
sliding window keeps the system prompt and the latest turns. Numbering messages by their index
in each list then gives a newer message the id of an older one (and it is lost as "already
stored"), and gives a repeated message (a compaction block) a second id.

`RequestLog` numbers a conversation's messages by their place in its timeline instead. Each
list is aligned against the fingerprints of the messages seen so far in the file:

1. when the list starts with the timeline's last k messages (the largest such k), the rest of
   the list is new: the list continues the timeline, whether or not older messages were dropped;
2. otherwise the list is walked in order, each message matched to the next equal message in the
   timeline at or after the previous match (dropped messages are skipped); from the first one
   with no match on, every message of the list is new.

New messages get the next numbers of the timeline. A list that is the previous one plus new
messages gets exactly its own indexes, so such logs keep the ids they always had. A message
typed again (a user writing "ok" twice) follows the whole history the second time, so rule 1
finds it new; a request sent twice adds nothing. The state covers the files of one ingest or
audit read in order from their start (`Continued`: a log rotated into several files, a folder
of per-day files), which keeps the numbers the same on every read of the same files and on
re-reads of a grown one.
"""

from __future__ import annotations

import copy
from bisect import bisect_left
from collections.abc import Callable, Sequence
from hashlib import blake2b
from typing import Any, TypeVar

import orjson

_T = TypeVar("_T")


def fingerprint(value: Any) -> bytes:
    """A digest of a JSON value that ignores key order and `cache_control` marks (a client
    moves its prompt-cache breakpoint to the newest message on every request)."""
    text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    if b'"cache_control"' in text:
        text = orjson.dumps(_unmarked(value), option=orjson.OPT_SORT_KEYS)
    return blake2b(text, digest_size=16).digest()


def _unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


class _Timeline:
    """The fingerprints of one conversation's messages, in timeline order."""

    __slots__ = ("prints", "where")

    def __init__(self) -> None:
        self.prints: list[bytes] = []
        self.where: dict[bytes, list[int]] = {}  # fingerprint -> its indexes, ascending

    def continued_from(self, prints: Sequence[bytes]) -> int:
        """The largest k such that `prints` starts with the timeline's last k messages."""
        known = self.prints
        size = len(known)
        # Candidates are the places of the list's first message, earliest (largest k) first.
        for start in self.where.get(prints[0], ()):
            k = size - start
            if k <= len(prints) and known[start:] == list(prints[:k]):
                return k
        return 0

    def matched(self, prints: Sequence[bytes]) -> int:
        """How many messages of `prints` match the timeline in order (rule 2)."""
        cursor = 0
        for count, fp in enumerate(prints):
            places = self.where.get(fp)
            if not places:
                return count
            at = bisect_left(places, cursor)
            if at == len(places):
                return count
            cursor = places[at] + 1
        return len(prints)

    def append(self, prints: Sequence[bytes]) -> int:
        """Add new messages; the timeline number of the first."""
        first = len(self.prints)
        for n, fp in enumerate(prints, first):
            self.prints.append(fp)
            self.where.setdefault(fp, []).append(n)
        return first


class RequestLog:
    """The timelines of the conversations one file's request records repeat (see module doc)."""

    def __init__(self) -> None:
        self._timelines: dict[str, _Timeline] = {}

    def __len__(self) -> int:
        """How many conversations it aligns."""
        return len(self._timelines)

    def extend(self, conversation: str, prints: Sequence[bytes]) -> None:
        """Add messages known to follow the conversation's timeline (a streamed response's
        items after the request they answer), without aligning them."""
        timeline = self._timelines.get(conversation)
        if timeline is None:
            timeline = self._timelines[conversation] = _Timeline()
        timeline.append(prints)

    def new_messages(self, conversation: str, prints: Sequence[bytes]) -> tuple[int, int]:
        """Align one request's message fingerprints with what the file showed before.

        Returns (start, first): the messages from index `start` of the list on are new, and
        the one at `start` is message number `first` of the conversation (the next ones follow).
        """
        timeline = self._timelines.get(conversation)
        if timeline is None:
            timeline = self._timelines[conversation] = _Timeline()
        start = 0
        if prints and timeline.prints:
            start = timeline.continued_from(prints) or timeline.matched(prints)
        return start, timeline.append(prints[start:])


class Continued:
    """What the request logs read so far in one ingest or audit hold for the files after them.

    A conversation continued in another file (a log rotated into `requests.1.jsonl`,
    `requests.2.jsonl`; a folder of per-day files) is recognised as within a file, by its
    conversation id (or a `previous_response_id` naming a response read before), and its
    requests are aligned with the timeline the earlier files built. A reader keeps its state
    for the next files in `part(name, make)`; one that found nothing to keep leaves every
    part empty (`empty()`), so its records do not depend on the files read before it.

    Files that an ingest does not read again (unchanged since the last one) are read for their
    state only when a later file needs it (`pending`, see lexkeep.core.ingest).
    """

    def __init__(self) -> None:
        self._parts: dict[str, Any] = {}
        # (path, format name) of files left unread since the state was last brought up to date
        self.pending: list[tuple[str, str]] = []

    def part(self, name: str, make: Callable[[], _T]) -> _T:
        """The state kept under `name`, made by `make()` the first time."""
        got = self._parts.get(name)
        if got is None:
            got = self._parts[name] = make()
        return got  # type: ignore[no-any-return]

    def empty(self) -> bool:
        """True while no part holds anything (no conversation to continue)."""
        return not any(len(part) for part in self._parts.values())

    def snapshot(self) -> Continued:
        """A copy to go back to (`restore`) when the files read after it are read again."""
        return copy.deepcopy(self)

    def restore(self, saved: Continued) -> None:
        """Go back to the state `saved` (a `snapshot`) held."""
        again = copy.deepcopy(saved)
        self._parts, self.pending = again._parts, again.pending

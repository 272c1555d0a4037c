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
re-reads of a grown one. A store keeps each conversation's state at the end of every ingest
(`Memory`), so a file ingested by a later command goes on from what the earlier ones stored;
requests read again (a grown file read from its start) align with that state as already seen.

Records that name no conversation (a proxy's log of Chat Completions or Messages calls) are
told apart by what they send again (`Resent`): a request whose list begins with the whole list
an earlier request of the file (or of an earlier file of its rotated log, `resent_for`) sent
(with its logged answer, or without) goes on with that request's conversation, and is aligned
with its timeline as above. A conversation one begins is named after its first record (a
digest of the record as logged, `Resent.named`), never after the file's name and
the record's place in it: rotated copies, grown files and re-reads name it alike.
"""

from __future__ import annotations

import copy
import json
from bisect import bisect_left
from collections.abc import Callable, Sequence
from hashlib import blake2b
from typing import Any, Protocol, TypeVar

import orjson

from lexkeep.core.paths import STDIN, rotated_log

_T = TypeVar("_T")


_DIGEST = 16  # bytes of a fingerprint


def fingerprint(value: Any) -> bytes:
    """A digest of a JSON value that ignores key order and `cache_control` marks (a client
    moves its prompt-cache breakpoint to the newest message on every request)."""
    text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    if b'"cache_control"' in text:
        text = orjson.dumps(_unmarked(value), option=orjson.OPT_SORT_KEYS)
    return blake2b(text, digest_size=_DIGEST).digest()


def record_digest(record: Any) -> str:
    """16 hex digits of a digest of a JSON value as canonical JSON (keys sorted, no spaces)."""
    try:
        text = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):  # not a value orjson wrote: no digest differs
        text = json.dumps(record, sort_keys=True, separators=(",", ":"), default=str).encode()
    return blake2b(text, digest_size=8).hexdigest()


def given(value: dict[str, Any]) -> dict[str, Any]:
    """`value` without the keys whose value is null or an empty list: an API writes them into
    its answer (`refusal: null`, `annotations: []`, an SDK's `citations: null`), a client
    sending the answer back often leaves them out, and either way they say nothing."""
    return {k: v for k, v in value.items() if v is not None and not (isinstance(v, list) and not v)}


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

    def dump(self, conversation: str) -> str | None:
        """The conversation's timeline as text to keep (`Continued.touched_states`)."""
        timeline = self._timelines.get(conversation)
        return None if timeline is None else b"".join(timeline.prints).hex()

    def load(self, conversation: str, data: Any) -> None:
        """Take back a timeline `dump` gave."""
        raw = bytes.fromhex(data) if isinstance(data, str) else b""
        timeline = self._timelines[conversation] = _Timeline()
        timeline.append([raw[n : n + _DIGEST] for n in range(0, len(raw), _DIGEST)])

    def extend(self, conversation: str, prints: Sequence[bytes]) -> None:
        """Add messages known to follow the conversation's timeline (a streamed response's
        items after the request they answer), without aligning them."""
        timeline = self._timelines.get(conversation)
        if timeline is None:
            timeline = self._timelines[conversation] = _Timeline()
        timeline.append(prints)

    def forget(self, conversation: str) -> None:
        """Drop the conversation's timeline."""
        self._timelines.pop(conversation, None)

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


# Conversations without an id a file's reader keeps going at once (Resent): one not continued
# while this many newer ones were is forgotten, so memory is bounded whatever the file's size.
LIVE = 4096


def _rolled(state: bytes, fp: bytes) -> bytes:
    return blake2b(state + fp, digest_size=_DIGEST).digest()


class Resent:
    """The conversations of one file's request records that name none, told by the history
    each request sends again.

    Each request leaves *tips*: a digest of its list as sent (`seed`, e.g. a system prompt
    kept outside the list, then the messages' fingerprints in order) and of that list followed
    by its logged answer. A later list that begins with a tip goes on with its conversation;
    with several, the longest tip, and of equal ones the one sent last. A list may also begin
    with a message holding a compaction (the client dropped what it summarised): the tips of
    a list from its last compaction on count as well. Its timeline is aligned in `log` as for
    requests that share an id. At most `limit` conversations are kept: the one continued
    least recently is forgotten (its tips, its timeline and its `extra`).
    """

    def __init__(self, limit: int = LIVE) -> None:
        self.log = RequestLog()
        self._limit = limit
        self._tips: dict[bytes, str] = {}
        self._begun: dict[str, int] = {}  # a name `_named` gave -> how many times
        # conversation -> its tips and its extra state, least recently continued first
        self._live: dict[str, tuple[list[bytes], dict[str, Any]]] = {}

    def conversation(
        self, prints: Sequence[bytes], seed: bytes, new: str | Callable[[], str]
    ) -> str:
        """The conversation a request sending `prints` (after `seed`) goes on with, else a new
        one: `new`, or what `new()` names it (`named`)."""
        found: str | None = None
        state = _rolled(b"", seed)
        for fp in prints:
            state = _rolled(state, fp)
            got = self._tips.get(state)
            if got is not None:
                found = got  # a longer tip wins
        conv = found or (new() if callable(new) else new)
        held = self._live.pop(conv, None)
        self._live[conv] = ([], {}) if held is None else held
        while len(self._live) > self._limit:
            self._forget(next(iter(self._live)))
        return conv

    def named(self, name: str, record: Any) -> str:
        """The id of a conversation `record` (a logged request, as read) begins: `<name>#<16
        hex digits>`, a digest of the record as canonical JSON (keys sorted), the same on
        every read of it, in whichever file of its log; the k-th conversation of this Resent
        begun by an equal record (k > 1: the first was forgotten, see LIVE) is
        `<name>#<digest>.<k>`."""
        conv = f"{name}#{record_digest(record)}"
        count = self._begun[conv] = self._begun.get(conv, 0) + 1
        return conv if count == 1 else f"{conv}.{count}"

    def keep(
        self,
        conv: str,
        prints: Sequence[bytes],
        ends: Sequence[int],
        seed: bytes = b"",
        restart: int = 0,
    ) -> None:
        """Leave the tips of a request of `conv`: its `prints[:end]` for each end (the list
        as sent; with its answer), and from `restart` (its last compaction) on when > 0."""
        tips = self._live.setdefault(conv, ([], {}))[0]
        starts = (0, restart) if 0 < restart < len(prints) else (0,)
        for start in starts:
            state = _rolled(b"", seed)
            for n in range(start, max(ends, default=0)):
                state = _rolled(state, prints[n])
                if n + 1 in ends and n + 1 > start:
                    self._tips[state] = conv
                    tips.append(state)

    def extra(self, conv: str, name: str, make: Callable[[], _T]) -> _T:
        """State a reader keeps for `conv` under `name` (its call ids), made by `make()`."""
        held = self._live.setdefault(conv, ([], {}))[1]
        got = held.get(name)
        if got is None:
            got = held[name] = make()
        return got  # type: ignore[no-any-return]

    def _forget(self, conv: str) -> None:
        tips, _ = self._live.pop(conv)
        for tip in tips:
            if self._tips.get(tip) == conv:
                del self._tips[tip]
        self.log.forget(conv)


class RotatedLogs(dict[tuple[str, str], Resent]):
    """The conversations without ids of each rotated log (`core.paths.rotated_log`) that its
    rotated copies read so far showed, for the next files of the log (a part of Continued)."""


def resent_for(shared: Continued, reader: str, path: str) -> Resent:
    """The `Resent` a file's requests without ids are chained with: the one the earlier files
    of its rotated log left (logrotate's `requests.jsonl.1` before `requests.jsonl`), else a
    new one, left for the later files when the file is a rotated copy. Any other file's
    conversations are its own: no request of it goes on with another file's."""
    if path == STDIN:
        return Resent()
    log, copy = rotated_log(path)
    logs = shared.part(f"{reader}.rotated", RotatedLogs)
    got = logs.get(log)
    if got is None:
        got = Resent()
        if copy:
            logs[log] = got
    return got


class Systems(set[str]):
    """The conversations whose system prompt was read (a `Kept` part): later requests send it
    again, and it is stored once."""

    def dump(self, conversation: str) -> bool | None:
        """True when the conversation's system prompt was read, else None."""
        return True if conversation in self else None

    def load(self, conversation: str, data: Any) -> None:
        """Take back what `dump` gave."""
        if data is True:
            self.add(conversation)


class Kept(Protocol):
    """A part of a reader's state whose share of one conversation a store can keep."""

    def dump(self, conversation: str) -> Any:
        """The conversation's share as a JSON value; None when it has none."""

    def load(self, conversation: str, data: Any) -> None:
        """Take back the share `dump` gave."""


class Memory(Protocol):
    """What a store kept of the conversations request logs continue (lexkeep.core.ingest)."""

    def recall(self, reader: str, conversation: str, entry: str | None) -> dict[str, Any] | None:
        """The parts' shares of `conversation`: as they were when the file `entry` (an ingest
        key) began reading it, when given and kept, else as the last ingest left them; None
        when nothing is kept."""

    def find(self, reader: str, response_id: str) -> str | None:
        """The conversation of a logged response (`previous_response_id`), or None."""


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

    With a `memory` (a store), a conversation a reader `meet`s for the first time in this
    ingest starts from what the store kept of it: for a file read before and read again from
    its start (grown, or unchanged and pending), the state it began from then, so that its
    requests read as they did; for any other file, the state the last ingest left. What to
    keep now is `touched_states()`: each conversation's state, and the one each file began
    it from.
    """

    def __init__(self, memory: Memory | None = None) -> None:
        self._parts: dict[str, Any] = {}
        # (path, format name, ingest key, numbered under) of files left unread since the
        # state was last brought up to date
        self.pending: list[tuple[str, str, str, str | None]] = []
        self.memory = memory
        self._file: str | None = None  # the ingest key of the file read now
        # The name under which an earlier lexkeep numbered the file's conversations without
        # ids (`<name>#<n>`, n the record's index) when the store holds them so; None: they
        # are named after their first record (Resent.conversation).
        self.numbered: str | None = None
        self._again = False  # ... which was read before: recall the state it began from
        self._met: set[tuple[str, str]] = set()  # (reader, conversation) recalled or begun
        self._touched: dict[tuple[str, str], None] = {}  # met since touched_states, in order
        # (reader, conversation, file) -> the shares the file began the conversation from
        self._entries: dict[tuple[str, str, str], dict[str, Any] | None] = {}
        self._asked: set[tuple[str, str]] = set()  # (reader, response id) asked of the memory

    def part(self, name: str, make: Callable[[], _T]) -> _T:
        """The state kept under `name` (`<reader>.<what>`), made by `make()` the first time."""
        got = self._parts.get(name)
        if got is None:
            got = self._parts[name] = make()
        return got  # type: ignore[no-any-return]

    def empty(self) -> bool:
        """True while no part holds anything (no conversation to continue)."""
        return not any(len(part) for part in self._parts.values())

    def begin_file(self, key: str | None, again: bool, numbered: str | None = None) -> None:
        """Say which file (its ingest key; None: none to remember, standard input) is read
        next, whether it was read before (`again`) from the same first bytes, and the name an
        earlier lexkeep numbered its conversations without ids under (`numbered`)."""
        self._file, self._again, self.numbered = key, again, numbered

    def meet(self, reader: str, conversation: str) -> None:
        """Say that `reader` goes on with `conversation` (before it aligns anything of it):
        the first time, its parts take what the memory kept of it."""
        key = (reader, conversation)
        self._touched[key] = None
        if key not in self._met:
            self._met.add(key)
            if self.memory is not None:
                entry = self._file if self._again else None
                kept = self.memory.recall(reader, conversation, entry)
                for name, data in (kept or {}).items():
                    part = self._parts.get(name)
                    if part is not None and data is not None and hasattr(part, "load"):
                        part.load(conversation, data)
        if self._file is not None and self.memory is not None:
            entry_key = (reader, conversation, self._file)
            if entry_key not in self._entries:
                self._entries[entry_key] = self._shares(reader, conversation)

    def find(self, reader: str, response_id: str) -> str | None:
        """The conversation of a response no file of this ingest logged, from the memory
        (met, so that its state is recalled); None when unknown."""
        key = (reader, response_id)
        if self.memory is None or key in self._asked:
            return None
        self._asked.add(key)
        conversation = self.memory.find(reader, response_id)
        if conversation is not None:
            self.meet(reader, conversation)
        return conversation

    def _shares(self, reader: str, conversation: str) -> dict[str, Any]:
        prefix = reader + "."
        shares = {
            name: part.dump(conversation)
            for name, part in self._parts.items()
            if name.startswith(prefix) and hasattr(part, "dump")
        }
        return {name: data for name, data in shares.items() if data is not None}

    def touched_states(self) -> list[tuple[str, str, str | None, dict[str, Any]]]:
        """What a store keeps for later ingests, since the last call: (reader, conversation,
        None, {part name: its share}) of every conversation met, and (reader, conversation,
        file, shares) of the state each file began a conversation from."""
        out: list[tuple[str, str, str | None, dict[str, Any]]] = [
            (reader, conversation, None, self._shares(reader, conversation))
            for reader, conversation in self._touched
        ]
        out += [
            (reader, conversation, file, shares or {})
            for (reader, conversation, file), shares in self._entries.items()
            if shares is not None
        ]
        self._touched.clear()
        # Kept as None: a file that meets the conversation again keeps its first entry.
        self._entries = dict.fromkeys(self._entries)
        return out

    def snapshot(self) -> Continued:
        """A copy to go back to (`restore`) when the files read after it are read again."""
        memory, self.memory = self.memory, None  # the store is not copied
        try:
            return copy.deepcopy(self)
        finally:
            self.memory = memory

    def restore(self, saved: Continued) -> None:
        """Go back to the state `saved` (a `snapshot`) held."""
        again = copy.deepcopy(saved)
        self._parts, self.pending = again._parts, again.pending
        self._met, self._touched, self._asked = again._met, again._touched, again._asked
        self._entries = again._entries

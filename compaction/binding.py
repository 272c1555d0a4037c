"""Source binding: the canonical encoding of a 10-pair sequence, its SHA-256, a job's identity.

Canonical encoding (documented in docs/compaction.md; pinned by a golden test):

    b"lexkeep-compaction-source/1\\n"
    u32be(number of pairs)
    for each pair, in pair order:
        for each field in (user id, user text, assistant id, assistant text):
            u64be(len(utf8(field))) + utf8(field)

Every field is length-prefixed, so no choice of text can make two different sequences encode
to the same bytes; texts are taken byte for byte (no normalisation, no trimming).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from lexkeep.compaction.pairs import Pair
from lexkeep.compaction.planning import SEGMENT_PAIRS, is_segment
from lexkeep.core.errors import RuleError

ENCODING_MAGIC = b"lexkeep-compaction-source/1\n"
IDENTITY_MAGIC = b"lexkeep-compaction-identity/1\n"
DIGEST_ALGORITHM = "SHA-256"
SCOPE = "conversation"


def _field(value: str) -> bytes:
    raw = value.encode("utf-8")
    return struct.pack(">Q", len(raw)) + raw


def canonical_encoding(pairs: Sequence[Pair]) -> bytes:
    """The documented byte encoding of a pair sequence (user and assistant ids and texts)."""
    parts = [ENCODING_MAGIC, struct.pack(">I", len(pairs))]
    for pair in pairs:
        parts.append(_field(pair.user.id))
        parts.append(_field(pair.user.text))
        parts.append(_field(pair.assistant.id))
        parts.append(_field(pair.assistant.text))
    return b"".join(parts)


def source_digest(pairs: Sequence[Pair]) -> str:
    """SHA-256 (hex) of `canonical_encoding(pairs)`."""
    return hashlib.sha256(canonical_encoding(pairs)).hexdigest()


def source_message_ids(pairs: Sequence[Pair]) -> tuple[str, ...]:
    """The source ids in binding order: user0, assistant0, user1, assistant1, …"""
    ids: list[str] = []
    for pair in pairs:
        ids.append(pair.user.id)
        ids.append(pair.assistant.id)
    return tuple(ids)


def check_range(conversation_id: str, from_pair: int, to_pair: int, pairs: Sequence[Pair]) -> None:
    """Refuse (RuleError) a range that is not a whole segment of 10 pairs with 20 unique ids."""
    where = f"conversation {conversation_id} pairs {from_pair}–{to_pair}"
    if not is_segment(from_pair, to_pair):
        raise RuleError(f"{where}: a segment starts at a multiple of 10 and is exactly 10 pairs")
    if len(pairs) != SEGMENT_PAIRS:
        raise RuleError(f"{where}: expected 10 pairs, got {len(pairs)}")
    if [p.index for p in pairs] != list(range(from_pair, to_pair + 1)):
        raise RuleError(f"{where}: pair indexes are not {from_pair}..{to_pair} in order")
    ids = source_message_ids(pairs)
    if any(not isinstance(i, str) or not i for i in ids):
        raise RuleError(f"{where}: a source message has no id (20 complete ids are required)")
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise RuleError(f"{where}: source message ids are not unique: {', '.join(dup)}")
    for pair in pairs:
        for message in (pair.user, pair.assistant):
            if message.conversation_id != conversation_id:
                raise RuleError(
                    f"{where}: message {message.id} belongs to conversation "
                    f"{message.conversation_id}"
                )


@dataclass(frozen=True, slots=True)
class JobIdentity:
    """Everything that identifies one compaction job (seed 000 §4)."""

    conversation_id: str
    scope: str
    from_pair: int
    to_pair: int
    source_message_ids: tuple[str, ...]
    source_digest: str
    model_id: str
    prompt_version: str

    def key(self) -> str:
        """SHA-256 (hex) of the identity's own length-prefixed encoding: the job id."""
        parts = [
            IDENTITY_MAGIC,
            _field(self.conversation_id),
            _field(self.scope),
            struct.pack(">II", self.from_pair, self.to_pair),
            struct.pack(">I", len(self.source_message_ids)),
            *(_field(i) for i in self.source_message_ids),
            _field(self.source_digest),
            _field(self.model_id),
            _field(self.prompt_version),
        ]
        return hashlib.sha256(b"".join(parts)).hexdigest()


def identity(
    conversation_id: str,
    from_pair: int,
    to_pair: int,
    pairs: Sequence[Pair],
    *,
    model_id: str,
    prompt_version: str,
    scope: str = SCOPE,
) -> JobIdentity:
    """Validate the range (see `check_range`) and build the job identity bound to its source."""
    check_range(conversation_id, from_pair, to_pair, pairs)
    return JobIdentity(
        conversation_id=conversation_id,
        scope=scope,
        from_pair=from_pair,
        to_pair=to_pair,
        source_message_ids=source_message_ids(pairs),
        source_digest=source_digest(pairs),
        model_id=model_id,
        prompt_version=prompt_version,
    )

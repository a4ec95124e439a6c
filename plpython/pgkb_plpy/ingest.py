"""Pure decisions of the ingest path, unit-testable without a database."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class ChunkPlan:
    keep: list[tuple[int, int]]  # (existing chunk id, index into the new chunk list)
    delete: list[int]  # existing chunk ids whose text is gone
    insert: list[int]  # indexes into the new chunk list that need a new row (and a new vector)


def plan_chunk_changes(existing: list[tuple[int, str]], new_hashes: list[str]) -> ChunkPlan:
    """Match new chunks to existing ones by content hash (a multiset match, so
    repeated identical chunks are paired one to one). Only unmatched new chunks
    are inserted and embedded; unmatched existing ones are deleted."""
    available: dict[str, list[int]] = defaultdict(list)
    for chunk_id, content_hash in sorted(existing):
        available[content_hash].append(chunk_id)
    keep: list[tuple[int, int]] = []
    insert: list[int] = []
    for index, content_hash in enumerate(new_hashes):
        ids = available.get(content_hash)
        if ids:
            keep.append((ids.pop(0), index))
        else:
            insert.append(index)
    delete = sorted(chunk_id for ids in available.values() for chunk_id in ids)
    return ChunkPlan(keep=keep, delete=delete, insert=insert)


def vector_literal(vector: list[float]) -> str:
    """pgvector's text form; repr keeps full float precision."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def batches(items: list, size: int) -> list[list]:
    size = max(1, int(size))
    return [items[i : i + size] for i in range(0, len(items), size)]

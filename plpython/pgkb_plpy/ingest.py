"""Pure decisions of the ingest path, unit-testable without a database."""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from . import lexical
from .chunker import Chunk
from .query_analysis import han_share, passage_language


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


@dataclass(frozen=True)
class ChunkRow:
    """The ``kb.chunks`` columns ingest writes for one chunk (all but ids and namespace), and the
    chunk's BM25 terms (``term -> tf``: its rows of ``kb.lexical_postings``)."""

    ordinal: int
    section_path: list[str]
    section_text: str
    content: str
    embed_text: str
    content_hash: str
    token_count: int
    lexical_length: int
    char_start: int
    char_end: int
    language: str
    han_share: float | None
    terms: dict[str, int]
    page_start: int | None = None
    page_end: int | None = None


def page_span(page_starts: Sequence[int] | None, char_start: int, char_end: int) -> tuple[int | None, int | None]:
    """The 1-based pages (first, last) that ``body[char_start:char_end]`` lies on, for a body whose
    page ``n`` starts at ``page_starts[n - 1]``; ``(None, None)`` without pages."""
    if not page_starts:
        return None, None
    first = max(1, bisect_right(page_starts, char_start))
    last = max(first, bisect_right(page_starts, max(char_start, char_end - 1)))
    return first, last


def lexical_text(chunk: Chunk) -> str:
    """What a chunk's BM25 terms are taken from: its heading path and content (its code as
    written, where ``embed_text`` holds only a code block's description)."""
    return " > ".join(chunk.section_path) + "\n\n" + chunk.content if chunk.section_path else chunk.content


def chunk_rows(chunks: Sequence[Chunk], page_starts: Sequence[int] | None = None) -> list[ChunkRow]:
    """The rows ingest inserts for ``chunks``, in their order: ``section_text`` is the section path
    joined with `` > `` (trigram-indexed), the BM25 terms are those of :func:`lexical_text` (the
    heading path is indexed with the content; code as written), and ``lexical_length`` is the sum
    of their frequencies (the ``chunk_length`` of every posting of the chunk), ``han_share`` is
    :func:`query_analysis.han_share` of ``embed_text`` (the text the model embeds) and ``language``
    its :func:`query_analysis.passage_language`, and the pages are :func:`page_span` of the
    chunk's offsets (PDF files)."""
    rows = []
    for c in chunks:
        terms = lexical.document_terms(lexical_text(c))
        share = han_share(c.embed_text)
        page_start, page_end = page_span(page_starts, c.char_start, c.char_end)
        rows.append(
            ChunkRow(
                ordinal=c.ordinal,
                section_path=list(c.section_path),
                section_text=" > ".join(c.section_path),
                content=c.content,
                embed_text=c.embed_text,
                content_hash=c.content_hash,
                token_count=c.token_count,
                lexical_length=sum(terms.values()),
                char_start=c.char_start,
                char_end=c.char_end,
                language=passage_language(share),
                han_share=share,
                terms=terms,
                page_start=page_start,
                page_end=page_end,
            )
        )
    return rows


def vector_literal(vector: list[float]) -> str:
    """pgvector's text form; repr keeps full float precision."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def batches(items: list, size: int) -> list[list]:
    size = max(1, int(size))
    return [items[i : i + size] for i in range(0, len(items), size)]

"""Stand-in for ingest's chunk-row builder, until ``pgkb_plpy`` exports it.

``pgkb_plpy.ingest_db.insert_chunks`` builds the ``kb.chunks`` columns of new chunks and their BM25
terms inline, next to its ``plpy`` calls, so the benchmark cannot import that step alone. This
module states the same step as a pure function with the signature ingest should export
(``pgkb_plpy.ingest.chunk_rows``); ``load`` imports it in one marked line, to be switched to the
real one when it exists, and this file deleted.

For each :class:`pgkb_plpy.chunker.Chunk` (what ``chunk_document`` returns), as ``insert_chunks``
stores it: ``section_text`` is the section path joined with `` > `` (the SQL there does
``array_to_string(..., ' > ')``); the BM25 terms are ``lexical.document_terms(embed_text)`` (the
heading path is indexed with the content); ``lexical_length`` is the sum of their term
frequencies (the ``chunk_length`` of every posting of the chunk). Everything else is the chunk's
own field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pgkb_plpy import lexical
from pgkb_plpy.chunker import Chunk


@dataclass(frozen=True)
class ChunkRow:
    """The ``kb.chunks`` columns ingest writes for one chunk (all but ids and namespace), and the
    chunk's BM25 terms (``term -> tf``, the rows of ``kb.lexical_postings``)."""

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
    terms: dict[str, int]


def chunk_rows(chunks: Sequence[Chunk]) -> list[ChunkRow]:
    """The rows ingest inserts for ``chunks``, in their order."""
    rows = []
    for c in chunks:
        terms = lexical.document_terms(c.embed_text)
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
                terms=terms,
            )
        )
    return rows

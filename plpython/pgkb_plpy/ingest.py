"""Pure decisions of the ingest path, unit-testable without a database."""

from __future__ import annotations

import json
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from . import lexical
from .chunker import Chunk, strip_front_matter
from .front_matter import RetrievalKeyError, RetrievalOptions, read_block, retrieval_options
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


def document_options(metadata: dict | str | None, body: str) -> RetrievalOptions:
    """The retrieval keys of a document (:mod:`pgkb_plpy.front_matter`): those of ``metadata``
    (a dict, or its JSON text as a trigger receives it), and for the keys it lacks, those of the
    front matter block at the start of ``body`` (the block :func:`chunker.strip_front_matter`
    recognises). Raises :class:`front_matter.RetrievalKeyError` naming the key and where it is,
    or saying that the metadata nests deeper than Python's JSON reader goes."""
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except RecursionError:
            raise RetrievalKeyError(
                "metadata nests deeper than the in-database Python reads JSON (about 1,000 levels); flatten it"
            ) from None
    metadata = metadata or {}
    options = retrieval_options(metadata)
    rest, offset = strip_front_matter(body or "")
    if offset == 0:
        return options
    lines = body[:offset].replace("\r\n", "\n").split("\n")[1:-2]  # between the --- lines
    from_body = {k: v for k, v in read_block(lines).items() if k not in metadata}
    if not from_body:
        return options
    return retrieval_options({**from_body, **metadata}, "metadata (or the body's front matter)")


@dataclass(frozen=True)
class DocumentTerms:
    """What a document adds to the BM25 terms of each of its chunks: the terms of its
    ``concept_keys`` (``concept``: term -> tf), of which the key terms (``concept_keys_terms``,
    :func:`lexical.key_terms`: an identifier whole, not its parts) count ``weight`` times and the
    others once, and the terms of its aliases and synonyms (``alias``) once; ``weight`` is also
    how often a key term inside an inline code span counts."""

    concept: dict[str, int]
    alias: dict[str, int]
    weight: int = 1
    concept_key_terms: dict[str, int] | None = None


def document_terms(options: RetrievalOptions | None, weight: int = 1) -> DocumentTerms:
    """The :class:`DocumentTerms` of a document's retrieval keys with the setting
    ``concept_term_weight`` (at least 1)."""
    if options is None:
        return DocumentTerms({}, {}, max(1, int(weight)))
    return DocumentTerms(
        concept=lexical.document_terms("\n".join(options.concept_keys)),
        alias=lexical.document_terms("\n".join(options.aliases)),
        weight=max(1, int(weight)),
        concept_key_terms=lexical.key_terms("\n".join(options.concept_keys)),
    )


def chunk_terms(chunk: Chunk, extra: DocumentTerms | None = None) -> tuple[dict[str, int], int]:
    """``(term -> tf, length)`` of one chunk for the postings: the terms of :func:`lexical_text`,
    where a key term (:func:`lexical.key_terms`) inside an inline code span
    (:func:`lexical.inline_code`) counts ``weight`` times, plus the document's concept-key terms
    (key terms ``weight`` times, the parts of an identifier once) and alias terms (once).
    ``length`` counts every occurrence once, whatever its weight, so that emphasis raises a
    term's frequency without making the chunk's other terms weigh less. Only the whole of an
    identifier is weighed: ``session.idle_timeout_seconds`` in backticks makes that identifier
    a strong match, not every question about "idle" or "seconds"."""
    terms = Counter(lexical.document_terms(lexical_text(chunk)))
    length = sum(terms.values())
    weight = extra.weight if extra else 1
    if weight > 1:
        for code in lexical.inline_code(chunk.content):
            for term, tf in lexical.key_terms(code).items():
                terms[term] += (weight - 1) * tf
    if extra:
        keys = extra.concept_key_terms or {}
        for term, tf in extra.concept.items():
            terms[term] += (weight if term in keys else 1) * tf
            length += tf
        for term, tf in extra.alias.items():
            terms[term] += tf
            length += tf
    return dict(terms), length


def chunk_rows(
    chunks: Sequence[Chunk], page_starts: Sequence[int] | None = None, extra: DocumentTerms | None = None
) -> list[ChunkRow]:
    """The rows ingest inserts for ``chunks``, in their order: ``section_text`` is the section path
    joined with `` > `` (trigram-indexed), the BM25 terms and ``lexical_length`` (the
    ``chunk_length`` of every posting of the chunk) are :func:`chunk_terms` (the heading path is
    indexed with the content; code as written; inline code and the document's ``extra`` terms
    weighed), ``han_share`` is :func:`query_analysis.han_share` of ``embed_text`` (the text the
    model embeds) and ``language`` its :func:`query_analysis.passage_language`, and the pages are
    :func:`page_span` of the chunk's offsets (PDF files)."""
    rows = []
    for c in chunks:
        terms, length = chunk_terms(c, extra)
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
                lexical_length=length,
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


def batches(items: list, size: int) -> list[list]:
    size = max(1, int(size))
    return [items[i : i + size] for i in range(0, len(items), size)]

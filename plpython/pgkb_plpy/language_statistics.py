"""The language correction of the dense leg: per-language statistics of a model's stored
vectors, and a query's offset and scale in each language group.

Why. A multilingual encoder puts a language component into every vector: a Chinese question is
nearer to any Chinese passage than to the English passage that answers it. Scoring a passage of
language group L by its similarity *z-scored within L*,

    score(q, p) = (q . p - q . mean_L) / sqrt(q' cov_L q)

puts the groups on one scale: how unusually close this passage is to the question, among the
passages of its own language. The map is affine with a positive slope for a fixed query and
group, so it never changes the order inside one group: a one-language corpus ranks exactly as by
raw similarity, and the dense leg can search the stored vectors with HNSW once per group and merge
the groups by score. (Measured outside the product: CHANGELOG.md, 0.2.0.)

In a group of *another* language than the question's, ``q . p`` also holds ``mean_Q . p`` (the
question's own language component, ``mean_Q`` the mean of the question's language group): how
much a passage resembles the question's language, which says nothing about relevance there (an
English paragraph full of Chinese names) and reorders that group by it. So such a group is
searched and scored with the question's language component removed, ``q - mean_Q`` (the
language-specific centring of Libovicky, Rosa and Fraser, 2020, on the query side only, so the
stored vectors and their index stay as they are). In the question's own group the component is
shared by every passage and carries the script-level signal of that language: the query is used
as it is. ``mean_Q`` follows the question's share of Chinese as a passage's moments do. (Both
measured outside the product: CHANGELOG.md, 0.2.0, the z-score with the question's language
mean removed.)

The statistics are kept per model, namespace and group in ``kb.language_statistics``, under the
row-level security of the chunks: a reader's moments are pooled over the namespaces it may see
and nothing else. A group with fewer than ``min_vectors`` vectors has its missing vectors made up
by all groups: their mean for its mean, their within-group variance for its variance
(``_moments_for``); with fewer than ``min_vectors`` vectors in all, there is no correction.

Pure functions first (unit-tested), then the two that talk to the database.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .query_analysis import han_share, passage_language

#: Cache key in GD: (model, namespace, language) -> (refreshed_at, mean, covariance).
_CACHE = "pgkb_language_statistics"
#: Chunks classified per statement when a recount finds chunks without a language.
_CLASSIFY_BATCH = 2000


def parse_vector(text: str) -> np.ndarray:
    """pgvector's text form ``[x,y,...]`` as a float64 array."""
    return np.array(text.strip()[1:-1].split(","), dtype=np.float64)


def covariance(sample: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """The covariance (population form) of ``sample`` (one vector per row) around ``mean``."""
    centred = sample - mean
    return centred.T @ centred / len(sample)


def encode_covariance(matrix: np.ndarray) -> bytes:
    """The stored form: float32, row-major."""
    return np.ascontiguousarray(matrix, dtype="<f4").tobytes()


def decode_covariance(data: bytes, dimensions: int) -> np.ndarray:
    return np.frombuffer(data, dtype="<f4").astype(np.float64).reshape(dimensions, dimensions)


def is_stale(stored_vectors: int | None, current_vectors: int, drift: float) -> bool:
    """A group's statistics need recomputing when it has none yet, or its number of vectors has
    changed by at least ``drift`` (a share) since they were computed."""
    if stored_vectors is None:
        return current_vectors > 0
    return abs(current_vectors - stored_vectors) >= drift * stored_vectors


@dataclass(frozen=True)
class GroupStatistics:
    namespace: str
    language: str
    vectors: int
    mean: np.ndarray
    covariance: np.ndarray


@dataclass(frozen=True)
class LanguageMoment:
    """``kb.language_moment``: the query's offset and scale in one language group, for the vector
    the group is searched with (``query_vector``: None for the query itself), and the zh and en
    groups' offsets and scales for that vector (None when that group has too few vectors of its
    own), between which a bilingual passage of the group is placed by its share of Chinese."""

    language: str
    vectors: int
    offset: float
    scale: float
    pooled: bool
    query_vector: str | None = None
    zh_offset: float | None = None
    zh_scale: float | None = None
    en_offset: float | None = None
    en_scale: float | None = None


def _pool(parts: list[tuple[int, float, float]]) -> tuple[int, float, float]:
    """(n, mean, variance) of a mixture of groups given as (n_i, mean_i, variance_i)."""
    n = sum(p[0] for p in parts)
    mean = sum(p[0] * p[1] for p in parts) / n
    second = sum(p[0] * (p[2] + p[1] * p[1]) for p in parts) / n
    return n, mean, max(second - mean * mean, 0.0)


def _moments_for(query: np.ndarray, groups: list[GroupStatistics], min_vectors: int) -> dict | None:
    """language -> (vectors, mean, variance, pooled) of ``q . p`` per language group, pooled over the
    namespaces of ``groups``. None when every group together has fewer than ``min_vectors``
    vectors, or the spread is zero.

    A group of ``min_vectors`` or more keeps its own mean and variance: the mean of another
    language holds that language's component. A group of fewer (``pooled``) has both estimated
    from too few vectors, and its own mean is confounded with relevance: a small group is often
    one document, every passage on the topic a question asks about, and z-scored against itself
    the passage that answers stands barely above its siblings and below chance passages of the
    large group (a Chinese travel policy of six passages beside English documents: the English
    ones came first for a Chinese question about reimbursement). So the other groups make up its
    missing vectors: the mean of all groups M for its mean, ``(n mean_L + (min_vectors - n) M) /
    min_vectors``, and the within-group variance of all groups W (the spread of passages around
    their own language's mean, not around the mixture's) for its variance, ``(n var_L +
    (min_vectors - n) W) / min_vectors``. A one-language corpus is unchanged (M and W are its own)."""
    per_group = [(g.language, g.vectors, float(query @ g.mean), float(query @ g.covariance @ query)) for g in groups]
    if not per_group:
        return None
    n_all, mean_all, var_all = _pool([(n, m, v) for _, n, m, v in per_group])
    if n_all < min_vectors or var_all <= 0.0:
        return None
    by_language = {
        language: _pool([(n, m, v) for lang, n, m, v in per_group if lang == language])
        for language in sorted({p[0] for p in per_group})
    }
    within = sum(n * var for n, _, var in by_language.values()) / n_all
    if within <= 0.0:
        return None
    moments = {}
    for language, (n, mean, var) in by_language.items():
        missing = max(min_vectors - n, 0)
        moments[language] = (
            n,
            (n * mean + missing * mean_all) / (n + missing),
            (n * var + missing * within) / (n + missing),
            missing > 0,
        )
    return moments


def language_mean(groups: list[GroupStatistics], share: float | None, min_vectors: int) -> np.ndarray | None:
    """The mean vector of a text's language over the namespaces of ``groups``: by its share of
    Chinese between the zh and en means (``passage_language`` when one of them is missing), the
    ``other`` mean for a text of neither script; None when that group has fewer than
    ``min_vectors`` vectors."""

    def mean_of(language: str) -> np.ndarray | None:
        of = [g for g in groups if g.language == language]
        n = sum(g.vectors for g in of)
        if n < min_vectors or n == 0:
            return None
        return sum(g.vectors * g.mean for g in of) / n

    if share is None:
        return mean_of("other")
    zh, en = mean_of("zh"), mean_of("en")
    if zh is not None and en is not None:
        return share * zh + (1 - share) * en
    return mean_of(passage_language(share))


def _own_moment(moments: dict, language: str) -> tuple[float | None, float | None]:
    """(offset, scale) of a language group, (None, None) when it has no vectors."""
    m = moments.get(language)
    return (None, None) if m is None else (m[1], math.sqrt(m[2]))


def vector_text(v: np.ndarray) -> str:
    """pgvector's text form of ``v``."""
    return "[" + ",".join(f"{x:.7g}" for x in v) + "]"


def query_moments(
    query: np.ndarray, groups: list[GroupStatistics], min_vectors: int, query_share: float | None = None
) -> list[LanguageMoment]:
    """The query's moments per language group (see the module's docstring): ``offset`` is the
    mean of ``v . p`` over the group's vectors and ``scale`` its standard deviation, where ``v``
    is the query for its own group (``passage_language(query_share)``) and the query without its
    language's mean (:func:`language_mean`, renormalised) for the other groups; pooled over the
    namespaces of ``groups``. Without a mean of the query's language (too few vectors) every group
    uses the query. None at all when every group together has fewer than ``min_vectors`` vectors,
    or the spread is zero."""
    own = passage_language(query_share)
    query_mean = language_mean(groups, query_share, min_vectors)
    centred = None
    if query_mean is not None:
        rest = query - query_mean
        norm = float(np.linalg.norm(rest))
        centred = rest / norm if norm > 0 else None
    own_moments = _moments_for(query, groups, min_vectors)
    if own_moments is None:
        return []
    # one computation per vector searched with: the query's own, and the centred one that every
    # group of another language shares
    centred_moments = None if centred is None else _moments_for(centred, groups, min_vectors)
    centred_text = None if centred is None else vector_text(centred)
    result = []
    for language in sorted({g.language for g in groups}):
        if language == own or centred is None:
            moments, vector_sent = own_moments, None
        else:
            moments, vector_sent = centred_moments, centred_text
        if moments is None:
            continue
        n, mean, var, pooled = moments[language]
        zh_offset, zh_scale = _own_moment(moments, "zh")
        en_offset, en_scale = _own_moment(moments, "en")
        result.append(
            LanguageMoment(
                language, n, mean, math.sqrt(var), pooled, vector_sent, zh_offset, zh_scale, en_offset, en_scale
            )
        )
    return result


# --------------------------------------------------------------------------- in the database


# Statistics describe what a question asked now can see, whoever asks: the chunks of shared
# documents current today (kb.counts_in_statistics, the same rule as the BM25 statistics).
COUNTED_CHUNK = "kb.counts_in_statistics(c.document_id)"


def recount(plpy, model: str, drift: float, sample_size: int) -> dict:
    """Bring ``kb.language_statistics`` of ``model`` up to date, as the owner (the caller is a
    SECURITY DEFINER function): classify chunks stored without a language, count the model's
    vectors per namespace and group (the documents the statistics count: ``COUNTED_CHUNK``), drop groups
    that have none left and recompute those that are stale (:func:`is_stale`): the mean over every
    vector of the group (pgvector's ``avg``), the covariance over a deterministic sample of
    ``sample_size`` of them. Returns counts."""
    classified = _classify_unlabelled(plpy)
    counts = {
        (r["namespace"], r["language"]): r["n"]
        for r in plpy.execute(
            plpy.prepare(
                f"""SELECT c.namespace, c.language, count(*) AS n
                   FROM kb.embeddings AS e INNER JOIN kb.chunks AS c ON c.id = e.chunk_id
                   WHERE e.model = $1 AND c.language IS NOT NULL AND {COUNTED_CHUNK}
                   GROUP BY c.namespace, c.language""",
                ["text"],
            ),
            [model],
        )
    }
    stored = {
        (r["namespace"], r["language"]): r["vectors"]
        for r in plpy.execute(
            plpy.prepare("SELECT namespace, language, vectors FROM kb.language_statistics WHERE model = $1", ["text"]),
            [model],
        )
    }
    gone = [key for key in stored if key not in counts]
    if gone:
        plpy.execute(
            plpy.prepare(
                """DELETE FROM kb.language_statistics AS s
                   USING unnest($2::text[], $3::text[]) AS g (namespace, language)
                   WHERE s.model = $1 AND s.namespace = g.namespace AND s.language = g.language""",
                ["text", "text[]", "text[]"],
            ),
            [model, [k[0] for k in gone], [k[1] for k in gone]],
        )
    refreshed = 0
    for (namespace, language), n in sorted(counts.items()):
        if is_stale(stored.get((namespace, language)), n, drift):
            _refresh_group(plpy, model, namespace, language, n, sample_size)
            refreshed += 1
    return {"classified": classified, "groups": len(counts), "refreshed": refreshed, "dropped": len(gone)}


def _classify_unlabelled(plpy) -> int:
    select = plpy.prepare(
        "SELECT id, embed_text FROM kb.chunks WHERE language IS NULL ORDER BY id LIMIT $1", ["integer"]
    )
    update = plpy.prepare(
        """UPDATE kb.chunks AS c SET language = t.language, han_share = t.han_share
           FROM unnest($1::bigint[], $2::text[], $3::float8[]) AS t (id, language, han_share) WHERE c.id = t.id""",
        ["bigint[]", "text[]", "float8[]"],
    )
    update_vectors = plpy.prepare(
        """UPDATE kb.embeddings AS e SET language = c.language
           FROM kb.chunks AS c WHERE c.id = e.chunk_id AND c.id = ANY($1)""",
        ["bigint[]"],
    )
    total = 0
    while True:
        rows = plpy.execute(select, [_CLASSIFY_BATCH])
        if not rows:
            return total
        shares = [han_share(r["embed_text"]) for r in rows]
        plpy.execute(update, [[r["id"] for r in rows], [passage_language(x) for x in shares], shares])
        plpy.execute(update_vectors, [[r["id"] for r in rows]])
        total += len(rows)


def _refresh_group(plpy, model: str, namespace: str, language: str, n: int, sample_size: int) -> None:
    where = f"e.model = $1 AND c.namespace = $2 AND c.language = $3 AND {COUNTED_CHUNK}"
    mean_row = plpy.execute(
        plpy.prepare(
            f"""SELECT avg(e.embedding)::text AS mean
                FROM kb.embeddings AS e INNER JOIN kb.chunks AS c ON c.id = e.chunk_id WHERE {where}""",
            ["text", "text", "text"],
        ),
        [model, namespace, language],
    )
    mean = parse_vector(mean_row[0]["mean"])
    # a deterministic sample: the same vectors give the same statistics on every rebuild
    sample_rows = plpy.execute(
        plpy.prepare(
            f"""SELECT e.embedding::text AS v
                FROM kb.embeddings AS e INNER JOIN kb.chunks AS c ON c.id = e.chunk_id WHERE {where}
                ORDER BY hashint8(e.chunk_id), e.chunk_id LIMIT $4""",
            ["text", "text", "text", "integer"],
        ),
        [model, namespace, language, sample_size],
    )
    sample = np.vstack([parse_vector(r["v"]) for r in sample_rows])
    n = max(n, len(sample))  # vectors stored by a concurrent writer since the count
    plpy.execute(
        plpy.prepare(
            """INSERT INTO kb.language_statistics AS s
                   (model, namespace, language, vectors, sampled, mean, covariance, refreshed_at)
               VALUES ($1, $2, $3, $4, $5, $6::vector, $7, clock_timestamp())
               ON CONFLICT (model, namespace, language) DO UPDATE SET
                   vectors = excluded.vectors, sampled = excluded.sampled, mean = excluded.mean,
                   covariance = excluded.covariance, refreshed_at = excluded.refreshed_at""",
            ["text", "text", "text", "bigint", "integer", "text", "bytea"],
        ),
        [model, namespace, language, n, len(sample), mean_row[0]["mean"], encode_covariance(covariance(sample, mean))],
    )


def moments_for_query(
    plpy, GD, SD, model: str, query_vector: str, namespaces: list[str] | None, min_vectors: int, query_text: str | None
) -> list[dict]:
    """``kb.language_moments``: the query's moments per language group over the namespaces the
    caller may see among ``namespaces`` (None: all), the query's language from ``query_text``
    (:func:`han_share`). Runs as the caller, so row-level security also
    decides which groups are read; the matrices are cached per backend by refresh time. Groups
    are pooled in the order of their keys, so that the same rows give the same floating-point
    sums wherever they are stored (a shard coordinator's copy, a recounted table)."""
    if "language_keys" not in SD:
        SD["language_keys"] = plpy.prepare(
            """SELECT namespace, language, vectors, refreshed_at::text AS refreshed_at
               FROM kb.language_statistics
               WHERE model = $1 AND ($2::text[] IS NULL OR namespace = ANY($2))
               ORDER BY namespace, language""",
            ["text", "text[]"],
        )
        SD["language_group"] = plpy.prepare(
            """SELECT mean::text AS mean, covariance FROM kb.language_statistics
               WHERE model = $1 AND namespace = $2 AND language = $3""",
            ["text", "text", "text"],
        )
    cache = GD.setdefault(_CACHE, {})
    groups = []
    for r in plpy.execute(SD["language_keys"], [model, namespaces]):
        key = (model, r["namespace"], r["language"])
        hit = cache.get(key)
        if hit is None or hit[0] != r["refreshed_at"]:
            row = plpy.execute(SD["language_group"], list(key))
            if not row:
                continue
            mean = parse_vector(row[0]["mean"])
            hit = (r["refreshed_at"], mean, decode_covariance(row[0]["covariance"], len(mean)))
            cache[key] = hit
        groups.append(GroupStatistics(r["namespace"], r["language"], r["vectors"], hit[1], hit[2]))
    query = parse_vector(query_vector)
    share = han_share(query_text) if query_text else None
    return [m.__dict__ for m in query_moments(query, groups, min_vectors, share)]

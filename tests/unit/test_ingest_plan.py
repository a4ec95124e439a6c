"""Unit tests for the pure decisions of the ingest path (pgkb_plpy.ingest) and the
error normalisation of pgkb_plpy.ingest_db, without a database."""

from __future__ import annotations

import random

import pytest
from pgkb_plpy import embedders, ingest_db
from pgkb_plpy.backend import vector_literal
from pgkb_plpy.ingest import ChunkPlan, batches, plan_chunk_changes


def test_first_insert_inserts_everything():
    assert plan_chunk_changes([], ["a", "b"]) == ChunkPlan(keep=[], delete=[], insert=[0, 1])


def test_identical_text_keeps_every_chunk():
    assert plan_chunk_changes([(10, "a"), (11, "b")], ["a", "b"]) == ChunkPlan(
        keep=[(10, 0), (11, 1)], delete=[], insert=[]
    )


def test_reorder_keeps_ids_with_new_positions():
    plan = plan_chunk_changes([(10, "a"), (11, "b"), (12, "c")], ["c", "a", "b"])
    assert plan == ChunkPlan(keep=[(12, 0), (10, 1), (11, 2)], delete=[], insert=[])


def test_changed_chunk_is_deleted_and_its_replacement_inserted():
    plan = plan_chunk_changes([(10, "a"), (11, "b"), (12, "c")], ["a", "B", "c"])
    assert plan == ChunkPlan(keep=[(10, 0), (12, 2)], delete=[11], insert=[1])


def test_delete_and_insert_in_the_middle():
    assert plan_chunk_changes([(1, "a"), (2, "b"), (3, "c")], ["a", "c"]) == ChunkPlan(
        keep=[(1, 0), (3, 1)], delete=[2], insert=[]
    )
    assert plan_chunk_changes([(1, "a"), (3, "c")], ["a", "x", "c"]) == ChunkPlan(
        keep=[(1, 0), (3, 2)], delete=[], insert=[1]
    )


def test_everything_removed():
    assert plan_chunk_changes([(2, "b"), (1, "a")], []) == ChunkPlan(keep=[], delete=[1, 2], insert=[])


def test_duplicates_are_matched_one_to_one_lowest_id_first():
    existing = [(7, "a"), (3, "a"), (5, "b")]
    assert plan_chunk_changes(existing, ["a", "b"]) == ChunkPlan(keep=[(3, 0), (5, 1)], delete=[7], insert=[])
    assert plan_chunk_changes(existing, ["a", "a", "a", "b"]) == ChunkPlan(
        keep=[(3, 0), (7, 1), (5, 3)], delete=[], insert=[2]
    )
    assert plan_chunk_changes(existing, ["b", "b"]) == ChunkPlan(keep=[(5, 0)], delete=[3, 7], insert=[1])


@pytest.mark.parametrize("seed", range(200))
def test_plan_is_a_consistent_partition(seed):
    rng = random.Random(seed)
    alphabet = "abcde"[: rng.randint(1, 5)]
    existing = [(i, rng.choice(alphabet)) for i in rng.sample(range(100), rng.randint(0, 8))]
    new = [rng.choice(alphabet) for _ in range(rng.randint(0, 8))]
    plan = plan_chunk_changes(existing, new)
    hash_of = dict(existing)
    # every new chunk is either matched to an existing row with the same text, or inserted
    assert sorted([i for _, i in plan.keep] + plan.insert) == list(range(len(new)))
    assert all(hash_of[cid] == new[i] for cid, i in plan.keep)
    # every existing row is kept or deleted, never both, never twice
    assert sorted([cid for cid, _ in plan.keep] + plan.delete) == sorted(hash_of)
    # minimal: nothing is inserted while an unused existing row has the same text
    assert not {new[i] for i in plan.insert} & {hash_of[cid] for cid in plan.delete}
    assert plan.delete == sorted(plan.delete)


def test_vector_literal_keeps_precision():
    assert vector_literal([1, 0.1, -2.5e-8]) == "[1.0,0.1,-2.5e-08]"
    x = 0.123456789012345678
    assert float(vector_literal([x])[1:-1]) == x


def test_batches():
    assert batches([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    assert batches([], 3) == []
    assert batches([1, 2], 0) == [[1], [2]]


def test_as_embedding_error_keeps_classified_errors_and_wraps_others():
    original = embedders.EmbeddingError("unreachable", "connection refused")
    assert ingest_db.as_embedding_error(original) is original
    wrapped = ingest_db.as_embedding_error(RuntimeError("boom"))
    assert isinstance(wrapped, embedders.EmbeddingError)
    assert wrapped.kind == "bad_response"
    assert "RuntimeError" in str(wrapped) and "boom" in str(wrapped)

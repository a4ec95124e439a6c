"""The canonical lists and limits (pgkb_plpy.vocabulary) are the ones every module and the
schema use; no database needed."""

from __future__ import annotations

import re
from pathlib import Path

import pgkb_plpy
import pytest
from pgkb_plpy import chunker, embedders, lexical, query_analysis, vocabulary
from pgkb_plpy.snippets import make_snippet

ROOT = Path(__file__).resolve().parents[2]


def _sql_literal(function: str) -> str:
    sql = (ROOT / "sql" / "010_plpython.sql").read_text(encoding="utf-8")
    match = re.search(rf"FUNCTION {re.escape(function)}\(\).*?AS \$\$ SELECT '([^']+)'::text \$\$", sql, re.DOTALL)
    assert match, f"{function} not found in sql/010_plpython.sql"
    return match.group(1)


def test_the_schema_expects_the_version_of_these_modules():
    assert isinstance(pgkb_plpy.__version__, str)
    assert _sql_literal("kb.plpython_expected_version") == pgkb_plpy.__version__


def test_every_provider_name_has_a_provider_class():
    assert list(embedders.PROVIDERS) == list(vocabulary.EMBEDDING_PROVIDERS)
    assert all(embedders.PROVIDERS[name].name == name for name in vocabulary.EMBEDDING_PROVIDERS)
    assert set(embedders.BUNDLED_MODELS) == set(vocabulary.BUNDLED_PROVIDERS)


def test_the_provider_check_of_the_first_migration_lists_the_same_names():
    core = (ROOT / "migrations" / "0001_core.sql").read_text(encoding="utf-8")
    listed = re.search(r"CHECK \(provider IN \(([^)]*)\)\)", core).group(1)
    assert sorted(re.findall(r"'([a-z0-9]+)'", listed)) == sorted(vocabulary.EMBEDDING_PROVIDERS)


def test_embedding_dimensions_stop_at_the_hnsw_limit():
    limit = vocabulary.MAX_EMBEDDING_DIMENSIONS
    assert embedders.make_provider("hash", "h", limit).dimensions == limit
    with pytest.raises(embedders.EmbeddingError) as ei:
        embedders.make_provider("hash", "h", limit + 1)
    assert ei.value.kind == "bad_input" and str(limit) in str(ei.value)
    core = (ROOT / "migrations" / "0001_core.sql").read_text(encoding="utf-8")
    assert f"dimensions BETWEEN 1 AND {limit}" in core


def test_query_analysis_and_snippets_cut_the_query_at_the_same_length():
    limit = vocabulary.MAX_QUERY_CHARS
    assert query_analysis.MAX_QUERY_CHARS == limit
    long_query = "x" * (limit - 1) + " refund"
    assert len(query_analysis.analyze(long_query)["original"]) == limit
    # the word "refund" starts past the cut, so it cannot be marked
    assert "«" not in make_snippet("a refund policy", long_query)
    assert "«refund»" in make_snippet("a refund policy", "x" * (limit - 8) + " refund")


@pytest.mark.parametrize("char", ["中", "々", "⺀", "\U00020000", "\U00031350"])
def test_han_characters_are_chinese_and_cjk(char):
    assert re.fullmatch(f"[{vocabulary.HAN}]", char)
    assert lexical.is_cjk(char)
    assert query_analysis.analyze(char * 4)["language"] == "zh"


@pytest.mark.parametrize("char", ["あ", "ア", "ｱ", "한", "ᄀ"])
def test_kana_and_hangul_are_cjk_but_not_chinese(char):
    assert lexical.is_cjk(char)
    assert not re.fullmatch(f"[{vocabulary.HAN}]", char)
    assert query_analysis.analyze(char * 4)["language"] == "other"


def test_each_module_uses_its_class_from_the_vocabulary():
    # one character that only some classes hold, per class
    bopomofo, iteration_mark, halfwidth_hangul, ext_g = "ㄅ", "々", "ﾡ", "\U00030000"
    # chunker: one token per character of CJK_ONE_TOKEN_EACH, words of four characters otherwise
    assert chunker.estimate_tokens(bopomofo * 4) == 4
    assert chunker.estimate_tokens(iteration_mark * 4) == 1
    assert chunker.estimate_tokens(halfwidth_hangul * 4) == 1
    # lexical: a CJK run becomes bigrams
    assert lexical.query_terms(iteration_mark * 3) == [iteration_mark * 2]
    assert lexical.is_cjk(halfwidth_hangul)  # (NFKC folds it to full-width before terms are made)
    assert lexical.query_terms(bopomofo * 3) == [bopomofo * 3]
    # hash embedder: CJK runs give unigram and bigram features (plane 3 is outside its set)
    assert "u:中" in embedders.hash_features("中文")
    assert embedders.hash_features(ext_g * 2) == {"w:" + ext_g * 2: 1}
    assert re.fullmatch(f"[{vocabulary.CJK_ONE_TOKEN_EACH}]", ext_g)

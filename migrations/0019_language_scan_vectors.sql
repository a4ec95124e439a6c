-- The dense leg searches a language group of another language than the
-- question's with the question's language component removed (q - mean of the
-- question's language, pgkb_plpy/language_statistics.py), so a group's moments
-- belong to the vector that group is searched with. A moment carries that
-- vector (NULL: the query itself) and, for the bilingual passages of the
-- group, the zh and en groups' moments for the same vector.
ALTER TYPE kb.language_moment
ADD ATTRIBUTE query_vector text,
ADD ATTRIBUTE zh_offset double precision,
ADD ATTRIBUTE zh_scale double precision,
ADD ATTRIBUTE en_offset double precision,
ADD ATTRIBUTE en_scale double precision;

-- kb.language_moments and its PL/Python part take the question's text (its
-- language) as well
DROP FUNCTION IF EXISTS kb.language_moments(text, text, text, integer);
DROP FUNCTION IF EXISTS kb.py_language_moments(text, text, text, integer);

-- one function creates all of a model's HNSW indexes (kb.ensure_hnsw_indexes)
DROP FUNCTION IF EXISTS kb.ensure_language_indexes(text);

-- A dense hit in another language than the question's: the lexical leg could
-- not read that passage, and fusion does not count its silence against it
-- (kb.fuse).
ALTER TYPE kb.leg_hit ADD ATTRIBUTE other_language boolean;

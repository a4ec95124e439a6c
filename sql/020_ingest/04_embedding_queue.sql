-- Deferred embedding: the queue's batches (kb.embed_queue_batch_as,
-- kb.embed_queue_batch) and the procedure that works through them
-- (kb.embed_pending), committing each batch.

CREATE OR REPLACE FUNCTION kb.embed_queue_batch_as(
    p_model text, p_batch_size integer, p_include_exhausted boolean, p_role name
)
RETURNS jsonb
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- A worker embeds the queue of the namespaces its role may see, so one
    -- tenant's worker neither learns the size of another's queue nor spends
    -- its time on it. The role must be one this session could SET ROLE to:
    -- naming another grants nothing the session could not take itself.
    IF p_role IS DISTINCT FROM session_user AND NOT pg_has_role(session_user, p_role, 'MEMBER') THEN
        RAISE EXCEPTION 'pgkb: this session cannot act as role %', p_role USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM kb.models AS m WHERE m.name = p_model) THEN
        RAISE EXCEPTION 'kb.embed_queue_batch: unknown model "%"', left(p_model, 64)
            USING ERRCODE = 'undefined_object', HINT = 'SELECT name FROM kb.models';
    END IF;
    IF p_batch_size IS NULL OR p_batch_size NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'kb.embed_queue_batch: the batch size must be between 1 and 10000 (got %)', p_batch_size
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- read by pgkb_plpy.ingest_db.embed_queue_batch for this call only ('' = every namespace)
    PERFORM set_config('pgkb_call.embed_namespaces', coalesce(kb.allowed_namespaces(p_role)::text, ''), true);
    RETURN kb.py_embed_queue_batch(p_model, p_batch_size, p_include_exhausted);
END;
$$;
COMMENT ON FUNCTION kb.embed_queue_batch_as(text, integer, boolean, name) IS
'One batch of the embedding queue (kb.py_embed_queue_batch) as the owner, restricted to the namespaces p_role may see; p_role must be the session user or a role it belongs to.';

CREATE OR REPLACE FUNCTION kb.embed_queue_batch(
    p_model text, p_batch_size integer, p_include_exhausted boolean DEFAULT false
)
RETURNS jsonb
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT kb.embed_queue_batch_as(p_model, p_batch_size, p_include_exhausted, current_user) $$;
COMMENT ON FUNCTION kb.embed_queue_batch(text, integer, boolean) IS
'Claims up to p_batch_size queued chunks of a model (of the namespaces the current role may see) with SKIP LOCKED, embeds and stores them; returns counts and the error, if any.';

CREATE OR REPLACE PROCEDURE kb.embed_pending(
    p_batch_size integer DEFAULT 32, p_model text DEFAULT NULL, p_include_exhausted boolean DEFAULT false
)
LANGUAGE plpgsql
-- No SET search_path here: a procedure with a SET clause cannot COMMIT. Every
-- name below is schema-qualified, and the functions it calls pin their own.
AS $$
DECLARE
    target text := coalesce(p_model, (SELECT m.name FROM kb.models AS m WHERE m.active));
    outcome jsonb;
    batches integer := 0;
    embedded_total bigint := 0;
BEGIN
    IF target IS NULL THEN
        RAISE EXCEPTION 'kb.embed_pending: no model given and no active model' USING HINT = 'see kb.models';
    END IF;
    IF p_batch_size IS NULL OR p_batch_size < 1 OR p_batch_size > 10000 THEN
        RAISE EXCEPTION 'kb.embed_pending: batch size must be between 1 and 10000 (got %)', p_batch_size;
    END IF;
    LOOP
        -- Progress for clients (pgkb backfill draws its bar from it): before the first batch
        -- and after each committed one, "pgkb progress: " and a JSON object. embedded counts
        -- this call's vectors, remaining every queued chunk of the model (pending or failed);
        -- failed and error describe the batch just done.
        RAISE NOTICE 'pgkb progress: %', jsonb_build_object(
            'model', target,
            'batch', batches,
            'embedded', embedded_total,
            'failed', coalesce((outcome ->> 'failed')::int, 0),
            'remaining', (SELECT count(*) FROM kb.embed_queue AS q WHERE q.model = target),
            'error', outcome -> 'error'
        );
        EXIT WHEN (outcome ->> 'failed')::int > 0;
        outcome := kb.embed_queue_batch(target, p_batch_size, p_include_exhausted);
        COMMIT;
        EXIT WHEN (outcome ->> 'claimed')::int = 0;
        batches := batches + 1;
        embedded_total := embedded_total + (outcome ->> 'embedded')::int;
    END LOOP;
    PERFORM kb.refresh_lexical_stats();
    PERFORM kb.recount_language_statistics(target);
    COMMIT;
    IF (outcome ->> 'failed')::int > 0 THEN
        RAISE WARNING 'kb.embed_pending stopped: %', outcome ->> 'error';
    END IF;
END;
$$;
COMMENT ON PROCEDURE kb.embed_pending (integer, text, boolean) IS
'Embeds queued chunks of a model (default: the active one) batch by batch, committing each; safe with several concurrent workers (SKIP LOCKED). Stops at the first failing batch, whose error stays on the queue rows. Reports progress as a NOTICE per batch: pgkb progress: {"model", "batch", "embedded", "failed", "remaining", "error"}.';

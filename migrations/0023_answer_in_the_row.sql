-- The answer in the row: every kb_retrieve row carries the call's
-- answerability decision and its evidence, so a client (the lab, the MCP
-- server, a framework retriever) needs one call to know whether the
-- passages answer the question. An empty result is "no evidence".
--   answerability  'answer', 'low confidence' or 'no evidence' (rows of a
--                  call whose cutoff is off); kb.answerability is the rule
--   evidence       the evidence of the stage used, in [0, 1]
ALTER TYPE kb.retrieval_row
ADD ATTRIBUTE answerability text,
ADD ATTRIBUTE evidence double precision;

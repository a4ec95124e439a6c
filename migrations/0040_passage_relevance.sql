-- Each kb_retrieve row carries its passage's own relevance: the probability,
-- in [0, 1], that this passage is one the question's answer is drawn from,
-- from the passage's own signals (kb_pipeline.passage_relevance). Unlike the
-- fused score it means the same in every call, so a client can compare
-- passages of different calls or keep those above a threshold.
ALTER TYPE kb.retrieval_row
ADD ATTRIBUTE relevance double precision;

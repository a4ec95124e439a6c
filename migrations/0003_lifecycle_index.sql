-- Documents that carry any lifecycle attribute (a non-active status, dates,
-- removal). Only these (plus superseded ones) can be hidden from retrieval, so
-- kb.visibility() reads this small index instead of scanning every document.
CREATE INDEX documents_lifecycle ON kb.documents (namespace)
INCLUDE (status, effective_from, effective_to, removed_at)
WHERE status <> 'active' OR effective_from IS NOT NULL OR effective_to IS NOT NULL OR removed_at IS NOT NULL;

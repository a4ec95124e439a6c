-- Every numeric setting gets a range (sql/005_settings.sql lists them): a value
-- outside it is refused when written to kb.settings and when a session sets it.
ALTER TABLE kb.settings
ADD COLUMN min_value numeric,
ADD COLUMN max_value numeric;
ALTER TABLE kb.settings ADD CONSTRAINT settings_range_ordered CHECK (
    min_value IS NULL OR max_value IS NULL OR min_value <= max_value
);

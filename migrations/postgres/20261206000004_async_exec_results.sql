-- async-exec: what a body returned (issue 20): the JSON of its `Ok` value, written with
-- a record kept after its success (`delete_on_success(false)`), read with `rt.result`.
-- NULL unless a body returned a value that serializes.
ALTER TABLE async_req ADD COLUMN IF NOT EXISTS result_json TEXT NULL;

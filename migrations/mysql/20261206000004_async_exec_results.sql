-- async-exec: what a body returned (issue 20): the JSON of its `Ok` value, written with
-- a record kept after its success (`delete_on_success(false)`), read with `rt.result`.
-- NULL unless a body returned a value that serializes. (A nullable column at the end:
-- an instant change on MariaDB 10.3+ and MySQL 8.0.12+.)
ALTER TABLE async_req ADD COLUMN result_json LONGTEXT NULL;

-- async-exec: the list indexes' predicate in the form SQLite evaluates cheaply.
-- The same version on every backend.
--
-- SQLite evaluates a partial index's predicate on every row an INSERT, UPDATE or DELETE
-- touches, for every index whose columns or predicate the statement may change: each
-- record written, claimed and deleted evaluates the four predicates of 20261202000001
-- four times. `status NOT IN ('init', 'running')` is compiled with a check that the
-- status is not NULL which converts the text to a number (`status & status`); two
-- comparisons do the same work without it, the first one enough for a running record.
-- Instructions for 20,000 records (SQLite 3.46, claims of 512, one delete): claims 435M
-- before, 400M after (344M with no list index at all), deletes 136M, 104M (85M). The
-- console's queries name the predicate word for word, as SQLite needs.
DROP INDEX IF EXISTS async_req_done;
DROP INDEX IF EXISTS async_req_done_status;
DROP INDEX IF EXISTS async_req_done_executor;
DROP INDEX IF EXISTS async_req_done_created;
CREATE INDEX IF NOT EXISTS async_req_done ON async_req (application_name, id)
    WHERE status <> 'running' AND status <> 'init';
CREATE INDEX IF NOT EXISTS async_req_done_status ON async_req (application_name, status, id)
    WHERE status <> 'running' AND status <> 'init';
CREATE INDEX IF NOT EXISTS async_req_done_executor ON async_req (application_name, executor, id)
    WHERE status <> 'running' AND status <> 'init';
CREATE INDEX IF NOT EXISTS async_req_done_created ON async_req (create_time)
    WHERE status <> 'running' AND status <> 'init';

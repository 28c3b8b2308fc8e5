-- async-exec: the console's request list, in id order (the order records were written in).
-- The same version on every backend.
--
-- On PostgreSQL and SQLite the list indexes are partial (finished records only), so the
-- path every request takes never touches them. MariaDB/MySQL has no partial indexes:
-- these are full, narrower than those of 20261201000009, and the unfiltered list reads
-- the primary key.
DROP INDEX async_req_created ON async_req;
DROP INDEX async_req_status_created ON async_req;
DROP INDEX async_req_executor_created ON async_req;
CREATE INDEX async_req_done_status ON async_req (application_name, status, id);
CREATE INDEX async_req_done_executor ON async_req (application_name, executor, id);
CREATE INDEX async_req_done_created ON async_req (create_time);

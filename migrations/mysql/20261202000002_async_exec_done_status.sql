-- async-exec: the console's status list on MariaDB/MySQL without a cost to claims.
-- The same version on every backend (a no-op on PostgreSQL and SQLite, whose list
-- indexes are partial already).
--
-- MariaDB/MySQL has no partial indexes, so `async_req_done_status (application_name,
-- status, id)` moved an entry on every claim (`init` to `running`) and every outcome.
-- Indexed on a virtual column that is NULL while a record waits for its first run or
-- runs, a claim leaves the index alone: InnoDB updates a secondary index only when a
-- column of it changes. Filters by a finished status name `done_status` (store/ops.rs).
ALTER TABLE async_req
    ADD COLUMN done_status VARCHAR(255)
        AS (CASE WHEN status IN ('init', 'running') THEN NULL ELSE status END) VIRTUAL;
DROP INDEX async_req_done_status ON async_req;
CREATE INDEX async_req_done_status ON async_req (application_name, done_status, id);

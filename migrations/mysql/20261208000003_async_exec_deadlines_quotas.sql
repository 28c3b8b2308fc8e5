-- async-exec: the deadline sweep reads waiting requests only (issue 30, H4), and quotas
-- that serialise no submissions (below).
-- `deadline_at` stays on a finished request (it is shown with it), so the index of
-- 20261206000001 (every request, NULL for those without a deadline) held the whole
-- history, and the sweep that ends waiting requests past their deadline (every second, on
-- every instance) read its range: 1.1 to 2.9 s at 300,000 finished requests, its next-key
-- locks holding up ordinary inserts meanwhile.
--
-- MariaDB/MySQL has no partial indexes: the index is on a virtual column that is the
-- deadline while the request waits (`init`, `failed`) and NULL otherwise, which the
-- sweep's range (`deadline_waiting <= now`) leaves out. A request without a deadline
-- stays NULL whatever its status, so a claim or an outcome leaves its entry alone (InnoDB
-- updates a secondary index only when a column of it changes). The sweep reads the ids
-- (a plain read, no lock) and ends them by primary key, so it locks no gap.
ALTER TABLE async_req
    ADD COLUMN deadline_waiting BIGINT
        AS (CASE WHEN status IN ('init', 'failed') THEN deadline_at ELSE NULL END) VIRTUAL;
DROP INDEX async_req_deadline ON async_req;
CREATE INDEX async_req_deadline_waiting ON async_req (application_name, deadline_waiting);

-- Quotas of waiting requests without a lock held until the caller commits (issue 30,
-- M1, M3, M11). A call under a quota reserves its place in one short statement of its
-- own (`reserved`), admitted while `counted + reserved + settled` stays within the
-- limit; its transaction's commit moves it to `settled` (committed since the last count),
-- a rollback gives it back. A sweep counts the waiting requests under each quota about
-- every second (`counted`) and takes from `settled` what it read there before counting.
-- `touched`: the last reservation (a reservation older than a minute whose transaction
-- never said how it ended, its process gone, is dropped); `reconciled`: the last count.
-- Rows are made on a quota's first call and deleted when empty and untouched for a
-- minute. The rows of 20261206000005 start over (made again on their next call).
DELETE FROM async_quota;
ALTER TABLE async_quota
    ADD COLUMN counted BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN reserved BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN settled BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN touched BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN reconciled BIGINT NOT NULL DEFAULT 0;

-- async-exec: the deadline sweep reads waiting requests only (issue 30, H4), and quotas
-- that serialise no submissions (below).
-- `deadline_at` stays on a finished request (it is shown with it), so the index of
-- 20261206000001 (every request with a deadline) held the whole history, and the sweep
-- that ends waiting requests past their deadline (every second, on every instance) read
-- it, or read every waiting request through the claim index. This index holds only the
-- waiting requests (`init`, `failed`) with a deadline: a request leaves it when it is
-- claimed or finishes. The sweep's statement names the same condition.
DROP INDEX IF EXISTS async_req_deadline;
CREATE INDEX IF NOT EXISTS async_req_deadline_waiting ON async_req (application_name, deadline_at)
    WHERE deadline_at IS NOT NULL AND status IN ('init', 'failed');

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
ALTER TABLE async_quota ADD COLUMN counted BIGINT NOT NULL DEFAULT 0;
ALTER TABLE async_quota ADD COLUMN reserved BIGINT NOT NULL DEFAULT 0;
ALTER TABLE async_quota ADD COLUMN settled BIGINT NOT NULL DEFAULT 0;
ALTER TABLE async_quota ADD COLUMN touched BIGINT NOT NULL DEFAULT 0;
ALTER TABLE async_quota ADD COLUMN reconciled BIGINT NOT NULL DEFAULT 0;

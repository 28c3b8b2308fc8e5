-- async-exec: the deadline sweep reads waiting requests only (issue 30, H4).
-- `deadline_at` stays on a finished request (it is shown with it), so the index of
-- 20261206000001 (every request with a deadline) held the whole history, and the sweep
-- that ends waiting requests past their deadline (every second, on every instance) read
-- it, or read every waiting request through the claim index. This index holds only the
-- waiting requests (`init`, `failed`) with a deadline: a request leaves it when it is
-- claimed or finishes. The sweep's statement names the same condition.
DROP INDEX IF EXISTS async_req_deadline;
CREATE INDEX IF NOT EXISTS async_req_deadline_waiting ON async_req (application_name, deadline_at)
    WHERE deadline_at IS NOT NULL AND status IN ('init', 'failed');

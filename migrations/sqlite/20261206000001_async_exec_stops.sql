-- async-exec: deadlines and cancels of running requests (issue 20).
-- `deadline_at` (unix ms, database clock): a request not started by then goes `dead`
-- ("deadline passed"); one still running at it is told to stop and ends `cancelled`.
-- `cancel_requested` (unix ms): an operator or the code asked a running request to stop;
-- the instance running it tells its body (`Context::is_cancelled`) within about a second.
-- NULL unless used: the partial index holds only requests with a deadline.
ALTER TABLE async_req ADD COLUMN deadline_at BIGINT NULL;
ALTER TABLE async_req ADD COLUMN cancel_requested BIGINT NULL;
CREATE INDEX IF NOT EXISTS async_req_deadline ON async_req (deadline_at)
    WHERE deadline_at IS NOT NULL;

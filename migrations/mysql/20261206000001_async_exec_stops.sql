-- async-exec: deadlines and cancels of running requests (issue 20).
-- `deadline_at` (unix ms, database clock): a request not started by then goes `dead`
-- ("deadline passed"); one still running at it is told to stop and ends `cancelled`.
-- `cancel_requested` (unix ms): an operator or the code asked a running request to stop;
-- the instance running it tells its body (`Context::is_cancelled`) within about a second.
-- (Nullable columns at the end: an instant change on MariaDB 10.3+ and MySQL 8.0.12+.)
-- MariaDB/MySQL has no partial indexes: the deadline index holds every record, NULL for
-- those without a deadline; the sweep that ends passed deadlines reads its range.
ALTER TABLE async_req ADD COLUMN deadline_at BIGINT NULL, ADD COLUMN cancel_requested BIGINT NULL;
CREATE INDEX async_req_deadline ON async_req (deadline_at);

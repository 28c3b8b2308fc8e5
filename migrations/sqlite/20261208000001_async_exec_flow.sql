-- async-exec: the record knows its flow (issue 30). `queue_name` is the queue whose limits
-- a request runs under ('' for none: executors without `queue = ".."`); `partition_key`
-- its partition of that queue (`Call::partition`, the attribute's `partition = ..`, else
-- its owner; '': the queue's shared one). Claims and the counts of running requests
-- read them from the record, not from each process's list of executors. Existing waiting
-- and running records of executors in a queue get it at the next start of an instance
-- that knows the executor (and at each retry pass after).
ALTER TABLE async_req ADD COLUMN queue_name TEXT NOT NULL DEFAULT '';
ALTER TABLE async_req ADD COLUMN partition_key TEXT NOT NULL DEFAULT '';

-- The claim index gains the queue after the application.
DROP INDEX IF EXISTS async_req_due;
CREATE INDEX IF NOT EXISTS async_req_due
    ON async_req (application_name, queue_name, status, priority DESC, run_at, id)
    WHERE status IN ('init', 'failed');

-- The counts of a queue's running requests (all, per partition, per instance).
CREATE INDEX IF NOT EXISTS async_req_running
    ON async_req (application_name, queue_name, partition_key)
    WHERE status = 'running';

-- A limit per partition, set while running (NULL keeps the builder's).
ALTER TABLE async_queue ADD COLUMN per_partition INTEGER NULL;

-- The partition the queue's last claim served last: the next claim takes turns from the
-- one after it (round-robin between partitions across claims).
ALTER TABLE async_queue ADD COLUMN turn_after TEXT NULL;

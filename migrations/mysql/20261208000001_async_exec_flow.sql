-- async-exec: the record knows its flow (issue 30). `queue_name` is the queue whose limits
-- a request runs under ('' for none: executors without `queue = ".."`); `partition_key`
-- its partition of that queue (`Call::partition`, the attribute's `partition = ..`, else
-- its owner; '': the queue's shared one). Claims and the counts of running requests
-- read them from the record, not from each process's list of executors. Existing waiting
-- and running records of executors in a queue get it at the next start of an instance
-- that knows the executor (and at each retry pass after).
-- A queue's name is at most 190 characters here: the claim index's key (application,
-- queue, status) must fit InnoDB's 3,072 bytes in utf8mb4.
ALTER TABLE async_req
    ADD COLUMN queue_name VARCHAR(190) NOT NULL DEFAULT '',
    ADD COLUMN partition_key VARCHAR(255) NOT NULL DEFAULT '',
    -- The claim index gains the queue after the application (MariaDB has no partial
    -- index: one index replaces the other, so that an insert maintains no more than before).
    DROP INDEX async_req_due,
    ADD INDEX async_req_due (application_name, queue_name, status, priority DESC, run_at, id);

-- A limit per partition, set while running (NULL keeps the builder's).
-- The partition the queue's last claim served last: the next claim takes turns from the
-- one after it (round-robin between partitions across claims).
ALTER TABLE async_queue
    ADD COLUMN per_partition INTEGER NULL,
    ADD COLUMN turn_after VARCHAR(255) NULL;

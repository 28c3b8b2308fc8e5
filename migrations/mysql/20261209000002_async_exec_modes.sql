-- async-exec: modes of a queue (issue 30, item 4). `singleton_key` names the singleton a
-- request belongs to (`QueueLimits::singleton`: its queue and partition); NULL for every
-- other request. At most one live (waiting or running) request holds a key. MariaDB has
-- no partial index: `singleton_live` is the key while the request is live and NULL once
-- it finished, and a unique index over it (NULLs are distinct) admits one live request
-- per key. Two calls racing, in two instances or in two callers' transactions, cannot
-- both write one: the second's INSERT waits for the first's transaction and then fails
-- on the index, and the call returns the first's id. A rolled-back call leaves nothing.
-- A byte string, so that neither case nor trailing spaces are ignored (as the
-- idempotency key); 2,000 bytes keep the index within InnoDB's 3,072.
ALTER TABLE async_req
    ADD COLUMN singleton_key VARBINARY(2000) NULL,
    ADD COLUMN singleton_live VARBINARY(2000) AS
        (CASE WHEN status IN ('init', 'failed', 'running') THEN singleton_key END) PERSISTENT,
    ADD UNIQUE INDEX async_req_singleton (application_name, singleton_live);

-- Sequences (`QueueLimits::sequence`): a waiting record of a sequence's queue is claimed
-- only once no earlier record of its partition (a smaller id) is waiting, running, or
-- (as the queue's choice on failure says) dead. The claim's candidate read asks so of
-- each candidate, through this index (no partial index here: every record is in it; the
-- status by its first 12 characters, to keep the key within InnoDB's 3,072 bytes).
ALTER TABLE async_req
    ADD INDEX async_req_sequence (application_name, queue_name, partition_key, status(12), id);

-- Trailing debounce (`#[async_exec(debounce = "5s")]`): `debounce_key` names the executor
-- and partition whose calls merge (a hash); at most one request of a key waits (`init`):
-- `debounce_waiting` is the key while the request waits and NULL after, with a unique
-- index on it; a call while one waits replaces its arguments and start (`INSERT .. ON
-- DUPLICATE KEY UPDATE`) and counts itself in `merged` (0: written by the call).
ALTER TABLE async_req
    ADD COLUMN debounce_key VARBINARY(100) NULL,
    ADD COLUMN merged BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN debounce_waiting VARBINARY(100) AS
        (CASE WHEN status = 'init' THEN debounce_key END) PERSISTENT,
    ADD UNIQUE INDEX async_req_debounce (application_name, debounce_waiting);

-- async-exec: modes of a queue (issue 30, item 4). `singleton_key` names the singleton a
-- request belongs to (`QueueLimits::singleton`: its queue and partition); NULL for every
-- other request. At most one live (waiting or running) request holds a key: the unique
-- index below holds only live rows, so two calls racing, in two instances or in two
-- callers' transactions, cannot both write one (the second waits for the first's
-- transaction, then finds its row: `INSERT .. ON CONFLICT DO NOTHING`), and a finished
-- request frees its key. A rolled-back call leaves nothing.
ALTER TABLE async_req ADD COLUMN IF NOT EXISTS singleton_key TEXT NULL;

CREATE UNIQUE INDEX IF NOT EXISTS async_req_singleton
    ON async_req (application_name, singleton_key)
    WHERE singleton_key IS NOT NULL AND status IN ('init', 'failed', 'running');

-- Sequences (`QueueLimits::sequence`): a waiting record of a sequence's queue is claimed
-- only once no earlier record of its partition (a smaller id) is waiting, running, or
-- (as the queue's choice on failure says) dead. The claim's candidate read asks so of
-- each candidate, through this index (records in a queue only: the term
-- `queue_name <> ''` is in the read too, so that SQLite uses the partial index).
CREATE INDEX IF NOT EXISTS async_req_sequence
    ON async_req (application_name, queue_name, partition_key, status, id)
    WHERE queue_name <> '';

-- Trailing debounce (`#[async_exec(debounce = "5s")]`): `debounce_key` names the executor
-- and partition whose calls merge (a hash); at most one request of a key waits (`init`):
-- a call while one waits replaces its arguments and start (`INSERT .. ON CONFLICT DO
-- UPDATE` on the index below) and counts itself in `merged` (0: written by the call).
ALTER TABLE async_req ADD COLUMN IF NOT EXISTS debounce_key TEXT NULL;
ALTER TABLE async_req ADD COLUMN IF NOT EXISTS merged BIGINT NOT NULL DEFAULT 0;

CREATE UNIQUE INDEX IF NOT EXISTS async_req_debounce
    ON async_req (application_name, debounce_key)
    WHERE debounce_key IS NOT NULL AND status = 'init';

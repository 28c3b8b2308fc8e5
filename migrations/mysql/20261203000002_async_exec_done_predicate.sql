-- async-exec: SQLite's list indexes get a predicate it evaluates more cheaply. The same
-- version on every backend: a no-op here.
SELECT 1;

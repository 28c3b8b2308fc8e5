-- async-exec: a running body's progress (issue 20): `ctx.progress(done, total)`, written
-- at most once a second per request while it runs, shown by `rt.get`, the API, the CLI
-- and the console. NULL until a body reports some. (Nullable columns at the end: an
-- instant change on MariaDB 10.3+ and MySQL 8.0.12+, whatever the table's size.)
ALTER TABLE async_req ADD COLUMN progress_done BIGINT NULL, ADD COLUMN progress_total BIGINT NULL;

-- async-exec: a running body's progress (issue 20): `ctx.progress(done, total)`, written
-- at most once a second per request while it runs, shown by `rt.get`, the API, the CLI
-- and the console. NULL until a body reports some.
ALTER TABLE async_req ADD COLUMN progress_done BIGINT NULL;
ALTER TABLE async_req ADD COLUMN progress_total BIGINT NULL;

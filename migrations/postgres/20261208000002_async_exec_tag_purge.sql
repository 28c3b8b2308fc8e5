-- async-exec: the retention sweep's purge of tags whose request is gone (issue 30). It
-- deletes the rows of one application written before a time; the primary key
-- (application_name, tag, req_id) let it read every tag of the application to find them.
-- The same version on every backend.
CREATE INDEX IF NOT EXISTS async_tag_app ON async_tag (application_name, create_time);

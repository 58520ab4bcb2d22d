-- Portable SQL, like 0001.

-- Files a client uploaded for a launch (StudyService.Upload), by SHA-256, until a launch naming
-- them consumes them: the launch's transaction keeps in `files` what its study references (each
-- problem statement, once by digest) and drops its uploads, and a refused launch drops them too,
-- so a refused launch leaves nothing behind. Uploads no launch consumed within an hour are dropped
-- at the next upload. Workers' files (PutFile) go straight to `files`.
CREATE TABLE uploads (
    digest      TEXT PRIMARY KEY,          -- SHA-256 of content, lowercase hex
    size        BIGINT NOT NULL,
    content     BYTEA NOT NULL,
    created_ms  BIGINT NOT NULL
);

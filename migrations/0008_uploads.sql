-- Portable SQL, like 0001.

-- A client's uploads for a launch (StudyService.Upload), received in pieces of at most 1 MiB and
-- stored as they arrive, so that the coordinator never holds an upload whole. An upload is
-- complete once its pieces matched the size and the SHA-256 it announced. It is held until a
-- launch naming it consumes it: the launch's transaction keeps in `files` what its study
-- references (a problem statement, as the file uploaded) and drops its uploads, and a refused
-- launch drops them too, so a refused launch leaves nothing behind. Uploads no launch consumed
-- within an hour, complete or not, are dropped at the next upload. Workers' files (PutFile) go
-- straight to `files`.
CREATE TABLE uploads (
    id          TEXT PRIMARY KEY,            -- one per Upload call
    digest      TEXT NOT NULL,               -- SHA-256 of the content announced, lowercase hex
    size        BIGINT NOT NULL,
    pieces      BIGINT NOT NULL DEFAULT 0,   -- pieces stored so far
    complete    BIGINT NOT NULL DEFAULT 0,   -- 1 once every piece arrived and matched
    created_ms  BIGINT NOT NULL
);
-- At most one complete upload of a file.
CREATE UNIQUE INDEX uploads_complete ON uploads (digest) WHERE complete = 1;

CREATE TABLE upload_pieces (
    upload  TEXT NOT NULL,
    seq     BIGINT NOT NULL,
    data    BYTEA NOT NULL,
    PRIMARY KEY (upload, seq)
);

-- A file kept from an upload stays in its pieces, and is served to workers piece by piece.
-- `pieces` = 0: the file is whole in `content` (the files the coordinator and workers write);
-- otherwise `content` is empty and the file is its `pieces` rows of `file_pieces`.
ALTER TABLE files ADD COLUMN pieces BIGINT NOT NULL DEFAULT 0;

CREATE TABLE file_pieces (
    digest  TEXT NOT NULL,
    seq     BIGINT NOT NULL,
    data    BYTEA NOT NULL,
    PRIMARY KEY (digest, seq)
);

-- Snapshots across hosts: the snapshots workers pushed to a snapshot registry, by registry
-- (HOST:PORT as the workers name it), trajectory payload digest and step. `image_id` is the id the
-- pushing engine reported: a pulled image must have it. A claim hands a worker the continuations
-- whose snapshots it holds first, then those with a snapshot at or before their step in its
-- registry, then the rest; their jobs name the nearest such snapshot.
CREATE TABLE registry_snapshots (
    registry       TEXT NOT NULL,
    payload_digest TEXT NOT NULL,
    t              BIGINT NOT NULL,
    image_id       TEXT NOT NULL,
    pushed_ms      BIGINT NOT NULL,
    PRIMARY KEY (registry, payload_digest, t)
);

-- The task-state study's jobs (docs/task-state.md): sessions and model calls live in `jobs`.
-- Portable SQL, like 0001.

-- The capability a job needs when it is not its study's runner: a model call needs a worker
-- offering its endpoint (`model:BASE_URL`). NULL: the study's runner (every other job).
ALTER TABLE jobs ADD COLUMN needs TEXT;

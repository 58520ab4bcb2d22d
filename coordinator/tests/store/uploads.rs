//! A client's uploads for a launch (issue 24, item 2): a refused launch stores nothing and drops
//! what was uploaded for it; a launch keeps each problem statement once, by digest, and nothing
//! else it was sent twice; uploads no launch consumed expire.

use std::collections::BTreeMap;

use vcurve_coordinator::error::CoordinatorError;
use vcurve_record::Digest;
use vcurve_record::TrajectoryPayload;

use super::*;

/// Every table a launch writes, and how many rows each has.
async fn rows(store: &SqlStore) -> BTreeMap<&'static str, i64> {
    let mut out = BTreeMap::new();
    for table in
        ["studies", "trajectories", "jobs", "continuations", "files", "file_pieces", "uploads", "upload_pieces"]
    {
        out.insert(table, store.rows(table).await.unwrap());
    }
    out
}

async fn nothing_stored(store: &SqlStore, name: &str, what: &str) {
    let rows = rows(store).await;
    assert!(rows.values().all(|&n| n == 0), "{name}: {what} left {rows:?}");
}

/// Stage each file of `files` (path → contents) as a client's upload; path → digest.
async fn stage(c: &Coordinator<SqlStore>, files: &BTreeMap<String, String>) -> BTreeMap<String, Digest> {
    let mut digests = BTreeMap::new();
    for (path, text) in files {
        let digest = Digest::of(text.as_bytes());
        c.stage_upload(&digest, text.as_bytes()).await.unwrap();
        digests.insert(path.clone(), digest);
    }
    digests
}

const CALC: &str = r#"{"id": "calc-1", "image": "vcurve-task-calc:test", "workdir": "/testbed",
  "evaluator": {"kind": "command", "command": "python3 -m unittest", "timeout_s": 60}}"#;

/// A study of two tasks: `calc-2` inline with its problem statement in a file, `calc-1` a task
/// file with none.
const TASKS: &str = "name: statements\nseed: 3\nrunner: {kind: agent, agent: agent}
tasks:
  - id: calc-2
    image: vcurve-task-calc:test
    workdir: /testbed
    evaluator: {kind: command, command: python3 -m unittest, timeout_s: 60}
    problem_statement_file: tasks/calc-2.md
    base_runs: 2
  - {task: tasks/calc.json, base_runs: 2}
";

fn task_files(statement: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("tasks/calc-2.md".to_string(), statement.to_string()),
        ("tasks/calc.json".to_string(), CALC.to_string()),
    ])
}

#[tokio::test]
async fn a_refused_launch_stores_nothing_and_drops_what_was_uploaded_for_it() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let trs = [Tr { id: "a", length: 20, cliff: 8, p: 0.9, labels: "judge: 5" }];
        let (yaml, files) = spec("refused", "", &trs);
        let statement = "Fix add().\n".repeat(1000);
        // Refusals only the coordinator makes (a client that skipped its own checks, another build):
        // an invalid spec, a runner kind it does not offer, a file it never got, a restart check of
        // no study.
        let cases: Vec<(String, BTreeMap<String, String>, &str)> = vec![
            (yaml.replace("judge: 5", "judge: 21"), files.clone(), "labels.judge"),
            (TASKS.replace("kind: agent", "kind: quantum"), task_files(&statement), "runner"),
            (TASKS.to_string(), task_files(&statement), "no file with SHA-256"),
            (TASKS.to_string(), task_files(&statement), "no file with SHA-256"),
            ("restart_check: {of: nowhere}\n".to_string(), files.clone(), "restart_check.of"),
        ];
        for (i, (yaml, files, named)) in cases.into_iter().enumerate() {
            let mut files = files;
            // The launch names a file whose upload never came: a task file, read to parse the
            // spec, or a problem statement, kept unread.
            let never = match i {
                2 => Some("tasks/calc.json"),
                3 => Some("tasks/calc-2.md"),
                _ => None,
            };
            let never = never.map(|path| (path, files.remove(path).unwrap()));
            let mut digests = stage(&c, &files).await;
            if let Some((path, text)) = never {
                digests.insert(path.into(), Digest::of(text.as_bytes()));
            }
            assert!(ts.store.rows("uploads").await.unwrap() > 0, "{}: staged", ts.name);
            let err = c.launch_uploaded(&yaml, &digests).await.unwrap_err();
            assert!(err.to_string().contains(named), "{}: {err}", ts.name);
            nothing_stored(&ts.store, ts.name, &format!("the refused launch {i} ({err})")).await;
        }
        // Every file a spec names is text: an upload that is not is refused, and not staged.
        let bytes = vec![b'a', 0xff, b'b'];
        let err = c.stage_upload(&Digest::of(&bytes), &bytes).await.unwrap_err().to_string();
        assert!(err.contains("UTF-8") && err.contains("byte 1"), "{}: {err}", ts.name);
        nothing_stored(&ts.store, ts.name, "a refused upload").await;
        // Fixed, the same launch is stored, and consumes its uploads.
        let digests = stage(&c, &files).await;
        c.launch_uploaded(&yaml, &digests).await.unwrap();
        assert_eq!(ts.store.rows("studies").await.unwrap(), 1, "{}", ts.name);
        assert_eq!(ts.store.rows("uploads").await.unwrap(), 0, "{}: consumed", ts.name);
        ts.finish().await;
    }
}

#[tokio::test]
async fn a_problem_statement_is_stored_once_by_digest_and_workers_get_it_whole() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        // 4 MiB of statement: any copy of it would show in the store's size.
        let statement = "The sum of two numbers is off by one. ".repeat(4 << 20 >> 5);
        let files = task_files(&statement);
        let digests = stage(&c, &files).await;
        let study = c.launch_uploaded(TASKS, &digests).await.unwrap();
        let statement_digest = Digest::of(statement.as_bytes());
        assert_eq!(digests["tasks/calc-2.md"], statement_digest);
        // Kept: the statement (the upload, by its digest) and each task's payload; the uploads of
        // the task file and of the statement are gone.
        assert_eq!(ts.store.rows("uploads").await.unwrap(), 0, "{}", ts.name);
        assert_eq!(ts.store.rows("upload_pieces").await.unwrap(), 0, "{}", ts.name);
        assert_eq!(ts.store.rows("files").await.unwrap(), 3, "{}: the statement and two payloads", ts.name);
        // The statement stays in the pieces it was uploaded in, moved inside the database.
        let pieces = statement.len().div_ceil(vcurve_proto::CHUNK_BYTES);
        assert_eq!(ts.store.rows("file_pieces").await.unwrap(), pieces as i64, "{}", ts.name);
        assert_eq!(c.file_pieces(&statement_digest).await.unwrap(), pieces as u32, "{}", ts.name);
        assert_eq!(c.file(&statement_digest).await.unwrap(), statement.as_bytes(), "{}", ts.name);
        // The stored spec holds no statement.
        let record = c.store().study(&study).await.unwrap();
        assert!(record.spec.tasks.iter().all(|t| t.task.problem_statement.is_none()), "{}", ts.name);
        let spec_json = serde_json::to_string(&record.spec).unwrap();
        assert!(spec_json.len() < 4096, "{}: the stored spec is {} bytes", ts.name, spec_json.len());

        // A worker gets the base run's payload small, and the statement by its digest.
        let w = c.register("w", 8, &["agent:agent".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let jobs = c.lease(&w, 8, Duration::ZERO).await.unwrap();
        assert_eq!(jobs.len(), 4, "{}", ts.name);
        for job in &jobs {
            let JobKey::BaseRun { task, .. } = &job.key else { panic!("{:?}", job.key) };
            let digest = job.trajectory_digest.as_ref().unwrap();
            let bytes = c.file(digest).await.unwrap();
            assert!(bytes.len() < 4096, "{}: the payload of {task} is {} bytes", ts.name, bytes.len());
            let mut payload = TrajectoryPayload::from_fetched(&bytes, digest).unwrap();
            let expected = (task == "calc-2").then(|| statement_digest.to_string());
            assert_eq!(payload.problem_statement_sha256, expected, "{}: {task}", ts.name);
            if let Some(d) = &payload.problem_statement_sha256 {
                payload.fill_problem_statement(c.file(&d.parse().unwrap()).await.unwrap()).unwrap();
            }
            let def = payload.task_def().unwrap();
            let whole = (task == "calc-2").then_some(statement.as_str());
            assert_eq!(def.problem_statement.as_deref(), whole, "{}: {task}", ts.name);
        }

        // Launched again, the statement is not uploaded again (the coordinator has it) nor kept twice.
        assert!(c.missing_files(std::slice::from_ref(&statement_digest)).await.unwrap().is_empty());
        let task_file = BTreeMap::from([("tasks/calc.json".to_string(), CALC.to_string())]);
        let mut digests = stage(&c, &task_file).await;
        digests.insert("tasks/calc-2.md".into(), statement_digest.clone());
        c.launch_uploaded(TASKS, &digests).await.unwrap();
        assert_eq!(ts.store.rows("files").await.unwrap(), 3, "{}: the same statement and payloads", ts.name);
        // So does a statement written inline: one file, by its digest.
        let inline = TASKS.replace("problem_statement_file: tasks/calc-2.md", "problem_statement: Fix add() inline.");
        let digests = stage(&c, &task_file).await;
        c.launch_uploaded(&inline, &digests).await.unwrap();
        assert_eq!(ts.store.rows("files").await.unwrap(), 5, "{}: a statement and its payload", ts.name);
        assert_eq!(c.file(&Digest::of(b"Fix add() inline.")).await.unwrap(), b"Fix add() inline.");
        ts.finish().await;
    }
}

#[tokio::test]
async fn uploads_no_launch_consumed_expire_and_a_launch_relying_on_one_is_told_to_upload_again() {
    for ts in TestStore::both().await {
        let (c, clock) = coordinator(&ts.store);
        let (yaml, files) = spec("late", "", &[Tr { id: "a", length: 5, cliff: 2, p: 0.5, labels: "" }]);
        let digests = stage(&c, &files).await;
        clock.advance(Duration::from_millis(vcurve_coordinator::store::UPLOAD_TTL_MS as u64 + 1));
        // The next upload drops the expired one.
        stage(&c, &BTreeMap::from([("x".to_string(), "another file".to_string())])).await;
        let wanted: Vec<Digest> = digests.values().cloned().collect();
        assert_eq!(c.missing_files(&wanted).await.unwrap(), wanted, "{}", ts.name);
        let err = c.launch_uploaded(&yaml, &digests).await.unwrap_err();
        assert!(matches!(err, CoordinatorError::NotUploaded { .. }), "{}: {err}", ts.name);
        assert_eq!(tonic::Status::from(err).code(), tonic::Code::FailedPrecondition, "{}", ts.name);
        // Uploaded again, it launches.
        let digests = stage(&c, &files).await;
        c.launch_uploaded(&yaml, &digests).await.unwrap();
        ts.finish().await;
    }
}

#[tokio::test]
async fn an_upload_is_stored_in_pieces_as_it_arrives_and_one_that_is_not_what_it_announced_is_dropped() {
    const PIECE: usize = vcurve_proto::CHUNK_BYTES;
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        // 2.5 pieces of two-byte characters after one byte: characters straddle the boundaries.
        let text = format!("a{}", "é".repeat(PIECE * 5 / 4));
        let digest = Digest::of(text.as_bytes());
        // Pieces as a client sends them, of any size: stored in pieces of CHUNK_BYTES.
        let mut upload = c.begin_upload(&digest, text.len() as u64).await.unwrap();
        for piece in text.as_bytes().chunks(700_001) {
            upload.piece(piece).await.unwrap();
        }
        assert_eq!(ts.store.rows("upload_pieces").await.unwrap(), 2, "{}: stored as they fill", ts.name);
        let wanted = std::slice::from_ref(&digest);
        assert_eq!(c.missing_files(wanted).await.unwrap(), wanted, "{}: not usable unfinished", ts.name);
        assert!(upload.finish().await.unwrap(), "{}", ts.name);
        assert_eq!(ts.store.rows("upload_pieces").await.unwrap(), 3, "{}", ts.name);
        assert!(c.missing_files(wanted).await.unwrap().is_empty(), "{}", ts.name);
        // Uploaded again, it is not new, and held once.
        assert!(!c.stage_upload(&digest, text.as_bytes()).await.unwrap(), "{}", ts.name);
        assert_eq!((ts.store.rows("uploads").await.unwrap(), ts.store.rows("upload_pieces").await.unwrap()), (1, 3));
        let spec = "name: p\nseed: 1\nrunner: {kind: synthetic}\ntrajectories:\n  - {id: a, length: 1, curve: c.csv}\n";
        let err = c.launch_uploaded(spec, &BTreeMap::from([("c.csv".into(), digest.clone())])).await.unwrap_err();
        assert!(err.to_string().contains("c.csv"), "{}: read whole to parse: {err}", ts.name);
        nothing_stored(&ts.store, ts.name, "a refused launch of a file in pieces").await;

        // Whatever is not the file its first piece announced is refused, and dropped at once.
        let bytes = text.as_bytes();
        let other = Digest::of(b"another file");
        // The right digest, with its first byte changed on the way.
        let tampered = [b"b", &bytes[1..]].concat();
        let cases: [(&Digest, u64, Vec<&[u8]>, &str); 5] = [
            (&digest, bytes.len() as u64, vec![&tampered[..PIECE + 7], &tampered[PIECE + 7..]], "not the"),
            (&other, bytes.len() as u64, vec![bytes], "not the"),
            (&digest, bytes.len() as u64 - 1, vec![bytes], "longer than"),
            (&digest, bytes.len() as u64 + 1, vec![bytes], "ended after"),
            // The first piece ends inside a character that the next byte cannot continue.
            (&digest, 2 * PIECE as u64, vec![&bytes[..PIECE], &[0xff; PIECE]], "byte 1048575"),
        ];
        for (i, (announced, size, pieces, named)) in cases.into_iter().enumerate() {
            let mut upload = c.begin_upload(announced, size).await.unwrap();
            let mut refused = None;
            for piece in pieces {
                if let Err(e) = upload.piece(piece).await {
                    refused = Some(e);
                    break;
                }
            }
            let err = match refused {
                Some(e) => {
                    upload.abandon().await;
                    e
                }
                None => upload.finish().await.unwrap_err(),
            };
            assert!(err.to_string().contains(named), "{}: case {i}: {err}", ts.name);
            nothing_stored(&ts.store, ts.name, &format!("the refused upload {i}")).await;
        }
        // What is not a digest never reaches an upload: the study service refuses it, naming the
        // field (testkit's cluster tests, `grpc`).
        let err = Digest::parse("abc").err().unwrap().to_string();
        assert!(err.contains("not a SHA-256 digest"), "{err}");
        let err = c.begin_upload(&digest, vcurve_coordinator::spec::MAX_FILE_BYTES + 1).await.err().unwrap();
        assert!(err.to_string().contains("over the limit of 64 MiB"), "{err}");
        ts.finish().await;
    }
}

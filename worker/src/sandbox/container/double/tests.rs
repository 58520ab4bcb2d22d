use super::*;
use crate::sandbox::container::Container;

fn spec(image: &str) -> ContainerSpec {
    ContainerSpec {
        image: image.into(),
        memory_bytes: 1 << 30,
        pids_limit: 256,
        labels: BTreeMap::new(),
        network: Default::default(),
        exec_env: BTreeMap::new(),
    }
}

fn run(script: &str) -> ExecRequest {
    ExecRequest {
        argv: vec!["bash".into(), "-c".into(), script.into()],
        env: BTreeMap::new(),
        workdir: "/testbed".into(),
        timeout: Duration::from_secs(10),
        leave_running: false,
        reaps_itself: false,
    }
}

fn text(out: &ExecOutput) -> String {
    String::from_utf8_lossy(&out.output).into_owned()
}

#[tokio::test]
async fn the_shell_reads_writes_and_diffs() {
    let rt = Arc::new(FakeRuntime::new());
    rt.add_image("task", [("/testbed/a.py", "a\n"), ("/testbed/b.py", "b\n")]);
    let c = Container::start(rt.clone(), &spec("task")).await.unwrap();
    let out = c.exec(&run("cat a.py; echo new > c.py; echo more >> c.py; cat c.py")).await.unwrap();
    assert_eq!(text(&out), "a\nnew\nmore\n");
    assert_eq!(out.exit_code, Some(0));
    let out = c.exec(&run("printf x\\ny > a.py; rm b.py; ls; cat missing")).await.unwrap();
    assert_eq!(text(&out), "a.py\nc.py\ncat: missing: No such file or directory\n");
    assert_eq!(out.exit_code, Some(1));
    let status = text(&c.exec(&run("git --no-optional-locks status --porcelain")).await.unwrap());
    assert_eq!(status, " M a.py\n D b.py\n?? c.py\n");
    let diff = text(&c.exec(&run("git diff")).await.unwrap());
    assert!(diff.contains("diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n-a\n+x\n+y\n"), "{diff}");
    assert!(!diff.contains("c.py"));
    let changes = c.diff().await.unwrap();
    let listed: Vec<(&str, ChangeKind)> = changes.iter().map(|c| (c.path.as_str(), c.kind)).collect();
    assert_eq!(
        listed,
        vec![
            ("/testbed", ChangeKind::Modified),
            ("/testbed/a.py", ChangeKind::Modified),
            ("/testbed/b.py", ChangeKind::Deleted),
            ("/testbed/c.py", ChangeKind::Added),
        ]
    );
    assert_eq!(text(&c.exec(&run("nope")).await.unwrap()), "bash: nope: command not found\n");
    assert_eq!(
        c.exec(&run("exit 3; echo never")).await.unwrap(),
        ExecOutput { output: vec![], exit_code: Some(3), timed_out: false }
    );
    c.remove().await.unwrap();
    assert!(rt.running().is_empty());
    assert_eq!(rt.count(Op::Exec), 6);
    assert_eq!(rt.commands()[0], "cat a.py; echo new > c.py; echo more >> c.py; cat c.py");
}

#[tokio::test]
async fn timeouts_keep_partial_output() {
    let rt = Arc::new(FakeRuntime::new());
    rt.add_image("task", [("/testbed/a", "")]);
    let c = Container::start(rt.clone(), &spec("task")).await.unwrap();
    let out = c.exec(&run("echo start; sleep 5; sleep 6; echo never")).await.unwrap();
    assert_eq!(out, ExecOutput { output: b"start\n".to_vec(), exit_code: None, timed_out: true });
    let out = c.exec(&run("sleep 9; echo done")).await.unwrap();
    assert_eq!(text(&out), "done\n");
    c.remove().await.unwrap();
}

#[tokio::test]
async fn commits_images_and_lists_them_by_label() {
    let rt = Arc::new(FakeRuntime::new());
    rt.add_image("task", [("/testbed/a", "1234")]);
    let c = Container::start(rt.clone(), &spec("task")).await.unwrap();
    c.exec(&run("echo hello > /testbed/b")).await.unwrap();
    let labels = BTreeMap::from([("vcurve.managed".to_owned(), "1".to_owned())]);
    c.commit("snap:1", &labels).await.unwrap();
    let image = rt.image("snap:1").unwrap();
    assert_eq!(image.size_bytes, 6);
    assert_eq!(image.parent.as_deref(), Some("task"));
    rt.set_commit_size(Some(1000));
    c.commit("snap:2", &labels).await.unwrap();
    let listed = rt.images(&labels).await.unwrap();
    assert_eq!(
        listed.iter().map(|i| (i.reference.as_str(), i.size_bytes)).collect::<Vec<_>>(),
        vec![("snap:1", 6), ("snap:2", 1000)]
    );
    // A container from a snapshot diffs against the snapshot; git compares with the task image.
    let d = Container::start(rt.clone(), &spec("snap:1")).await.unwrap();
    assert!(d.diff().await.unwrap().is_empty());
    assert_eq!(text(&d.exec(&run("git status")).await.unwrap()), "?? b\n");
    // An image a container runs from is not removed.
    assert!(rt.remove_image("snap:1").await.is_err());
    d.remove().await.unwrap();
    rt.remove_image("snap:1").await.unwrap();
    rt.remove_image("snap:1").await.unwrap();
    assert!(!rt.image_exists("snap:1").await.unwrap());
    c.remove().await.unwrap();
    assert!(matches!(rt.create(&spec("nothing")).await, Err(RuntimeError::NoImage(_))));
}

#[tokio::test]
async fn failures_can_be_injected_and_calls_are_logged() {
    let rt = Arc::new(FakeRuntime::with_handler(|fs, req| {
        fs.write("/seen", req.argv.join(" "));
        ExecOutput { output: b"handled".to_vec(), exit_code: Some(0), timed_out: false }
    }));
    rt.add_image("task", Vec::<(String, Vec<u8>)>::new());
    let c = Container::start(rt.clone(), &spec("task")).await.unwrap();
    rt.fail_next(Op::Exec, RuntimeError::Gone(c.id().to_owned()));
    assert!(matches!(c.exec(&run("x")).await, Err(RuntimeError::Gone(_))));
    assert_eq!(c.exec(&run("x")).await.unwrap().output, b"handled");
    assert_eq!(rt.container(c.id()).unwrap().fs.read_string("/seen").unwrap(), "bash -c x");
    let id = c.id().to_owned();
    drop(c); // the guard removes it in the background
    tokio::task::yield_now().await;
    tokio::task::yield_now().await;
    assert!(rt.container(&id).is_none());
    assert_eq!(rt.calls().last(), Some(&Call::Remove { container: id }));
}

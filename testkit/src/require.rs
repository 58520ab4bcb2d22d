//! The gate for tests that need a service.
//!
//! A test that needs something beyond SQLite and loopback (a PostgreSQL server, the Docker
//! Engine, the test images, a headless browser, Debian's registry, a Python environment) names it
//! in its first line:
//!
//! ```ignore
//! use vcurve_testkit::require::Service;
//!
//! #[tokio::test]
//! async fn a_store_test() {
//!     let url = vcurve_testkit::require!(Service::Postgres);
//!     let [image, python] = vcurve_testkit::require!(Service::Docker, Service::TaskImage, Service::Swebench)
//!     …
//! }
//! ```
//!
//! When every service is there, `require!` gives each one's value (a URL, an image tag, a path;
//! one `String`, or an array of them for several services). When one is missing, the test prints
//! one line saying what to start (`skipped: needs PostgreSQL — set VCURVE_TEST_POSTGRES=… or run
//! scripts/test`) and returns: it passes, as a skip. With `VCURVE_TEST_REQUIRE=all` (CI and
//! `scripts/test` set it) a missing service fails the test instead, with the same line.
//! `VCURVE_TEST_REQUIRE` may also name services, comma-separated (`postgres,chromium`): those
//! fail when missing, the others skip. `VCURVE_TEST_SKIP` (`all`, or names) makes services absent
//! whatever the machine has: `scripts/test quick` sets `VCURVE_TEST_SKIP=all`, so it runs what
//! needs at most SQLite and loopback even on a machine with PostgreSQL and Docker.
//!
//! `VCURVE_TEST_SKIPPED` names a file the gate appends one line to for every skip: the test's
//! binary and name, tab-separated (`store\tadmission::admits_a_study`). `scripts/test` runs the
//! tests that need nothing first, with every service left out, and then runs exactly the tests
//! this file names again, tier by tier, as it starts their services: no list of which test needs
//! what is kept anywhere but in the tests' own `require!` lines.
//!
//! Detection is cheap and local: environment variables, a file's existence, a program on `PATH`.
//! It does not connect to anything (a server that is named but down fails its test, as before).

use std::path::{Path, PathBuf};

/// The environment variable that turns skips into failures: `all`, or a comma-separated list of
/// [`Service::key`]s.
pub const REQUIRE_ENV: &str = "VCURVE_TEST_REQUIRE";

/// The environment variable that makes services absent: `all`, or a comma-separated list of
/// [`Service::key`]s. It wins over [`REQUIRE_ENV`].
pub const SKIP_ENV: &str = "VCURVE_TEST_SKIP";

/// The environment variable naming the file every skip is recorded in (see the module's guide).
pub const SKIPPED_ENV: &str = "VCURVE_TEST_SKIPPED";

/// Something a test needs beyond SQLite and loopback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// A PostgreSQL server whose user may create databases: `VCURVE_TEST_POSTGRES` (its URL).
    Postgres,
    /// The Docker Engine on its local socket (`DOCKER_HOST=unix://…` or `/var/run/docker.sock`)
    /// and the `docker` CLI. Its value is the socket's path.
    Docker,
    /// Docker Compose: `docker-compose`, or the `docker compose` plugin. Its value is the program.
    Compose,
    /// A headless browser: `chromium`, `chromium-browser` or `google-chrome` on `PATH`.
    Chromium,
    /// Debian's registry, `/usr/bin/docker-registry`.
    Registry,
    /// The base image `deploy/images/build` makes: `VCURVE_TEST_BASE_IMAGE` (its tag).
    BaseImage,
    /// The test task's image `deploy/images/build` makes: `VCURVE_TEST_TASK_IMAGE` (its tag).
    TaskImage,
    /// The service images `deploy/images/build-services` makes:
    /// `VCURVE_TEST_{COORDINATOR,WORKER,POSTGRES,REGISTRY}_IMAGE`. Its value is the coordinator's.
    ServiceImages,
    /// The mini-swe-agent environment `scripts/mini-swe-agent-venv` makes: `VCURVE_MSA_PYTHON`.
    MiniSweAgent,
    /// The SWE-bench harness environment `scripts/swebench-venv` makes: `VCURVE_SWEBENCH_PYTHON`,
    /// else `.venv/swebench/bin/python` in the repository when it exists.
    Swebench,
}

impl Service {
    /// Every service, in the order `scripts/test` provides them.
    pub const ALL: [Service; 10] = [
        Service::Postgres,
        Service::Chromium,
        Service::Registry,
        Service::Docker,
        Service::Compose,
        Service::BaseImage,
        Service::TaskImage,
        Service::ServiceImages,
        Service::MiniSweAgent,
        Service::Swebench,
    ];

    /// Its name in `VCURVE_TEST_REQUIRE`.
    pub fn key(self) -> &'static str {
        match self {
            Service::Postgres => "postgres",
            Service::Docker => "docker",
            Service::Compose => "compose",
            Service::Chromium => "chromium",
            Service::Registry => "registry",
            Service::BaseImage => "base-image",
            Service::TaskImage => "task-image",
            Service::ServiceImages => "service-images",
            Service::MiniSweAgent => "mini-swe-agent",
            Service::Swebench => "swebench",
        }
    }

    /// What it is, for the skip line.
    pub fn name(self) -> &'static str {
        match self {
            Service::Postgres => "PostgreSQL",
            Service::Docker => "Docker",
            Service::Compose => "Docker Compose",
            Service::Chromium => "a headless chromium",
            Service::Registry => "Debian's docker-registry",
            Service::BaseImage => "the base image",
            Service::TaskImage => "the test task image",
            Service::ServiceImages => "the service images",
            Service::MiniSweAgent => "the mini-swe-agent venv",
            Service::Swebench => "the swebench venv",
        }
    }

    /// What to do to have it (besides running `scripts/test`, which provides them all).
    pub fn hint(self) -> &'static str {
        match self {
            Service::Postgres => "set VCURVE_TEST_POSTGRES=postgres://USER:PASSWORD@HOST:PORT/postgres",
            Service::Docker => "start dockerd (the docker CLI and /var/run/docker.sock)",
            Service::Compose => "apt-get install docker-compose",
            Service::Chromium => "apt-get install chromium",
            Service::Registry => "apt-get install docker-registry",
            Service::BaseImage => "set VCURVE_TEST_BASE_IMAGE to the base=TAG deploy/images/build prints",
            Service::TaskImage => "set VCURVE_TEST_TASK_IMAGE to the task=TAG deploy/images/build prints",
            Service::ServiceImages => {
                "set VCURVE_TEST_{COORDINATOR,WORKER,POSTGRES,REGISTRY}_IMAGE from deploy/images/build-services"
            }
            Service::MiniSweAgent => "set VCURVE_MSA_PYTHON to what scripts/mini-swe-agent-venv prints",
            Service::Swebench => "set VCURVE_SWEBENCH_PYTHON to what scripts/swebench-venv prints",
        }
    }
}

/// What detection looks at: the environment and the file system (a trait so the unit tests can
/// give it a made-up machine).
pub trait Machine {
    fn var(&self, name: &str) -> Option<String>;
    fn is_file(&self, path: &Path) -> bool;
}

/// This machine: the process's environment and its file system.
pub struct Local;

impl Machine for Local {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn is_file(&self, path: &Path) -> bool {
        // A socket or an executable: anything that exists and is not a directory.
        path.metadata().is_ok_and(|m| !m.is_dir())
    }
}

fn nonempty(machine: &dyn Machine, name: &str) -> Option<String> {
    machine.var(name).filter(|s| !s.trim().is_empty())
}

fn on_path(machine: &dyn Machine, program: &str) -> Option<PathBuf> {
    let path = machine.var("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| machine.is_file(p))
}

/// The repository's root (this crate is `testkit/` in it).
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// The service's value when `machine` has it: a URL, a tag, a path.
pub fn detect(service: Service, machine: &dyn Machine) -> Option<String> {
    let path = |p: PathBuf| p.display().to_string();
    match service {
        Service::Postgres => nonempty(machine, "VCURVE_TEST_POSTGRES"),
        Service::Docker => {
            let socket = match nonempty(machine, "DOCKER_HOST") {
                Some(host) => PathBuf::from(host.strip_prefix("unix://")?),
                None => PathBuf::from("/var/run/docker.sock"),
            };
            (machine.is_file(&socket) && on_path(machine, "docker").is_some()).then(|| path(socket))
        }
        Service::Compose => on_path(machine, "docker-compose").map(path).or_else(|| {
            ["/usr/libexec/docker/cli-plugins/docker-compose", "/usr/lib/docker/cli-plugins/docker-compose"]
                .into_iter()
                .map(PathBuf::from)
                .find(|p| machine.is_file(p))
                .map(|_| "docker compose".to_string())
        }),
        Service::Chromium => ["chromium", "chromium-browser", "google-chrome"]
            .into_iter()
            .find_map(|program| on_path(machine, program))
            .map(path),
        Service::Registry => {
            let bin = PathBuf::from("/usr/bin/docker-registry");
            machine.is_file(&bin).then(|| path(bin))
        }
        Service::BaseImage => nonempty(machine, "VCURVE_TEST_BASE_IMAGE"),
        Service::TaskImage => nonempty(machine, "VCURVE_TEST_TASK_IMAGE"),
        Service::ServiceImages => {
            let images: Option<Vec<String>> = ["COORDINATOR", "WORKER", "POSTGRES", "REGISTRY"]
                .into_iter()
                .map(|what| nonempty(machine, &format!("VCURVE_TEST_{what}_IMAGE")))
                .collect();
            images.map(|mut images| images.swap_remove(0))
        }
        Service::MiniSweAgent => nonempty(machine, "VCURVE_MSA_PYTHON"),
        Service::Swebench => nonempty(machine, "VCURVE_SWEBENCH_PYTHON").or_else(|| {
            let default = repository().join(".venv/swebench/bin/python");
            machine.is_file(&default).then(|| path(default))
        }),
    }
}

fn names(service: Service, machine: &dyn Machine, var: &str) -> bool {
    let Some(spec) = machine.var(var) else { return false };
    spec.split(',').map(str::trim).any(|word| word == "all" || word == service.key())
}

/// Whether `VCURVE_TEST_REQUIRE` makes a missing `service` a failure (not when
/// `VCURVE_TEST_SKIP` leaves it out).
pub fn required(service: Service, machine: &dyn Machine) -> bool {
    names(service, machine, REQUIRE_ENV) && !left_out(service, machine)
}

/// Whether `VCURVE_TEST_SKIP` leaves `service` out.
pub fn left_out(service: Service, machine: &dyn Machine) -> bool {
    names(service, machine, SKIP_ENV)
}

/// The one line a test prints (or panics with) when `missing` are absent.
pub fn message(missing: &[Service]) -> String {
    let needs: Vec<String> = missing.iter().map(|s| format!("{} ({})", s.name(), s.hint())).collect();
    format!("needs {} — or run scripts/test", needs.join(", "))
}

/// What the gate decides for `services` on `machine`.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Every service is there: their values, in order.
    Run(Vec<String>),
    /// Some are missing, none required: the skip line.
    Skip(String),
    /// A missing one is required: the failure's message.
    Fail(String),
}

/// The gate's decision for `services` on `machine`.
pub fn decide(services: &[Service], machine: &dyn Machine) -> Decision {
    let mut values = Vec::new();
    let mut missing = Vec::new();
    for &service in services {
        match detect(service, machine).filter(|_| !left_out(service, machine)) {
            Some(value) => values.push(value),
            None => missing.push(service),
        }
    }
    if missing.is_empty() {
        Decision::Run(values)
    } else if missing.iter().any(|&s| required(s, machine)) {
        Decision::Fail(format!("{} ({REQUIRE_ENV} requires it)", message(&missing)))
    } else if missing.iter().any(|&s| left_out(s, machine)) {
        Decision::Skip(format!("{} ({SKIP_ENV} leaves it out)", message(&missing)))
    } else {
        Decision::Skip(message(&missing))
    }
}

/// The gate on this machine: the services' values, or `None` after printing the skip line (the
/// caller returns). Panics when a missing service is required.
pub fn gate(services: &[Service]) -> Option<Vec<String>> {
    match decide(services, &Local) {
        Decision::Run(values) => Some(values),
        Decision::Skip(line) => {
            // stderr: cargo test and nextest show it with the test's name; stdout is captured.
            eprintln!("skipped: {line}");
            if let Some(file) = std::env::var_os(SKIPPED_ENV) {
                record_skip(Path::new(&file));
            }
            None
        }
        Decision::Fail(message) => panic!("{message}"),
    }
}

/// This test's line in the skip file: its binary (the executable's name without cargo's hash, as
/// nextest's `binary(…)` names it) and its name (libtest runs each test on a thread named after
/// it; a gate reached from another thread records `*`, every test of the binary).
pub fn skip_line() -> String {
    let binary = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|stem| match stem.rsplit_once('-') {
            Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => name.to_string(),
            _ => stem,
        })
        .unwrap_or_default();
    let thread = std::thread::current();
    let test = match thread.name() {
        Some(name) if name != "main" && !name.starts_with("tokio-runtime") => name,
        _ => "*",
    };
    format!("{binary}\t{test}\n")
}

fn record_skip(file: &Path) {
    use std::io::Write;
    // One write of one short line with O_APPEND: lines from concurrent test processes do not mix.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .and_then(|mut f| f.write_all(skip_line().as_bytes()));
    if let Err(e) = written {
        panic!("cannot record the skip in {} ({SKIPPED_ENV}): {e}", file.display());
    }
}

/// The value of one service, or `None` after the skip line: for a test that runs a part only when
/// the service is there (the PostgreSQL half of a test that runs on SQLite too).
pub fn optional(service: Service) -> Option<String> {
    gate(&[service]).map(|mut values| values.remove(0))
}

/// The first line of a test that needs services: their values, or a return from the test after
/// one `skipped: needs …` line (a panic under `VCURVE_TEST_REQUIRE=all`). One service gives a
/// `String`; several give a `[String; N]`.
#[macro_export]
macro_rules! require {
    ($service:expr $(,)?) => {
        match $crate::require::gate(&[$service]) {
            ::core::option::Option::Some(mut values) => values.remove(0),
            ::core::option::Option::None => return,
        }
    };
    ($($service:expr),+ $(,)?) => {
        match $crate::require::gate(&[$($service),+]) {
            ::core::option::Option::Some(values) => {
                let mut values = values.into_iter();
                [$({ let _ = $service; values.next().unwrap() }),+]
            }
            ::core::option::Option::None => return,
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[derive(Default)]
    struct Fake {
        vars: BTreeMap<&'static str, &'static str>,
        files: BTreeSet<&'static str>,
    }

    impl Machine for Fake {
        fn var(&self, name: &str) -> Option<String> {
            self.vars.get(name).map(|s| s.to_string())
        }

        fn is_file(&self, path: &Path) -> bool {
            path.to_str().is_some_and(|p| self.files.contains(p))
        }
    }

    fn fake(vars: &[(&'static str, &'static str)], files: &[&'static str]) -> Fake {
        Fake { vars: vars.iter().copied().collect(), files: files.iter().copied().collect() }
    }

    #[test]
    fn a_present_service_runs_with_its_value() {
        let m = fake(&[("VCURVE_TEST_POSTGRES", "postgres://u:p@h:5432/postgres")], &[]);
        assert_eq!(decide(&[Service::Postgres], &m), Decision::Run(vec!["postgres://u:p@h:5432/postgres".into()]));
    }

    #[test]
    fn a_missing_service_skips_with_one_line_naming_what_to_start() {
        let m = fake(&[("VCURVE_TEST_POSTGRES", "  ")], &[]);
        let Decision::Skip(line) = decide(&[Service::Postgres], &m) else { panic!("not a skip") };
        assert!(!line.contains('\n'), "{line}");
        assert!(line.starts_with("needs PostgreSQL (set VCURVE_TEST_POSTGRES=postgres://"), "{line}");
        assert!(line.ends_with("or run scripts/test"), "{line}");
    }

    #[test]
    fn require_all_turns_a_skip_into_a_failure() {
        let m = fake(&[("VCURVE_TEST_REQUIRE", "all")], &[]);
        let Decision::Fail(message) = decide(&[Service::Chromium], &m) else { panic!("not a failure") };
        assert!(message.contains("needs a headless chromium") && message.contains(REQUIRE_ENV), "{message}");
    }

    #[test]
    fn require_may_name_services() {
        let m = fake(&[("VCURVE_TEST_REQUIRE", "docker, postgres")], &[]);
        assert!(matches!(decide(&[Service::Postgres], &m), Decision::Fail(_)));
        assert!(matches!(decide(&[Service::Chromium], &m), Decision::Skip(_)));
    }

    #[test]
    fn skip_leaves_a_present_service_out_even_when_required() {
        let m = fake(
            &[("VCURVE_TEST_POSTGRES", "postgres://h/p"), ("VCURVE_TEST_SKIP", "all"), ("VCURVE_TEST_REQUIRE", "all")],
            &[],
        );
        let Decision::Skip(line) = decide(&[Service::Postgres], &m) else { panic!("not a skip") };
        assert!(line.ends_with("(VCURVE_TEST_SKIP leaves it out)"), "{line}");
        let some = fake(&[("VCURVE_TEST_POSTGRES", "postgres://h/p"), ("VCURVE_TEST_SKIP", "docker")], &[]);
        assert!(matches!(decide(&[Service::Postgres], &some), Decision::Run(_)));
    }

    #[test]
    fn several_services_give_their_values_in_order_or_one_line_for_all_missing() {
        let m = fake(
            &[("PATH", "/bin:/usr/bin"), ("VCURVE_TEST_TASK_IMAGE", "task:1")],
            &["/usr/bin/docker", "/var/run/docker.sock"],
        );
        assert_eq!(
            decide(&[Service::Docker, Service::TaskImage], &m),
            Decision::Run(vec!["/var/run/docker.sock".into(), "task:1".into()])
        );
        let Decision::Skip(line) = decide(&[Service::Docker, Service::BaseImage, Service::MiniSweAgent], &m) else {
            panic!("not a skip")
        };
        assert!(line.starts_with("needs the base image (") && line.contains("the mini-swe-agent venv"), "{line}");
        assert!(!line.contains("Docker ("), "Docker is there: {line}");
    }

    #[test]
    fn docker_needs_its_socket_and_cli_and_follows_docker_host() {
        let cli = &["/usr/bin/docker"][..];
        let path = ("PATH", "/usr/bin");
        assert_eq!(detect(Service::Docker, &fake(&[path], cli)), None);
        assert_eq!(detect(Service::Docker, &fake(&[], &["/usr/bin/docker", "/var/run/docker.sock"])), None);
        let m = fake(
            &[path, ("DOCKER_HOST", "unix:///run/user/1/docker.sock")],
            &["/usr/bin/docker", "/run/user/1/docker.sock"],
        );
        assert_eq!(detect(Service::Docker, &m).as_deref(), Some("/run/user/1/docker.sock"));
        let tcp = fake(&[path, ("DOCKER_HOST", "tcp://10.0.0.1:2375")], &["/usr/bin/docker", "/var/run/docker.sock"]);
        assert_eq!(detect(Service::Docker, &tcp), None, "only the local socket counts");
    }

    #[test]
    fn chromium_is_found_on_path_under_any_of_its_names() {
        let m = fake(&[("PATH", "/opt/bin:/usr/bin")], &["/usr/bin/chromium-browser"]);
        assert_eq!(detect(Service::Chromium, &m).as_deref(), Some("/usr/bin/chromium-browser"));
        assert_eq!(detect(Service::Chromium, &fake(&[], &["/usr/bin/chromium"])), None);
    }

    #[test]
    fn the_service_images_need_all_four_variables() {
        let mut vars = vec![
            ("VCURVE_TEST_COORDINATOR_IMAGE", "c:1"),
            ("VCURVE_TEST_WORKER_IMAGE", "w:1"),
            ("VCURVE_TEST_POSTGRES_IMAGE", "p:1"),
        ];
        assert_eq!(detect(Service::ServiceImages, &fake(&vars, &[])), None);
        vars.push(("VCURVE_TEST_REGISTRY_IMAGE", "r:1"));
        assert_eq!(detect(Service::ServiceImages, &fake(&vars, &[])).as_deref(), Some("c:1"));
    }

    #[test]
    fn the_registry_is_debians_binary() {
        assert_eq!(detect(Service::Registry, &fake(&[], &[])), None);
        let m = fake(&[], &["/usr/bin/docker-registry"]);
        assert_eq!(detect(Service::Registry, &m).as_deref(), Some("/usr/bin/docker-registry"));
    }

    #[test]
    fn every_service_has_a_distinct_key_and_a_hint() {
        let keys: BTreeSet<&str> = Service::ALL.iter().map(|s| s.key()).collect();
        assert_eq!(keys.len(), Service::ALL.len());
        assert!(Service::ALL.iter().all(|s| !s.hint().is_empty() && !s.hint().contains('\n')));
    }

    #[test]
    fn a_skip_line_names_this_binary_and_this_test() {
        let line = skip_line();
        let (binary, test) = line.trim_end().split_once('\t').expect("binary and test");
        assert_eq!(binary, "vcurve_testkit");
        assert_eq!(test, "require::tests::a_skip_line_names_this_binary_and_this_test");
        let other = std::thread::spawn(skip_line).join().unwrap();
        assert_eq!(other, "vcurve_testkit\t*\n", "a thread without the test's name means every test");
    }

    // The macro itself, on this machine: a service no machine has (an empty PATH entry list for
    // chromium cannot be arranged without touching the process's environment, so this checks the
    // shape of what `require!` gives when it runs, with a service the test makes present).
    #[test]
    fn the_macro_returns_from_the_test_or_gives_the_values() {
        fn gated(ran: &mut bool) {
            let _ = crate::require!(Service::Registry, Service::Chromium);
            *ran = true;
        }
        let mut ran = false;
        if std::env::var_os(REQUIRE_ENV).is_none() {
            gated(&mut ran);
            let present = detect(Service::Registry, &Local).is_some() && detect(Service::Chromium, &Local).is_some();
            assert_eq!(ran, present);
        }
    }
}

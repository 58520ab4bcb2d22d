use std::path::Path;

use proptest::prelude::*;

use super::*;

/// A FIFO at `path` (nothing ever writes to it: opening it for reading would block forever).
fn fifo(path: &Path) {
    let status = std::process::Command::new("mkfifo").arg(path).status().expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

type Reader = fn(&Path) -> Result<(), InputError>;

/// Every reader of users' files, with the limit it states.
const READERS: &[(&str, Reader, u64)] = &[
    ("points", |p| read_points(p, 20).map(drop), MAX_CSV_BYTES),
    ("base runs", |p| read_base_runs(p).map(drop), MAX_CSV_BYTES),
    ("labels", |p| read_labels(p, LabelSteps::OneBased).map(drop), MAX_CSV_BYTES),
    ("trajectories", |p| read_trajectories(p).map(drop), MAX_CSV_BYTES),
    ("curves", |p| read_curves(p).map(drop), MAX_CSV_BYTES),
    ("thresholds", |p| read_thresholds(Some(p)).map(drop), MAX_THRESHOLDS_BYTES),
    ("a token or certificate", |p| read_small_file(p).map(drop), MAX_SMALL_FILE_BYTES),
    ("an export's JSON", |p| read_export_json(p).map(drop), MAX_EXPORT_JSON_BYTES),
];

#[track_caller]
fn assert_mentions(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{message:?} does not mention {part:?}");
    }
}

#[test]
fn every_reader_refuses_what_is_not_a_regular_file_before_opening_it() {
    let dir = tempfile::tempdir().unwrap();
    let pipe = dir.path().join("input.fifo");
    fifo(&pipe);
    let cases =
        [(Path::new("/dev/zero"), "a character device"), (pipe.as_path(), "a FIFO"), (dir.path(), "a directory")];
    for (what, read, _) in READERS {
        for (path, found) in cases {
            let err = read(path).unwrap_err().to_string();
            assert_mentions(&err, &[&path.display().to_string(), found, "not a regular file"]);
            assert!(err.starts_with(&format!("{}: cannot read: ", path.display())), "{what}: {err}");
        }
    }
}

#[test]
fn every_reader_refuses_a_file_over_its_limit_before_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    for (what, read, limit) in READERS {
        let path = dir.path().join("huge");
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(limit + 1).unwrap(); // sparse: nothing is written
        let err = read(&path).unwrap_err().to_string();
        let expected =
            format!("it is {} bytes, over the limit of {limit} bytes ({})", limit + 1, bounds::show_bytes(*limit));
        assert_mentions(&err, &[&path.display().to_string(), &expected]);
        assert!(!err.is_empty(), "{what}");
    }
}

#[test]
fn a_missing_file_is_named_with_the_cause() {
    for (_, read, _) in READERS {
        let err = read(Path::new("/nonexistent/x.csv")).unwrap_err().to_string();
        assert_mentions(&err, &["/nonexistent/x.csv: cannot read: No such file"]);
    }
}

#[test]
fn a_deeply_nested_thresholds_file_is_refused_before_it_is_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("thresholds.yaml");
    for text in ["[".repeat(100_000), "{a: ".repeat(100_000), format!("{}x", "- ".repeat(100_000))] {
        std::fs::write(&path, text).unwrap();
        let err = read_thresholds(Some(&path)).unwrap_err().to_string();
        assert_mentions(&err, &["thresholds.yaml", "100000 levels deep", "over the limit of 64 levels"]);
    }
    std::fs::write(&path, "epsilon: 0.2\n").unwrap();
    assert_eq!(read_thresholds(Some(&path)).unwrap().epsilon, 0.2);
}

// ---------------------------------------------------------------------------------------------
// Properties: whatever a table holds, its reader returns (no panic, no hang); an error names the
// file, and what it accepts is valid.

/// A column of a table, the values drawn for it, and whether the reader requires it.
type Column = (&'static str, &'static [&'static str], bool);

const POINTS: &[Column] = &[
    ("t", &["0", "1", "2", "3", "5", "19", "20", "-1", "a", "", "4294967296"], true),
    ("n", &["0", "1", "8", "16", "-3", "", "1.5"], true),
    ("successes", &["0", "1", "4", "8", "17", "", "x"], true),
];
const BASE_RUNS: &[Column] = &[
    ("success", &["0", "1", "true", "FALSE", "yes", ""], true),
    ("steps", &["0", "40", "100", "-1", "x", "", "4294967296"], true),
];
const LABELS: &[Column] = &[
    ("trajectory", &["a", "b", ""], true),
    ("source", &["J", "K", ""], true),
    ("step", &["1", "3", "none", "NONE", "0", "-2", "x", "", "99999999999"], true),
    ("task", &["t1", "t2", ""], false),
];
const TRAJECTORIES: &[Column] = &[
    ("trajectory", &["a", "b", "c", ""], true),
    ("length", &["20", "1", "0", "x", "30"], true),
    ("shape", &["cliff", "erosion", "flat", "doomed", "", "Cliff", "bump"], true),
    ("t_star", &["11", "", "3", "1"], true),
    ("decisive_a", &["10", "", "2", "0", "none"], true),
    ("decisive_b", &["11", "12", "", "25", "3"], true),
    ("pnr", &["11", "20", "", "21", "1"], true),
    ("task", &["t1", "t2", ""], false),
    ("stratum", &["s", ""], false),
    ("first_edit", &["3", "", "none", "99"], false),
    ("first_symptom", &["4", "", "none", "-1"], false),
    ("concentration", &["0.5", "", "2", "x"], false),
    ("onset", &["5", "", "40"], false),
    ("pnr_certified", &["true", "false", "1", "0", "TRUE", "", "maybe"], false),
    ("restart_point", &["2", "", "50"], false),
    ("continuations", &["100", "", "-1"], false),
    ("state", &["done", "doomed", "waiting", ""], false),
];
const CURVES: &[Column] = &[
    ("trajectory", &["a", "b", ""], true),
    ("series", &["main", "retest", "budget_control", "x", ""], true),
    ("t", &["0", "1", "5", "-1", ""], true),
    ("n", &["0", "1", "8", ""], true),
    ("successes", &["0", "1", "9", ""], true),
    ("v_fit", &["0", "0.5", "1", "1.5", "NaN", "", "-0"], true),
    ("v_hat", &["0.5", ""], false),
];

/// Pieces of CSV, to write into tables.
const CSV_PIECES: &[&str] = &[",", "\n", "\r\n", "\r", "\"", "\"\"", "0", "1", "-", " ", "é", "\u{feff}", ",,", "\0"];

/// Choices drawn from a seed.
struct Draw(u64);

impl Draw {
    fn pick(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// A table of `columns` drawn from `seed`: mostly the columns asked for, in any order, now and then
/// one missing or one more, rows of drawn values, now and then one short.
fn table(columns: &[Column], seed: u64) -> String {
    let mut draw = Draw(seed | 1);
    let mut header: Vec<&Column> = columns
        .iter()
        .filter(|(_, _, required)| if *required { draw.pick(16) > 0 } else { draw.pick(2) == 0 })
        .collect();
    for i in (1..header.len()).rev() {
        header.swap(i, draw.pick(i + 1));
    }
    const EXTRA: Column = ("extra", &["z", ""], false);
    if draw.pick(8) == 0 {
        header.push(&EXTRA);
    }
    let mut lines = vec![header.iter().map(|(name, _, _)| *name).collect::<Vec<_>>().join(",")];
    for _ in 0..draw.pick(9) {
        let mut fields: Vec<&str> = header.iter().map(|(_, values, _)| values[draw.pick(values.len())]).collect();
        if draw.pick(16) == 0 {
            fields.pop();
        }
        lines.push(fields.join(","));
    }
    lines.join(if draw.pick(4) == 0 { "\r\n" } else { "\n" })
}

/// A table's text: drawn from `seed`, then with `edits` (at a position, remove some characters and
/// put a piece in).
fn edited(columns: &[Column], seed: u64, edits: &[(prop::sample::Index, usize, &str)]) -> Vec<u8> {
    let mut chars: Vec<char> = table(columns, seed).chars().collect();
    for (at, remove, piece) in edits {
        let at = at.index(chars.len() + 1);
        let end = (at + remove).min(chars.len());
        chars.splice(at..end, piece.chars());
    }
    chars.into_iter().collect::<String>().into_bytes()
}

fn edits() -> impl Strategy<Value = Vec<(prop::sample::Index, usize, &'static str)>> {
    prop::collection::vec((any::<prop::sample::Index>(), 0usize..3, prop::sample::select(CSV_PIECES)), 0..3)
}

/// An error names the file it is about.
fn check_error(path: &Path, err: &InputError) -> Result<(), TestCaseError> {
    let message = err.to_string();
    prop_assert!(message.starts_with(&path.display().to_string()), "{}", message);
    Ok(())
}

const CASES: u32 = 3_000;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn any_points_file_is_read_or_refused(seed in any::<u64>(), edits in edits(), length in 1u32..25) {
        let path = Path::new("points.csv");
        match points_from(path, edited(POINTS, seed, &edits), length) {
            Ok(points) => {
                prop_assert!(!points.is_empty());
                let mut seen = HashSet::new();
                for point in &points {
                    prop_assert!(point.validate(length).is_ok(), "{:?}", point);
                    prop_assert!(seen.insert(point.t), "t = {} twice", point.t);
                }
            }
            Err(e) => check_error(path, &e)?,
        }
    }

    #[test]
    fn any_base_runs_file_is_read_or_refused(seed in any::<u64>(), edits in edits()) {
        let path = Path::new("base.csv");
        match base_runs_from(path, edited(BASE_RUNS, seed, &edits)) {
            Ok(runs) => prop_assert!(!runs.0.is_empty()),
            Err(e) => check_error(path, &e)?,
        }
    }

    #[test]
    fn any_labels_file_is_read_or_refused(seed in any::<u64>(), edits in edits()) {
        let path = Path::new("labels.csv");
        match labels_from(path, edited(LABELS, seed, &edits), LabelSteps::OneBased) {
            Ok(rows) => {
                prop_assert!(!rows.is_empty());
                let mut seen = HashSet::new();
                for row in &rows {
                    prop_assert!(row.label.step != Some(0));
                    prop_assert!(!row.label.trajectory.is_empty() && !row.label.source.is_empty());
                    prop_assert!(seen.insert((row.label.trajectory.clone(), row.label.source.clone())));
                }
            }
            Err(e) => check_error(path, &e)?,
        }
    }

    #[test]
    fn any_trajectories_file_is_read_or_refused(seed in any::<u64>(), edits in edits()) {
        let path = Path::new("trajectories.csv");
        match trajectories_from(path, edited(TRAJECTORIES, seed, &edits)) {
            Ok(rows) => {
                prop_assert!(!rows.is_empty());
                let mut seen = HashSet::new();
                for row in &rows {
                    let r = &row.record;
                    prop_assert!(seen.insert(r.trajectory.clone()), "{} twice", r.trajectory);
                    prop_assert!(r.length >= 1 && r.pnr <= r.length, "{:?}", r);
                    if let Some(i) = r.decisive_interval {
                        prop_assert!(i.a < i.b && i.b <= r.length, "{:?}", r);
                        prop_assert_eq!(r.t_star, Some(i.a + 1));
                    }
                }
            }
            Err(e) => check_error(path, &e)?,
        }
    }

    #[test]
    fn any_curves_file_is_read_or_refused(seed in any::<u64>(), edits in edits()) {
        let path = Path::new("curves.csv");
        match curves_from(path, edited(CURVES, seed, &edits)) {
            Ok(rows) => {
                prop_assert!(!rows.is_empty());
                for row in &rows {
                    prop_assert!(row.point.n >= 1 && row.point.successes <= row.point.n, "{:?}", row);
                    prop_assert!((0.0..=1.0).contains(&row.v_fit), "{:?}", row);
                }
            }
            Err(e) => check_error(path, &e)?,
        }
    }

    #[test]
    fn any_bytes_are_read_or_refused_by_every_table_reader(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let path = Path::new("x.csv");
        for result in [
            points_from(path, bytes.clone(), 20).map(drop),
            base_runs_from(path, bytes.clone()).map(drop),
            labels_from(path, bytes.clone(), LabelSteps::OneBased).map(drop),
            trajectories_from(path, bytes.clone()).map(drop),
            curves_from(path, bytes.clone()).map(drop),
        ] {
            if let Err(e) = result {
                check_error(path, &e)?;
            }
        }
    }

    #[test]
    fn any_thresholds_text_is_read_or_refused(
        pieces in prop::collection::vec(prop::sample::select(&[
            "epsilon: ", "k_screen: ", "k_confirm: ", "budget: ", "0.2", "8", "0", "-1", "1e9", "\n", "[", "]", "{", "}",
            ", ", ": ", "- ", "'", "\"", "#", "&a ", "*a", "!t ", "~", "x", " ", "|", ">",
        ][..]), 0..24),
    ) {
        let path = Path::new("thresholds.yaml");
        match thresholds_from(path, &pieces.concat()) {
            Ok(t) => prop_assert!(t.validate().is_ok()),
            Err(e) => check_error(path, &e)?,
        }
    }
}

#[test]
fn zero_based_labels_store_the_judges_index_plus_one_and_minus_one_as_no_mistake() {
    let path = Path::new("labels.csv");
    let text = b"trajectory,source,step\na,J,0\nb,J,-1\nc,J,12\nd,J,none\n".to_vec();
    let rows = labels_from(path, text.clone(), LabelSteps::ZeroBased).unwrap();
    let steps: Vec<Option<u32>> = rows.iter().map(|r| r.label.step).collect();
    assert_eq!(steps, [Some(1), None, Some(13), None]);
    // 1-based, the same file is refused at its 0 and its -1, naming the line.
    let e = labels_from(path, text, LabelSteps::OneBased).unwrap_err().to_string();
    assert!(e.contains("labels.csv") && e.contains("line 2") && e.contains("1-based"), "{e}");
    for (bad, part) in [("-2", "-2"), ("x", "0-based"), ("", "empty")] {
        let text = format!("trajectory,source,step\na,J,{bad}\n").into_bytes();
        let e = labels_from(path, text, LabelSteps::ZeroBased).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains(part), "{bad:?}: {e}");
    }
}

#[test]
fn booleans_read_as_true_false_or_1_0() {
    let path = Path::new("base_runs.csv");
    let runs = base_runs_from(path, b"success,steps\ntrue,10\n0,20\nTRUE,5\n1,7\nfalse,9\n".to_vec()).unwrap();
    assert_eq!(runs.0.iter().map(|r| r.success).collect::<Vec<_>>(), [true, false, true, true, false]);
    let e = base_runs_from(path, b"success,steps\nyes,10\n".to_vec()).unwrap_err().to_string();
    assert!(e.contains("`success` must be true, false, 1 or 0"), "{e}");
}

#[test]
fn a_trajectory_never_measured_is_refused_and_a_doomed_one_read() {
    let path = Path::new("trajectories.csv");
    let header = "trajectory,length,shape,concentration,t_star,decisive_a,decisive_b,onset,pnr,pnr_certified,restart_point,continuations,state";
    let measured = "a,30,cliff,0.8,11,10,11,11,20,true,9,200,done";
    let rows =
        trajectories_from(path, format!("{header}\n{measured}\nd,30,,,,,,,,,,40,doomed\n").into_bytes()).unwrap();
    assert_eq!(rows.len(), 2);
    for state in ["waiting", "replaying", "running", "done"] {
        let text = format!("{header}\n{measured}\nw,30,,,,,,,,,,0,{state}\n");
        let err = trajectories_from(path, text.into_bytes()).unwrap_err().to_string();
        assert_mentions(&err, &["line 3", "trajectory `w` has no curve: it was never measured", &format!("`{state}`")]);
    }
}

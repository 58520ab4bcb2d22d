use std::collections::BTreeMap;
use std::path::PathBuf;

use vcurve_method::analyses::FitValue;

use super::*;

// ---------------------------------------------------------------------------------------------
// The paper's notes, split into clauses

/// The paper's published tables and notes (see the README there).
fn paper_fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../method/tests/fixtures/paper").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The value after `key` in `text`, as far as it is a number.
fn number_after<'a>(text: &'a str, key: &str) -> Option<(&'a str, usize)> {
    let start = text.find(key)? + key.len();
    let len = text[start..].find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len() - start);
    Some((&text[start..start + len], start + len))
}

/// A note as extracted from the paper's text, in this module's notation: the extraction prints
/// each formula twice (`C=0.30C=0.30`, `V^(h0)=0.48 V(h_0)=0.48`, `T=88T=88`); the note writes
/// `C = 0.30`, `V̂(h_0) = 0.48`, `T = 88`.
fn normalized(paper: &str) -> String {
    let mut text = paper.to_owned();
    for (printed, twice, ours) in [("C=", "C=", "C = "), ("V^(h0)=", " V(h_0)=", "V̂(h_0) = "), ("T=", "T=", "T = ")] {
        let Some((value, end)) = number_after(&text, printed) else { continue };
        let start = text.find(printed).unwrap();
        let repeat = format!("{twice}{value}");
        assert!(text[end..].starts_with(&repeat), "{printed} is not printed twice in {paper}");
        text = format!("{}{ours}{value}{}", &text[..start], &text[end + repeat.len()..]);
    }
    text
}

/// A note's text split into its clauses: the inverse of [`Note::text`], used on the paper's
/// notes and on ours alike so that they compare clause by clause.
fn split(text: &str) -> BTreeMap<Clause, String> {
    let mut out = BTreeMap::new();
    let colon = text.find("): ").unwrap_or_else(|| panic!("no header in {text}"));
    out.insert(Clause::Header, text[..=colon].to_owned());
    let rest = &text[colon + 3..];
    let (body, labels) = match rest.find(". Labels: ") {
        Some(i) => (&rest[..i], Some(rest[i + 2..].strip_suffix('.').expect("a note ends with a full stop"))),
        None => (rest.strip_suffix('.').expect("a note ends with a full stop"), None),
    };
    if let Some(labels) = labels {
        let open = labels.rfind(" (").expect("a tally");
        out.insert(Clause::Labels, labels[..open].to_owned());
        out.insert(Clause::Tally, labels[open + 1..].to_owned());
    }
    for (i, piece) in body.split("; ").enumerate() {
        if i == 0 {
            let (decisive, value) = match piece.split_once(", with ") {
                Some((d, v)) => (d, Some(format!("with {v}"))),
                None => (piece, None),
            };
            match decisive.split_once(" comes ") {
                Some((d, e)) => {
                    out.insert(Clause::Decisive, d.to_owned());
                    out.insert(Clause::FirstEdit, format!("comes {e}"));
                }
                None => {
                    out.insert(Clause::Decisive, decisive.to_owned());
                }
            }
            if let Some(value) = value {
                out.insert(Clause::ValueBefore, value);
            }
            continue;
        }
        let clause = if piece.starts_with("the task is lost") {
            Clause::LastStep
        } else if piece.starts_with("point of no return") {
            Clause::PointOfNoReturn
        } else if piece.starts_with("the raw estimates") {
            Clause::Rise
        } else if piece.starts_with("first failure signal") || piece.starts_with("no explicit failure signal") {
            Clause::FirstSymptom
        } else {
            panic!("unknown clause {piece:?} in {text}")
        };
        out.insert(clause, piece.to_owned());
    }
    out
}

/// The paper's notes of one policy, normalized, by trajectory, in the paper's order.
fn paper_notes(name: &str) -> Vec<(String, String)> {
    paper_fixture(name)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let text = normalized(line);
            let id = text[..text.find(" (").unwrap()].to_owned();
            (id, text)
        })
        .collect()
}

/// Where our note and the paper's differ on one clause.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Difference {
    trajectory: String,
    clause: Clause,
    paper: Option<String>,
    ours: Option<String>,
}

/// The clause-by-clause comparison of our notes with the paper's: the differences, and how many
/// clauses the paper prints that the inputs do not determine (`undetermined`, left out).
fn compare(ours: &[Note], paper: &[(String, String)], undetermined: &[Clause]) -> (Vec<Difference>, usize, usize) {
    assert_eq!(ours.len(), paper.len());
    let mut differences = Vec::new();
    let (mut compared, mut left_out) = (0, 0);
    for (note, (id, text)) in ours.iter().zip(paper) {
        assert_eq!(&note.trajectory, id);
        let (mine, theirs) = (split(&note.text()), split(text));
        assert_eq!(mine, note.clauses().into_iter().collect(), "the text splits back into its clauses");
        let kinds: std::collections::BTreeSet<Clause> = mine.keys().chain(theirs.keys()).copied().collect();
        for clause in kinds {
            match (theirs.get(&clause), mine.get(&clause)) {
                (Some(_), None) if undetermined.contains(&clause) => left_out += 1,
                (p, o) if p == o => compared += 1,
                (p, o) => {
                    compared += 1;
                    differences.push(Difference {
                        trajectory: id.clone(),
                        clause,
                        paper: p.cloned(),
                        ours: o.cloned(),
                    });
                }
            }
        }
    }
    (differences, compared, left_out)
}

/// The differences we make on purpose: "(1 steps later)" is written "(1 step later)", and a
/// point of no return before the decisive step, "(-16 steps later)" in the paper, "(16 steps
/// before the decisive step)".
fn deliberate(d: &Difference) -> Option<&'static str> {
    let (Some(paper), Some(ours)) = (&d.paper, &d.ours) else { return None };
    if d.clause != Clause::PointOfNoReturn {
        return None;
    }
    if paper.ends_with("(1 steps later)") && ours == &paper.replace("(1 steps later)", "(1 step later)") {
        return Some("grammar: 1 step");
    }
    let (at, distance) = paper.strip_suffix(" steps later)")?.split_once(" (-")?;
    (ours == &format!("{at} ({distance} steps before the decisive step)"))
        .then_some("plain words: before the decisive step")
}

// ---------------------------------------------------------------------------------------------
// Table 9 and Tables 11–12: the paper's notes of its main policy

type Row = BTreeMap<String, String>;

fn read_csv(name: &str) -> Vec<Row> {
    let text = paper_fixture(name);
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    lines
        .map(|line| header.iter().zip(line.split(',')).map(|(h, c)| (h.to_string(), c.trim().to_string())).collect())
        .collect()
}

const MAIN_JUDGES: [&str; 4] = ["GPT-6.1 Sol", "GPT-5.5", "OpenAI o3", "GPT-6 Astra"];

/// Table 9's rows as note inputs: the curve, `C` and `V(h_0)`; an empty first edit (symptom) is
/// "never", as the table prints a run that never edits (a silent run).
fn table9() -> Vec<(CurveRecord, f64, f64)> {
    let int = |row: &Row, c: &str| row[c].parse::<u32>().unwrap_or_else(|_| panic!("{c} = {:?}", row[c]));
    let step = |row: &Row, c: &str| Observation::from((!row[c].is_empty()).then(|| int(row, c)));
    read_csv("table09_curves.csv")
        .iter()
        .map(|row| {
            let curve = CurveRecord {
                trajectory: row["trajectory"].clone(),
                task: row["trajectory"].split(' ').next().unwrap().to_owned(),
                length: int(row, "length"),
                stratum: Some(row["stratum"].clone()),
                shape: if row["shape"] == "cliff" { Shape::Cliff } else { Shape::Erosion },
                decisive_interval: Some(Interval { a: int(row, "decisive_a"), b: int(row, "decisive_b") }),
                t_star: Some(int(row, "t_star")),
                pnr: int(row, "pnr"),
                confirmed_drop: row["both_ends_k32"] == "1",
                restart_point: None,
                first_edit: step(row, "first_edit"),
                first_symptom: step(row, "first_symptom"),
                fit: Vec::new(),
                points: Vec::new(),
            };
            (curve, row["concentration"].parse().unwrap(), row["v0_fit"].parse().unwrap())
        })
        .collect()
}

/// The four main judges' labels of each trajectory, in the file's order (the notes name them so).
fn main_judges_labels() -> BTreeMap<String, Vec<(String, Option<u32>)>> {
    let mut out: BTreeMap<String, Vec<(String, Option<u32>)>> = BTreeMap::new();
    for row in read_csv("tables11_12_labels.csv") {
        if MAIN_JUDGES.contains(&row["source"].as_str()) {
            let step = (row["step"] != "none").then(|| row["step"].parse().unwrap());
            out.entry(row["trajectory"].clone()).or_default().push((row["source"].clone(), step));
        }
    }
    out
}

#[test]
fn table_9_and_the_labels_give_the_papers_notes_of_its_main_policy() {
    let labels = main_judges_labels();
    let params = Thresholds::default();
    let notes: Vec<Note> = table9()
        .iter()
        .map(|(curve, c, v0)| {
            let input = NoteInput {
                curve,
                no_curve: None,
                concentration: Some(*c),
                v0_fit: Some(*v0),
                labels: labels.get(&curve.trajectory).map_or(&[], Vec::as_slice),
            };
            note(&input, &params)
        })
        .collect();
    let paper = paper_notes("notes_main_policy.txt");
    assert_eq!(paper.len(), 47);

    // Table 9 has no raw points (the rise) and no fit: the value lost before the decisive
    // interval is known only when the interval starts at h_0.
    let (differences, compared, left_out) = compare(&notes, &paper, &[Clause::Rise, Clause::ValueBefore]);
    let unexplained: Vec<&Difference> = differences.iter().filter(|d| deliberate(d).is_none()).collect();
    assert!(unexplained.is_empty(), "{unexplained:#?}");
    let mut explained: Vec<(&str, &'static str)> =
        differences.iter().map(|d| (d.trajectory.as_str(), deliberate(d).unwrap())).collect();
    explained.sort();
    assert_eq!(
        explained,
        [
            ("django-12325 s6", "plain words: before the decisive step"),
            ("matplotlib-25960 s0", "plain words: before the decisive step"),
            ("sphinx-8593 s6", "plain words: before the decisive step"),
            ("sympy-15875 s1", "grammar: 1 step"),
            ("sympy-19040 s7", "plain words: before the decisive step"),
        ]
    );
    let identical = notes.len() - explained.iter().map(|(t, _)| t).collect::<std::collections::BTreeSet<_>>().len();
    // 42 of 47 notes agree on every clause the table determines (331 clauses compared); the other
    // 5 differ only in the wording of the point of no return. Left out: the paper's 33 rises and
    // 40 of its 42 values before the decisive interval (the 2 others start at h_0: "flat"), from
    // data the table does not carry.
    assert_eq!((identical, compared, left_out), (42, 331, 73), "{differences:#?}");
    assert_eq!(
        ["django-12325 s6", "sphinx-8593 s6"].map(|t| notes.iter().find(|n| n.trajectory == t).unwrap().text()),
        [
            "django-12325 s6 (cliff, C = 1.00; V̂(h_0) = 0.05, T = 67, L1): the decisive step 16 (in an interval of 5 \
             steps) comes before the first edit (edit at 31); point of no return at 0 (16 steps before the decisive \
             step); first failure signal at 36. Labels: GPT-6.1 Sol 28, GPT-6 Astra 28, GPT-5.5 none, OpenAI o3 none \
             (2 after the point of no return; 2 “no mistake”).",
            "sphinx-8593 s6 (erosion, C = 0.33; V̂(h_0) = 0.65, T = 100, L2): the decisive step 98 (resolved to one \
             step) comes after the first edit (edit at 36); point of no return at 76 (22 steps before the decisive \
             step); first failure signal at 59. Labels: GPT-6.1 Sol 76, GPT-6 Astra 76, GPT-5.5 none, OpenAI o3 none \
             (2 before it; 2 “no mistake”).",
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Every printed note, rebuilt from what it prints

/// The input a printed note states: its header, `t*` and the interval's width (so `a = t* − 1`),
/// first edit, point of no return, the two raw points of its rise (the only points it gives),
/// first symptom and labels. No fit: the value before the decisive interval is then known only
/// when `a = 0`.
fn input_of(text: &str) -> (CurveRecord, f64, f64, Vec<(String, Option<u32>)>) {
    let clauses = split(text);
    let header = &clauses[&Clause::Header];
    let id = &header[..header.find(" (").unwrap()];
    let inner = &header[id.len() + 2..header.len() - 1];
    let (shape_c, rest) = inner.split_once("; ").unwrap();
    let (shape, c) = shape_c.split_once(", C = ").unwrap();
    let fields: Vec<&str> = rest.split(", ").collect();
    let v0: f64 = fields[0].strip_prefix("V̂(h_0) = ").unwrap().parse().unwrap();
    let length: u32 = fields[1].strip_prefix("T = ").unwrap().parse().unwrap();
    let decisive = &clauses[&Clause::Decisive];
    let t_star: u32 = number_after(decisive, "the decisive step ").unwrap().0.parse().unwrap();
    let width: u32 = if decisive.ends_with("(resolved to one step)") {
        1
    } else {
        number_after(decisive, "in an interval of ").unwrap().0.parse().unwrap()
    };
    let first_edit = match clauses.get(&Clause::FirstEdit) {
        None => Observation::NotMeasured,
        Some(e) if e.contains("never edits") => Observation::Never,
        Some(e) => Observation::At(number_after(e, "(edit at ").unwrap().0.parse().unwrap()),
    };
    let pnr = number_after(&clauses[&Clause::PointOfNoReturn], "point of no return at ").unwrap().0.parse().unwrap();
    let first_symptom = match clauses.get(&Clause::FirstSymptom).map(String::as_str) {
        None => Observation::NotMeasured,
        Some("no explicit failure signal") => Observation::Never,
        Some(s) => Observation::At(number_after(s, "first failure signal at ").unwrap().0.parse().unwrap()),
    };
    let points = clauses.get(&Clause::Rise).map_or_else(Vec::new, |rise| {
        // "… from step 35 (1/8) to 40 (4/8), …"
        let point = |key: &str| {
            let (t, end) = number_after(rise, key).unwrap();
            let counts = &rise[end + 2..end + rise[end..].find(')').unwrap()];
            let (k, n) = counts.split_once('/').unwrap();
            Point { t: t.parse().unwrap(), n: n.parse().unwrap(), successes: k.parse().unwrap() }
        };
        vec![point("from step "), point(") to ")]
    });
    let labels = clauses[&Clause::Labels]
        .strip_prefix("Labels: ")
        .unwrap()
        .split(", ")
        .map(|l| {
            let (source, step) = l.rsplit_once(' ').unwrap();
            (source.to_owned(), (step != "none").then(|| step.parse().unwrap()))
        })
        .collect();
    let a = t_star - 1;
    let curve = CurveRecord {
        trajectory: id.to_owned(),
        task: id.to_owned(),
        length,
        stratum: fields.get(2).map(|s| s.to_string()),
        shape: if shape == "cliff" { Shape::Cliff } else { Shape::Erosion },
        decisive_interval: Some(Interval { a, b: a + width }),
        t_star: Some(t_star),
        pnr,
        confirmed_drop: false,
        restart_point: None,
        first_edit,
        first_symptom,
        fit: Vec::new(),
        points,
    };
    (curve, c.parse().unwrap(), v0, labels)
}

/// Both policies' 107 notes: from what each note prints, the note is written again; its labels'
/// tally, the wording of every clause (a run that never edits, a task lost at the last step),
/// each rise's size and whether its 95% intervals overlap are the paper's.
#[test]
fn every_printed_note_is_written_again_from_what_it_prints() {
    let params = Thresholds::default();
    let mut recoveries = Vec::new();
    for (policy, expected_notes, expected_recoveries) in
        [("notes_main_policy.txt", 47, 2), ("notes_second_policy.txt", 60, 5)]
    {
        let paper = paper_notes(policy);
        assert_eq!(paper.len(), expected_notes);
        let inputs: Vec<_> = paper.iter().map(|(_, text)| input_of(text)).collect();
        let notes: Vec<Note> = inputs
            .iter()
            .map(|(curve, c, v0, labels)| {
                let input = NoteInput { curve, no_curve: None, concentration: Some(*c), v0_fit: Some(*v0), labels };
                note(&input, &params)
            })
            .collect();
        let (differences, _, _) = compare(&notes, &paper, &[Clause::ValueBefore]);
        let unexplained: Vec<&Difference> = differences.iter().filter(|d| deliberate(d).is_none()).collect();
        assert!(unexplained.is_empty(), "{policy}: {unexplained:#?}");
        assert_eq!(genuine_recoveries(&notes), expected_recoveries, "{policy}");
        recoveries.extend(notes.iter().filter(|n| n.rise.is_some_and(|r| r.genuine)).map(|n| n.trajectory.clone()));
    }
    assert_eq!(
        recoveries,
        [
            "django-11555 s5",
            "requests-6028 s4",
            "django-11999 s0",
            "django-11999 s6",
            "django-13028 s5",
            "django-13837 s2",
            "sphinx-9658 s6"
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Hand-made curves

fn curve() -> CurveRecord {
    CurveRecord {
        trajectory: "t".into(),
        task: "x".into(),
        length: 40,
        stratum: None,
        shape: Shape::Cliff,
        decisive_interval: Some(Interval { a: 10, b: 15 }),
        t_star: Some(11),
        pnr: 20,
        confirmed_drop: false,
        restart_point: None,
        first_edit: Observation::NotMeasured,
        first_symptom: Observation::NotMeasured,
        fit: Vec::new(),
        points: Vec::new(),
    }
}

fn write(curve: &CurveRecord, labels: &[(String, Option<u32>)]) -> Note {
    note(&NoteInput { curve, no_curve: None, concentration: None, v0_fit: None, labels }, &Thresholds::default())
}

#[test]
fn absent_data_leaves_its_clause_out() {
    let note = write(&curve(), &[]);
    assert_eq!(
        note.text(),
        "t (cliff; T = 40): the decisive step 11 (in an interval of 5 steps); point of no return at 20 (9 steps later)."
    );
    assert_eq!((note.edit_relation(), note.value_gone_before, note.rise), (None, None, None));
}

#[test]
fn a_run_that_never_edits_and_a_task_lost_at_the_last_step() {
    let mut c = curve();
    c.decisive_interval = Some(Interval { a: 39, b: 40 });
    c.t_star = Some(40);
    c.pnr = 40;
    c.first_edit = Observation::Never;
    c.first_symptom = Observation::At(12);
    c.stratum = Some("L0".into());
    let note = write(&c, &[("J".into(), Some(40)), ("K".into(), None)]);
    assert_eq!(
        note.text(),
        "t (cliff; T = 40, L0): the decisive step 40 (resolved to one step) comes on a run that never edits the \
         repository; the task is lost only at the last step; point of no return at 40 (same step); first failure \
         signal at 12. Labels: J 40, K none (1 inside the decisive interval; 1 “no mistake”)."
    );
}

#[test]
fn the_value_before_the_decisive_interval_comes_off_the_fit() {
    let mut c = curve();
    let fit = |before: f64| {
        vec![FitValue { t: 0, v_fit: 0.8 }, FitValue { t: 5, v_fit: before }, FitValue { t: 40, v_fit: 0.0 }]
    };
    let said =
        |c: &CurveRecord| write(c, &[]).clauses().into_iter().find(|(k, _)| *k == Clause::ValueBefore).map(|(_, t)| t);
    c.fit = fit(0.75); // 6% gone: flat
    assert_eq!(said(&c).as_deref(), Some("with the value flat until then"));
    assert_eq!(write(&c, &[]).v0_fit, Some(0.8), "V(h_0) off the fit");
    c.fit = fit(0.6); // 25%: neither
    assert_eq!(said(&c), None);
    assert_eq!(write(&c, &[]).value_gone_before.map(|v| (v * 100.0).round()), Some(25.0));
    c.fit = fit(0.2); // 75%
    assert_eq!(said(&c).as_deref(), Some("with 75% of the value already gone before it"));
    // An interval from h_0 has nothing before it, fit or not.
    c.fit.clear();
    c.decisive_interval = Some(Interval { a: 0, b: 3 });
    c.t_star = Some(1);
    assert_eq!(said(&c).as_deref(), Some("with the value flat until then"));
}

#[test]
fn the_rise_named_is_the_largest_genuine_one_else_the_largest() {
    let p = |t, successes, n| Point { t, n, successes };
    let mut c = curve();
    // 0→5 rises 0.375 within noise; 20→25 rises 0.25 with 64 samples each: genuine, so named.
    c.points = vec![p(0, 1, 8), p(5, 4, 8), p(20, 16, 64), p(25, 32, 64)];
    let rise = write(&c, &[]).rise.unwrap();
    assert_eq!((rise.from.t, rise.to.t, rise.genuine, rise.mentioned), (20, 25, true, true));
    // Without it, the largest rise of any pair (not only neighbours).
    c.points = vec![p(0, 1, 8), p(5, 2, 8), p(10, 4, 8)];
    let rise = write(&c, &[]).rise.unwrap();
    assert_eq!((rise.from.t, rise.to.t, rise.genuine, rise.mentioned), (0, 10, false, true));
    assert!(
        write(&c, &[]).text().contains(
            "the raw estimates rise by 0.38 from step 0 (1/8) to 10 (4/8), within the noise of the two samples"
        )
    );
    // 1/8 within noise: kept in the values, not said.
    c.points = vec![p(0, 4, 8), p(5, 5, 8)];
    let note = write(&c, &[]);
    assert_eq!(note.rise.map(|r| r.mentioned), Some(false));
    assert!(!note.text().contains("rise"));
    // Only falls: no rise.
    c.points = vec![p(0, 8, 8), p(5, 4, 8)];
    assert_eq!(write(&c, &[]).rise, None);
}

#[test]
fn a_curve_without_a_decisive_step_and_a_trajectory_without_a_curve() {
    let mut c = curve();
    c.shape = Shape::Flat;
    c.decisive_interval = None;
    c.t_star = None;
    c.pnr = 40;
    c.first_edit = Observation::At(3);
    let labels = [("J".to_owned(), Some(4)), ("K".to_owned(), None)];
    assert_eq!(
        write(&c, &labels).text(),
        "t (flat; T = 40): no decisive step (the fitted value never drops); point of no return at 40. Labels: J 4, \
         K none (1 “no mistake”; 1 not placed (no decisive interval))."
    );
    let note = note(
        &NoteInput {
            curve: &c,
            no_curve: Some(NoCurve::Doomed),
            concentration: None,
            v0_fit: Some(0.1),
            labels: &labels,
        },
        &Thresholds::default(),
    );
    assert_eq!(
        note.text(),
        "t (doomed; V̂(h_0) = 0.10, T = 40): no curve: the task's pass rate leaves no value to lose. Labels: J 4, K \
         none (1 “no mistake”; 1 not placed (no decisive interval))."
    );
}

#[test]
fn notes_csv_has_the_note_and_every_clauses_value() {
    let mut c = curve();
    c.first_edit = Observation::At(30);
    c.first_symptom = Observation::Never;
    c.stratum = Some("L1".into());
    c.points = vec![Point { t: 0, n: 8, successes: 2 }, Point { t: 5, n: 8, successes: 8 }];
    let note = note(
        &NoteInput {
            curve: &c,
            no_curve: None,
            concentration: Some(0.6),
            v0_fit: Some(0.5),
            labels: &[("J, the judge".to_owned(), Some(12))],
        },
        &Thresholds::default(),
    );
    let csv = notes_csv(std::slice::from_ref(&note));
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some(NOTES_CSV_HEADER));
    let row = lines.next().unwrap();
    let text = note.text().replace('"', "\"\"");
    assert_eq!(
        row,
        format!(
            "t,\"{text}\",cliff,0.6,0.5,40,L1,11,10,15,30,before,,false,20,9,0.75,0,2/8,5,8/8,true,true,never,\
             \"J, the judge 12\",1,0,0,0,0,0"
        )
    );
    assert_eq!(NOTES_CSV_HEADER.split(',').count(), 31);
    assert_eq!(genuine_recoveries(&[note]), 1);
}

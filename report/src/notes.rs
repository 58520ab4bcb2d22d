//! One diagnostic note per curve, as the paper prints them under its V-curve figures (Appendix W):
//! a sentence that says where the task was lost, how that relates to the agent's first edit and
//! first visible symptom, whether the raw estimates recovered genuinely or only within noise, and
//! where each source's label fell.
//!
//! [`note`] is pure: a [`NoteInput`] (the trajectory's [`CurveRecord`], its concentration and
//! fitted `V(h_0)`, its labels) in, a [`Note`] out. A [`Note`] keeps every clause's value (for the
//! clause columns of [`notes_csv`]) and writes itself as the paper does ([`Note::text`]):
//!
//! > xarray-3305 s5 (erosion, C = 0.15; V̂(h_0) = 0.81, T = 100, L2): the decisive step 26
//! > (resolved to one step) comes before the first edit (edit at 44), with 50% of the value
//! > already gone before it; point of no return at 45 (19 steps later); the raw estimates rise by
//! > 0.31 from step 20 (2/8) to 25 (18/32), within the noise of the two samples; first failure
//! > signal at 51. Labels: GPT-6.1 Sol 26, GPT-6 Astra 26, GPT-5.5 44, OpenAI o3 44 (2 inside the
//! > decisive interval; 2 after it).
//!
//! The clauses, in order, and what each needs (absent data leaves its clause out, never a made-up
//! value):
//!
//! | clause | from |
//! |---|---|
//! | shape, `C`, `V̂(h_0)`, `T`, stratum | the record; `C` and `V(h_0)` from the input |
//! | the decisive step `t*`, "resolved to one step" (`b − a = 1`) or "in an interval of `b − a` steps" | the decisive interval `(a, b]` |
//! | "comes before / at / after the first edit (edit at `E`)", or "on a run that never edits the repository" | the first edit, when measured; `t*` against `E` |
//! | "with the value flat until then" / "with X% of the value already gone before it" | `1 − V(h_a) / V(h_0)` off the fit (0 when `a = 0`): flat below [`FLAT_BELOW`], stated from [`GONE_FROM`], neither in between |
//! | "the task is lost only at the last step" | `t* = T` |
//! | "point of no return at `P` (`P − t*` steps later)", "(same step)", or "(`t* − P` steps before the decisive step)" | `t_pnr` |
//! | "the raw estimates rise by `R` from step `s` (`k/n`) to `u` (`k/n`)", "within the noise of the two samples" or "a genuine recovery (the 95% intervals do not overlap) that the monotone fit flattens" | the raw points, when known: see [`Rise`] |
//! | "first failure signal at `S`" / "no explicit failure signal" | the first symptom, when measured |
//! | "Labels: SOURCE m, …" and the tally "(n inside the decisive interval; n before it; n after it; n after the point of no return; n “no mistake”)" | the labels, placed by [`place`] |
//!
//! The thresholds the paper does not state are decided in docs/decisions.md ("Per-curve notes").

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use vcurve_method::analyses::labels::{Placement, place};
use vcurve_method::analyses::{CurveRecord, Observation};
use vcurve_method::curve::{Interval, Point, Shape};
use vcurve_method::stats::wilson;
use vcurve_method::{Thresholds, meets_at_least};

use crate::table::{csv_field, opt};

/// Below this share of `V(h_0)` lost before the decisive interval, the note says "with the value
/// flat until then".
pub const FLAT_BELOW: f64 = 0.10;

/// From this share of `V(h_0)` lost before the decisive interval, the note says "with X% of the
/// value already gone before it" (the smallest share the paper prints is 31%).
pub const GONE_FROM: f64 = 0.30;

/// Why a trajectory has no curve to note.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoCurve {
    /// Its task's pass rate is at most the doomed threshold: no curve was built.
    Doomed,
    /// Replay failed to reproduce it: it was dropped.
    NonReplayable,
}

impl NoCurve {
    pub fn as_str(&self) -> &'static str {
        match self {
            NoCurve::Doomed => "doomed",
            NoCurve::NonReplayable => "non-replayable",
        }
    }
}

/// What the note of one trajectory is written from.
#[derive(Debug, Clone, Copy)]
pub struct NoteInput<'a> {
    /// The curve's quantities (Table 9's row): `T`, stratum, shape, decisive interval, `t*`,
    /// `t_pnr`, first edit and first symptom; its fit (for the value lost before the decisive
    /// interval) and raw points (for the rise), each empty when not known.
    pub curve: &'a CurveRecord,
    /// `Some` when the trajectory has no curve (`curve` then carries only its id, `T` and stratum).
    pub no_curve: Option<NoCurve>,
    /// The concentration `C`, when known.
    pub concentration: Option<f64>,
    /// The fitted `V(h_0)`, when known; otherwise read off the curve's fit at `t = 0`.
    pub v0_fit: Option<f64>,
    /// The trajectory's labels in the order the note names them: `(source, step)`, `None` for
    /// "no mistake".
    pub labels: &'a [(String, Option<u32>)],
}

/// Where the decisive step falls against the first edit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EditRelation {
    /// `t* < E`: the diagnosis was wrong before any code changed.
    Before,
    /// `t* = E`: the fix itself was wrong.
    At,
    /// `t* > E`.
    After,
    /// The run never edits the repository.
    NeverEdits,
}

impl EditRelation {
    pub fn as_str(&self) -> &'static str {
        match self {
            EditRelation::Before => "before",
            EditRelation::At => "at",
            EditRelation::After => "after",
            EditRelation::NeverEdits => "never_edits",
        }
    }
}

/// The largest rise of the raw estimates between two sampled points `from.t < to.t`.
///
/// Among every such pair: the largest rise whose two Wilson 95% intervals do not overlap (a
/// *genuine* recovery, which the monotone fit flattens), else the largest rise of all; the
/// earliest pair on a tie. It is *mentioned* in the note when it is genuine or at least
/// `δ_screen` (0.25, two successes of eight).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Rise {
    pub from: Point,
    pub to: Point,
    /// `from`'s Wilson 95% interval lies wholly below `to`'s.
    pub genuine: bool,
    /// The note says it.
    pub mentioned: bool,
}

impl Rise {
    /// `V̂(h_to) − V̂(h_from)`.
    pub fn rise(&self) -> f64 {
        self.to.v_hat() - self.from.v_hat()
    }
}

/// The labels of one note counted by where they fall (see [`place`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub inside: u32,
    pub before: u32,
    pub after: u32,
    pub after_pnr: u32,
    pub no_mistake: u32,
    /// Step labels on a trajectory without a decisive interval.
    pub unplaced: u32,
}

/// One label as the note names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoteLabel {
    pub source: String,
    pub step: Option<u32>,
    pub placement: Placement,
}

/// The note of one trajectory: every clause's value, and its text ([`Note::text`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Note {
    pub trajectory: String,
    /// `None` when the trajectory has no curve.
    pub shape: Option<Shape>,
    pub no_curve: Option<NoCurve>,
    pub concentration: Option<f64>,
    pub v0_fit: Option<f64>,
    pub length: u32,
    pub stratum: Option<String>,
    /// `(a, b]`; `None` without a decisive interval.
    pub decisive_interval: Option<Interval>,
    /// `t* = a + 1`.
    pub decisive_step: Option<u32>,
    pub first_edit: Observation,
    /// `1 − V(h_a) / V(h_0)`: the share of the value lost before the decisive interval; `None`
    /// when the fit at `a` or `V(h_0)` is unknown, or `V(h_0) = 0`.
    pub value_gone_before: Option<f64>,
    /// `t_pnr`; `None` without a curve.
    pub pnr: Option<u32>,
    /// `None` when the raw points are not known, or no sampled point rises above an earlier one.
    pub rise: Option<Rise>,
    pub first_symptom: Observation,
    pub labels: Vec<NoteLabel>,
}

/// The note of one trajectory.
pub fn note(input: &NoteInput<'_>, params: &Thresholds) -> Note {
    let curve = input.curve;
    let has_curve = input.no_curve.is_none();
    let v0_fit = input.v0_fit.or_else(|| curve.fit.first().filter(|f| f.t == 0).map(|f| f.v_fit));
    let interval = curve.decisive_interval.filter(|_| has_curve);
    let value_gone_before = interval.and_then(|i| {
        if i.a == 0 {
            return Some(0.0);
        }
        let v0 = v0_fit.filter(|&v| v > 0.0)?;
        let before = if curve.fit.is_empty() { None } else { curve.fit_at(i64::from(i.a)) }?;
        Some(((v0 - before) / v0).max(0.0))
    });
    let labels = input
        .labels
        .iter()
        .map(|(source, step)| NoteLabel {
            source: source.clone(),
            step: *step,
            placement: if has_curve {
                place(curve, *step)
            } else if step.is_some() {
                Placement::Unplaced
            } else {
                Placement::NoMistake
            },
        })
        .collect();
    Note {
        trajectory: curve.trajectory.clone(),
        shape: has_curve.then_some(curve.shape),
        no_curve: input.no_curve,
        concentration: input.concentration.filter(|_| has_curve),
        v0_fit,
        length: curve.length,
        stratum: curve.stratum.clone(),
        decisive_interval: interval,
        decisive_step: interval.map(|i| i.a + 1),
        first_edit: curve.first_edit,
        value_gone_before,
        pnr: has_curve.then_some(curve.pnr),
        rise: if has_curve { largest_rise(&curve.points, params) } else { None },
        first_symptom: curve.first_symptom,
        labels,
    }
}

/// See [`Rise`].
fn largest_rise(points: &[Point], params: &Thresholds) -> Option<Rise> {
    let mut points: Vec<Point> = points.iter().copied().filter(|p| p.n > 0).collect();
    points.sort_by_key(|p| p.t);
    let intervals: Vec<_> = points.iter().map(|p| wilson(p.successes, p.n, params.z_two_sided)).collect();
    // (genuine, rise, from, to), the best first by genuine then rise; a later pair replaces it
    // only when strictly better, so ties keep the earliest.
    let mut best: Option<(bool, f64, usize, usize)> = None;
    for i in 0..points.len() {
        for j in i + 1..points.len() {
            let rise = points[j].v_hat() - points[i].v_hat();
            if rise <= 0.0 {
                continue;
            }
            let genuine = intervals[i].hi < intervals[j].lo;
            let better = match best {
                None => true,
                Some((g, r, _, _)) => (genuine && !g) || (genuine == g && rise > r),
            };
            if better {
                best = Some((genuine, rise, i, j));
            }
        }
    }
    best.map(|(genuine, rise, i, j)| Rise {
        from: points[i],
        to: points[j],
        genuine,
        mentioned: genuine || meets_at_least(rise, params.delta_screen),
    })
}

/// `1 step`, `16 steps`.
fn steps(n: u64) -> String {
    if n == 1 { "1 step".into() } else { format!("{n} steps") }
}

/// The clauses of a note, in the order it says them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Clause {
    /// `NAME (shape, C = …; V̂(h_0) = …, T = …, L1)`.
    Header,
    /// "the decisive step …" (or, without a decisive interval, what there is instead).
    Decisive,
    /// "comes before the first edit (edit at E)", …
    FirstEdit,
    /// "with the value flat until then" / "with X% of the value already gone before it".
    ValueBefore,
    /// "the task is lost only at the last step".
    LastStep,
    /// "point of no return at P (…)".
    PointOfNoReturn,
    /// "the raw estimates rise by …".
    Rise,
    /// "first failure signal at S" / "no explicit failure signal".
    FirstSymptom,
    /// "Labels: SOURCE m, …".
    Labels,
    /// "(2 inside the decisive interval; …)".
    Tally,
}

impl Note {
    /// Where the decisive step falls against the first edit, when both are known.
    pub fn edit_relation(&self) -> Option<EditRelation> {
        let t = self.decisive_step?;
        match self.first_edit {
            Observation::NotMeasured => None,
            Observation::Never => Some(EditRelation::NeverEdits),
            Observation::At(e) if t < e => Some(EditRelation::Before),
            Observation::At(e) if t == e => Some(EditRelation::At),
            Observation::At(_) => Some(EditRelation::After),
        }
    }

    /// `t* = T`: the value is lost only at the terminal step.
    pub fn lost_at_last_step(&self) -> bool {
        self.decisive_step == Some(self.length)
    }

    /// `t_pnr − t*`: how many steps after the decisive step the point of no return comes
    /// (negative: before it).
    pub fn pnr_after_decisive(&self) -> Option<i64> {
        Some(i64::from(self.pnr?) - i64::from(self.decisive_step?))
    }

    /// The labels counted by placement.
    pub fn tally(&self) -> Tally {
        let mut tally = Tally::default();
        for label in &self.labels {
            let count = match label.placement {
                Placement::Before => &mut tally.before,
                Placement::Inside => &mut tally.inside,
                Placement::After => &mut tally.after,
                Placement::AfterPnr => &mut tally.after_pnr,
                Placement::NoMistake => &mut tally.no_mistake,
                Placement::Unplaced => &mut tally.unplaced,
            };
            *count += 1;
        }
        tally
    }

    /// Every clause the note says, with its text, in order.
    pub fn clauses(&self) -> Vec<(Clause, String)> {
        let mut out = vec![(Clause::Header, self.header())];
        let Some(shape) = self.shape else {
            let why = match self.no_curve {
                Some(NoCurve::NonReplayable) => "no curve: replay could not reproduce the run",
                _ => "no curve: the task's pass rate leaves no value to lose",
            };
            out.push((Clause::Decisive, why.to_owned()));
            self.label_clauses(&mut out);
            return out;
        };
        match (self.decisive_step, self.decisive_interval) {
            (Some(t), Some(i)) => {
                let resolution = if i.b - i.a == 1 {
                    "resolved to one step".to_owned()
                } else {
                    format!("in an interval of {} steps", i.b - i.a)
                };
                out.push((Clause::Decisive, format!("the decisive step {t} ({resolution})")));
            }
            _ => {
                let what = if shape == Shape::Flat { "the fitted value never drops" } else { "not located" };
                out.push((Clause::Decisive, format!("no decisive step ({what})")));
            }
        }
        if let Some(relation) = self.edit_relation() {
            let text = match self.first_edit {
                Observation::At(e) => format!("comes {} the first edit (edit at {e})", relation.as_str()),
                Observation::Never | Observation::NotMeasured => {
                    "comes on a run that never edits the repository".to_owned()
                }
            };
            out.push((Clause::FirstEdit, text));
        }
        if let Some(share) = self.value_gone_before {
            if share < FLAT_BELOW {
                out.push((Clause::ValueBefore, "with the value flat until then".to_owned()));
            } else if meets_at_least(share, GONE_FROM) {
                out.push((
                    Clause::ValueBefore,
                    format!("with {:.0}% of the value already gone before it", 100.0 * share),
                ));
            }
        }
        if self.lost_at_last_step() {
            out.push((Clause::LastStep, "the task is lost only at the last step".to_owned()));
        }
        if let Some(pnr) = self.pnr {
            let text = match self.pnr_after_decisive() {
                None => format!("point of no return at {pnr}"),
                Some(0) => format!("point of no return at {pnr} (same step)"),
                Some(d) if d > 0 => format!("point of no return at {pnr} ({} later)", steps(d.unsigned_abs())),
                Some(d) => {
                    format!("point of no return at {pnr} ({} before the decisive step)", steps(d.unsigned_abs()))
                }
            };
            out.push((Clause::PointOfNoReturn, text));
        }
        if let Some(rise) = self.rise.filter(|r| r.mentioned) {
            let verdict = if rise.genuine {
                "a genuine recovery (the 95% intervals do not overlap) that the monotone fit flattens"
            } else {
                "within the noise of the two samples"
            };
            out.push((
                Clause::Rise,
                format!(
                    "the raw estimates rise by {:.2} from step {} ({}/{}) to {} ({}/{}), {verdict}",
                    rise.rise(),
                    rise.from.t,
                    rise.from.successes,
                    rise.from.n,
                    rise.to.t,
                    rise.to.successes,
                    rise.to.n
                ),
            ));
        }
        match self.first_symptom {
            Observation::NotMeasured => {}
            Observation::Never => out.push((Clause::FirstSymptom, "no explicit failure signal".to_owned())),
            Observation::At(s) => out.push((Clause::FirstSymptom, format!("first failure signal at {s}"))),
        }
        self.label_clauses(&mut out);
        out
    }

    /// `NAME (erosion, C = 0.30; V̂(h_0) = 0.48, T = 88, L1)`.
    fn header(&self) -> String {
        let mut head = match (self.shape, self.no_curve) {
            (Some(shape), _) => shape.as_str().to_owned(),
            (None, Some(why)) => why.as_str().to_owned(),
            (None, None) => String::new(),
        };
        if let Some(c) = self.concentration {
            let _ = write!(head, ", C = {c:.2}");
        }
        let mut quantities = Vec::new();
        if let Some(v0) = self.v0_fit {
            quantities.push(format!("V̂(h_0) = {v0:.2}"));
        }
        quantities.push(format!("T = {}", self.length));
        if let Some(stratum) = &self.stratum {
            quantities.push(stratum.clone());
        }
        format!("{} ({head}; {})", self.trajectory, quantities.join(", "))
    }

    fn label_clauses(&self, out: &mut Vec<(Clause, String)>) {
        if self.labels.is_empty() {
            return;
        }
        let named: Vec<String> = self
            .labels
            .iter()
            .map(|l| format!("{} {}", l.source, l.step.map_or_else(|| "none".to_owned(), |m| m.to_string())))
            .collect();
        out.push((Clause::Labels, format!("Labels: {}", named.join(", "))));
        let tally = self.tally();
        let parts: Vec<String> = [
            (tally.inside, "inside the decisive interval"),
            (tally.before, "before it"),
            (tally.after, "after it"),
            (tally.after_pnr, "after the point of no return"),
            (tally.no_mistake, "“no mistake”"),
            (tally.unplaced, "not placed (no decisive interval)"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        out.push((Clause::Tally, format!("({})", parts.join("; "))));
    }

    /// The note as the paper writes it: the header, a colon, the curve's clauses joined by `; `
    /// (the first edit and the value before it joined to the decisive step), a full stop, then
    /// the labels and their tally.
    pub fn text(&self) -> String {
        let clauses = self.clauses();
        let mut out = String::new();
        let mut body = String::new();
        let mut labels = String::new();
        for (clause, text) in &clauses {
            match clause {
                Clause::Header => out.push_str(text),
                Clause::FirstEdit => {
                    body.push(' ');
                    body.push_str(text);
                }
                Clause::ValueBefore => {
                    body.push_str(", ");
                    body.push_str(text);
                }
                Clause::Labels => labels.push_str(text),
                Clause::Tally => {
                    labels.push(' ');
                    labels.push_str(text);
                }
                Clause::Decisive | Clause::LastStep | Clause::PointOfNoReturn | Clause::Rise | Clause::FirstSymptom => {
                    if !body.is_empty() {
                        body.push_str("; ");
                    }
                    body.push_str(text);
                }
            }
        }
        let _ = write!(out, ": {body}.");
        if !labels.is_empty() {
            let _ = write!(out, " {labels}.");
        }
        out
    }
}

/// The header of [`notes_csv`]: `trajectory,note`, then the clauses' values.
pub const NOTES_CSV_HEADER: &str = "trajectory,note,shape,concentration,v0_fit,length,stratum,decisive_step,decisive_a,decisive_b,\
first_edit,edit_relation,value_gone_before,lost_at_last_step,pnr,pnr_after_decisive,\
rise,rise_from,rise_from_counts,rise_to,rise_to_counts,rise_genuine,rise_mentioned,first_symptom,\
labels,labels_inside,labels_before,labels_after,labels_after_pnr,labels_no_mistake,labels_unplaced";

/// An observation as a CSV cell: the step, `never`, or empty (not measured).
fn observation_cell(o: Observation) -> String {
    match o {
        Observation::NotMeasured => String::new(),
        Observation::Never => "never".into(),
        Observation::At(t) => t.to_string(),
    }
}

/// `notes.csv`: one row per note, `trajectory,note`, then one column per clause's value (empty:
/// not known or not applicable). Shares and the rise are printed in full (the note rounds them).
pub fn notes_csv(notes: &[Note]) -> String {
    let mut out = String::from(NOTES_CSV_HEADER);
    out.push('\n');
    for n in notes {
        let rise = n.rise;
        let tally = n.tally();
        let labels: Vec<String> = n
            .labels
            .iter()
            .map(|l| format!("{} {}", l.source, l.step.map_or_else(|| "none".to_owned(), |m| m.to_string())))
            .collect();
        let counts = |p: Point| format!("{}/{}", p.successes, p.n);
        let cells = [
            csv_field(&n.trajectory),
            csv_field(&n.text()),
            n.shape.map_or_else(|| n.no_curve.map_or("", |w| w.as_str()).to_owned(), |s| s.as_str().to_owned()),
            opt(n.concentration),
            opt(n.v0_fit),
            n.length.to_string(),
            csv_field(n.stratum.as_deref().unwrap_or("")),
            opt(n.decisive_step),
            opt(n.decisive_interval.map(|i| i.a)),
            opt(n.decisive_interval.map(|i| i.b)),
            observation_cell(n.first_edit),
            n.edit_relation().map_or("", |r| r.as_str()).to_owned(),
            opt(n.value_gone_before),
            opt(n.decisive_step.map(|_| n.lost_at_last_step())),
            opt(n.pnr),
            opt(n.pnr_after_decisive()),
            opt(rise.map(|r| r.rise())),
            opt(rise.map(|r| r.from.t)),
            opt(rise.map(|r| counts(r.from))),
            opt(rise.map(|r| r.to.t)),
            opt(rise.map(|r| counts(r.to))),
            opt(rise.map(|r| r.genuine)),
            opt(rise.map(|r| r.mentioned)),
            observation_cell(n.first_symptom),
            csv_field(&labels.join(", ")),
            tally.inside.to_string(),
            tally.before.to_string(),
            tally.after.to_string(),
            tally.after_pnr.to_string(),
            tally.no_mistake.to_string(),
            tally.unplaced.to_string(),
        ];
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// The note of every trajectory of a study's results, in the study's order: one per measured
/// curve (its first edit and first symptom as the results carry them, its stratum's length
/// tercile when the selection picked it), and one per doomed or non-replayable trajectory (no
/// curve). A trajectory not measured yet (waiting, replaying, cut short) has no note.
pub fn of_results(results: &crate::results::Results) -> Result<Vec<Note>, vcurve_method::CurveError> {
    use vcurve_method::schedule::Series;
    use vcurve_record::TrajectoryState;
    let strata: std::collections::BTreeMap<String, &'static str> = results
        .selection
        .iter()
        .flat_map(|s| s.picks.iter())
        .map(|p| (p.id.trajectory_id(), p.stratum.tercile.as_str()))
        .collect();
    let params = &results.thresholds;
    let mut notes = Vec::new();
    for tr in &results.trajectories {
        let stratum = strata.get(&tr.trajectory).map(|s| (*s).to_owned());
        let no_curve = match tr.state {
            TrajectoryState::Doomed => Some(NoCurve::Doomed),
            TrajectoryState::NonReplayable => Some(NoCurve::NonReplayable),
            _ => None,
        };
        let curve = match (no_curve, tr.series.get(&Series::Main).filter(|p| !p.is_empty())) {
            (None, Some(points)) => {
                let points: Vec<Point> =
                    points.iter().map(|p| Point { t: p.t, n: p.n, successes: p.successes }).collect();
                let base = (!tr.base_runs.0.is_empty()).then_some(&tr.base_runs);
                let analysis = vcurve_method::analyze(tr.length, &points, base, results.budget, params)?;
                CurveRecord::from_analysis(&tr.trajectory, &tr.task, &analysis, params)
            }
            (None, None) => continue,
            (Some(_), _) => CurveRecord {
                trajectory: tr.trajectory.clone(),
                task: tr.task.clone(),
                length: tr.length,
                stratum: None,
                shape: Shape::Flat,
                decisive_interval: None,
                t_star: None,
                pnr: tr.length,
                confirmed_drop: false,
                restart_point: None,
                first_edit: Observation::NotMeasured,
                first_symptom: Observation::NotMeasured,
                fit: Vec::new(),
                points: Vec::new(),
            },
        };
        let curve = CurveRecord { stratum, first_edit: tr.first_edit, first_symptom: tr.first_symptom, ..curve };
        let input = NoteInput {
            curve: &curve,
            no_curve,
            concentration: tr.concentration,
            v0_fit: tr.v0_fit,
            labels: &tr.labels,
        };
        notes.push(note(&input, params));
    }
    Ok(notes)
}

/// Genuine recoveries among `notes`: curves whose raw estimates rise with non-overlapping Wilson
/// 95% intervals (the paper found 2 of 47 on its main policy).
pub fn genuine_recoveries(notes: &[Note]) -> usize {
    notes.iter().filter(|n| n.rise.is_some_and(|r| r.genuine)).count()
}

#[cfg(test)]
mod tests;

//! Replay as the paper's Appendix L reports it (Tables 14–15), from a study's exported
//! [`Results`]: pure code.
//!
//! - **By role and stratum** (Table 14, left): which trajectories the replay reconstructed. With a
//!   selection the rows are its picks in processing order — `selected` (the initial selection,
//!   round 0) and `back-fill` (later rounds), each pick's trajectory found by the store's id
//!   `{task}-base{seed}` — and their strata; a study that lists its trajectories has one role,
//!   `listed`: its trajectories with a recorded run (a doomed one is never replayed and is left
//!   out). Decoys are not replayed in this build, so there is no decoy row. A trajectory is
//!   *replayed* when its state reached `running` or `done` with a replay that reproduced every
//!   step, *non-replayable* when it was dropped (by its replay, or later by a continuation's replay
//!   of a prefix), and *not measured* while its replay has not finished (or a back-fill's
//!   trajectory is not yet in the study); the rate is over the finished ones.
//! - **The first mismatch** (Table 14, right): what differed and the kind of the recorded command
//!   ([`command_kind`]), counted over the non-replayable trajectories; a report stored before
//!   these were recorded counts as `not recorded`.
//! - **Comparison levels** (Table 15): the steps of the replayed trajectories by the level their
//!   observations matched at.
//! - The first mismatch's step (median, quartiles, maximum), the anchors the replays committed,
//!   and the selection's back-fills: how many, in how many rounds, and the strata they exhausted.
//!
//! A study none of whose trajectories replay applies to (no recorded run, no selection) has no
//! table: [`ReplayTable::of`] is `None`, and the report says "not measured".

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use vcurve_method::analyses::NOT_MEASURED;
use vcurve_method::selection::{BackFill, Selection, Stratum};
use vcurve_record::TrajectoryState;
use vcurve_record::jobs::{CompareLevel, MismatchKind};

use crate::results::{Results, TrajectoryResult};
use crate::table::{Table, opt};

/// Why a trajectory is in the replay table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Picked by the initial selection (round 0).
    Selected,
    /// Picked by a back-fill (round 1 or later).
    BackFill,
    /// A trajectory of a study without selection, with a recorded run.
    Listed,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Selected => "selected",
            Role::BackFill => "back-fill",
            Role::Listed => "listed",
        }
    }
}

/// What a row of [`ReplayTable::groups`] groups by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupKind {
    Role,
    Stratum,
    All,
}

impl GroupKind {
    pub fn as_str(self) -> &'static str {
        match self {
            GroupKind::Role => "role",
            GroupKind::Stratum => "stratum",
            GroupKind::All => "all",
        }
    }
}

/// One row of Table 14, left.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupRow {
    pub kind: GroupKind,
    /// The role (`selected`, `back-fill`, `listed`), the stratum (`L0-submit`, …) or `all`.
    pub group: String,
    pub n: u32,
    pub replayed: u32,
    pub non_replayable: u32,
    /// Replay not finished.
    pub not_measured: u32,
    /// `replayed / (replayed + non_replayable)`; `None` (not measured) when none finished.
    pub rate: Option<f64>,
}

/// A named count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Count {
    pub name: String,
    pub n: u32,
}

/// Where the first mismatches fell: over the non-replayable trajectories with a step (a replay
/// that could not be carried out has none). Quartiles are type-7 quantiles.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepSummary {
    pub n: u32,
    pub median: f64,
    pub q1: f64,
    pub q3: f64,
    pub max: u32,
}

/// The selection's back-fills.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackFills {
    /// Picks in all: the initial selection and the back-fills.
    pub picks: u32,
    pub initial: u32,
    /// Back-fills made (a replacement found).
    pub back_fills: u32,
    /// The largest round of a back-fill made.
    pub rounds: u32,
    /// Drops whose stratum had no candidate left.
    pub exhausted: u32,
    /// The strata those drops exhausted, in canonical order.
    pub exhausted_strata: Vec<Stratum>,
    /// Picks dropped as non-replayable.
    pub dropped: u32,
    /// Picks still in the study.
    pub active: u32,
}

/// Appendix L's tables of one study.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayTable {
    /// By role, then by stratum (canonical order), then `all`.
    pub groups: Vec<GroupRow>,
    /// What differed at the first mismatch, most frequent first.
    pub mismatches: Vec<Count>,
    /// The kind of the recorded command at the first mismatch ([`CommandKind::as_str`]), most
    /// frequent first; `no command` where the report names none.
    pub commands: Vec<Count>,
    /// Steps of the replayed trajectories by the level they matched at, in level order.
    pub levels: Vec<Count>,
    /// Anchor snapshots the replays of the replayed trajectories committed.
    pub anchors: u32,
    /// `None` when no non-replayable trajectory has a step.
    pub first_mismatch: Option<StepSummary>,
    /// `None` for a study without selection.
    pub back_fills: Option<BackFills>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Replayed,
    NonReplayable,
    NotMeasured,
}

struct Member<'a> {
    role: Role,
    stratum: Option<Stratum>,
    trajectory: Option<&'a TrajectoryResult>,
    status: Status,
}

fn status(trajectory: Option<&TrajectoryResult>, dropped: bool) -> Status {
    match trajectory {
        Some(t) if t.state == TrajectoryState::NonReplayable => Status::NonReplayable,
        Some(t) if t.state.has_curve() && t.replay.is_some() => Status::Replayed,
        Some(_) => Status::NotMeasured,
        // A pick dropped before its trajectory reached the study.
        None if dropped => Status::NonReplayable,
        None => Status::NotMeasured,
    }
}

fn members(results: &Results) -> Vec<Member<'_>> {
    let by_id: BTreeMap<&str, &TrajectoryResult> =
        results.trajectories.iter().map(|t| (t.trajectory.as_str(), t)).collect();
    match &results.selection {
        Some(selection) => selection
            .picks
            .iter()
            .map(|p| {
                let trajectory = by_id.get(p.id.trajectory_id().as_str()).copied();
                Member {
                    role: if p.round == 0 { Role::Selected } else { Role::BackFill },
                    stratum: Some(p.stratum),
                    trajectory,
                    status: status(trajectory, p.non_replayable),
                }
            })
            .collect(),
        None => results
            .trajectories
            .iter()
            .filter(|t| t.recorded.is_some() && t.state != TrajectoryState::Doomed)
            .map(|t| Member { role: Role::Listed, stratum: None, trajectory: Some(t), status: status(Some(t), false) })
            .collect(),
    }
}

fn group(kind: GroupKind, name: &str, members: &[&Member<'_>]) -> GroupRow {
    let of = |s: Status| members.iter().filter(|m| m.status == s).count() as u32;
    let (replayed, non_replayable) = (of(Status::Replayed), of(Status::NonReplayable));
    let finished = replayed + non_replayable;
    GroupRow {
        kind,
        group: name.to_string(),
        n: members.len() as u32,
        replayed,
        non_replayable,
        not_measured: of(Status::NotMeasured),
        rate: (finished > 0).then(|| f64::from(replayed) / f64::from(finished)),
    }
}

/// Counts by name, most frequent first; ties in the order the names were first given in `order`.
fn counts(order: &[&str], names: impl IntoIterator<Item = String>) -> Vec<Count> {
    let mut by: BTreeMap<String, u32> = BTreeMap::new();
    for name in names {
        *by.entry(name).or_default() += 1;
    }
    let rank = |name: &str| order.iter().position(|o| *o == name).unwrap_or(order.len());
    let mut out: Vec<Count> = by.into_iter().map(|(name, n)| Count { name, n }).collect();
    out.sort_by(|a, b| b.n.cmp(&a.n).then(rank(&a.name).cmp(&rank(&b.name))).then(a.name.cmp(&b.name)));
    out
}

/// The type-7 quantile of sorted, non-empty values.
fn quantile(sorted: &[u32], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    f64::from(sorted[lo]) + f64::from(sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// The stratum of every back-fill that found its stratum exhausted, in the order they happened.
pub(crate) fn exhausted_strata(selection: &Selection) -> impl Iterator<Item = Stratum> + '_ {
    selection.back_fills.iter().filter_map(|e| match e.result {
        BackFill::StratumExhausted { stratum, .. } => Some(stratum),
        _ => None,
    })
}

/// A mismatch kind's name in the table; `not recorded` for a report stored without one.
const NOT_RECORDED: &str = "not recorded";
/// A first mismatch whose report names no command.
const NO_COMMAND: &str = "no command";

impl ReplayTable {
    /// The table of a study; `None` when replay applies to none of its trajectories.
    pub fn of(results: &Results) -> Option<ReplayTable> {
        let members = members(results);
        if members.is_empty() {
            return None;
        }
        let mut groups = Vec::new();
        for role in [Role::Selected, Role::BackFill, Role::Listed] {
            let of: Vec<&Member<'_>> = members.iter().filter(|m| m.role == role).collect();
            if !of.is_empty() {
                groups.push(group(GroupKind::Role, role.as_str(), &of));
            }
        }
        let mut strata: BTreeMap<Stratum, Vec<&Member<'_>>> = BTreeMap::new();
        for m in &members {
            if let Some(s) = m.stratum {
                strata.entry(s).or_default().push(m);
            }
        }
        for (stratum, of) in &strata {
            groups.push(group(GroupKind::Stratum, &stratum.to_string(), of));
        }
        groups.push(group(GroupKind::All, "all", &members.iter().collect::<Vec<_>>()));

        let dropped: Vec<Option<&vcurve_record::jobs::NonReplayable>> = members
            .iter()
            .filter(|m| m.status == Status::NonReplayable)
            .map(|m| m.trajectory.and_then(|t| t.non_replayable.as_ref()))
            .collect();
        let kind_order: Vec<&str> = MismatchKind::ALL.iter().map(|k| k.as_str()).chain([NOT_RECORDED]).collect();
        let mismatches = counts(
            &kind_order,
            dropped.iter().map(|n| n.and_then(|n| n.mismatch).map_or(NOT_RECORDED, MismatchKind::as_str).to_string()),
        );
        let command_order: Vec<&str> = CommandKind::ALL.iter().map(|k| k.as_str()).chain([NO_COMMAND]).collect();
        let commands = counts(
            &command_order,
            dropped.iter().map(|n| {
                n.and_then(|n| n.command.as_deref()).map_or(NO_COMMAND, |c| command_kind(c).as_str()).to_string()
            }),
        );
        let mut steps: Vec<u32> = dropped.iter().flatten().map(|n| n.step).filter(|&s| s > 0).collect();
        steps.sort_unstable();
        let first_mismatch = steps.last().map(|&max| StepSummary {
            n: steps.len() as u32,
            median: quantile(&steps, 0.5),
            q1: quantile(&steps, 0.25),
            q3: quantile(&steps, 0.75),
            max,
        });

        let replays: Vec<&vcurve_record::jobs::Replayed> = members
            .iter()
            .filter(|m| m.status == Status::Replayed)
            .filter_map(|m| m.trajectory.and_then(|t| t.replay.as_ref()))
            .collect();
        let mut by_level: BTreeMap<CompareLevel, u32> = BTreeMap::new();
        for level in replays.iter().flat_map(|r| &r.levels) {
            *by_level.entry(*level).or_default() += 1;
        }
        let levels = by_level.into_iter().map(|(l, n)| Count { name: l.as_str().to_string(), n }).collect();
        let anchors = replays.iter().map(|r| r.anchors.len() as u32).sum();

        let back_fills = results.selection.as_ref().map(|s| {
            let mut exhausted_strata: Vec<Stratum> = exhausted_strata(s).collect();
            exhausted_strata.sort_unstable();
            exhausted_strata.dedup();
            BackFills {
                picks: s.picks.len() as u32,
                initial: s.initial(),
                back_fills: s.back_fill_count(),
                rounds: s.rounds(),
                exhausted: s.exhausted_count(),
                exhausted_strata,
                dropped: s.picks.iter().filter(|p| p.non_replayable).count() as u32,
                active: s.active().count() as u32,
            }
        });

        Some(ReplayTable { groups, mismatches, commands, levels, anchors, first_mismatch, back_fills })
    }
}

/// `replay.csv`: Table 14, left — one row per role, per stratum and for all, the rate empty when
/// not measured.
pub fn replay_csv(table: &ReplayTable) -> String {
    let mut out = String::from("kind,group,n,replayed,non_replayable,not_measured,rate\n");
    for g in &table.groups {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{}",
            g.kind.as_str(),
            g.group,
            g.n,
            g.replayed,
            g.non_replayable,
            g.not_measured,
            opt(g.rate)
        );
    }
    out
}

fn percent(share: Option<f64>) -> String {
    share.map_or_else(|| NOT_MEASURED.to_string(), |s| format!("{:.0}%", 100.0 * s))
}

/// The report's tables of Appendix L: Table 14 left (not measured when replay applies to no
/// trajectory, and then alone), Table 14 right, Table 15, and the first mismatch's step with the
/// back-fills.
pub fn tables(results: &Results) -> Vec<Table> {
    let mut groups = Table::new(
        "replay_roles",
        "Replay (Appendix L)",
        "Replay by role and stratum (the paper's Table 14, left): of the selected trajectories (round 0), the back-fills (later rounds) and, in a study without selection, the listed trajectories with a recorded run, how many the replay reconstructed exactly (state running or done with a replay of every step), how many were dropped as non-replayable (by their replay or later by a continuation's replay of a prefix), and how many have not finished their replay (not measured); the rate is over the finished ones. Decoys are not replayed in this build. Not measured when replay applies to no trajectory (no recorded run, no selection).",
        &["group", "n", "replayed", "non-replayable", "not measured", "rate"],
    );
    let Some(table) = ReplayTable::of(results) else {
        groups.not_measured = true;
        return vec![groups];
    };
    for g in &table.groups {
        groups.row(vec![
            g.group.clone(),
            g.n.to_string(),
            g.replayed.to_string(),
            g.non_replayable.to_string(),
            g.not_measured.to_string(),
            percent(g.rate),
        ]);
    }

    let mut mismatches = Table::new(
        "replay_mismatches",
        "Replay: the first mismatch",
        "What differed at each non-replayable trajectory's first mismatch and the kind of the recorded command at that step (the paper's Table 14, right): observation (the output matched at no level), returncode, timeout, or a part of the state fingerprint (changed_paths from the container diff, git_diff, git_status); no_outcome when no replay could be carried out. A report stored before these were recorded reads not recorded.",
        &["counted by", "kind", "n"],
    );
    for c in &table.mismatches {
        mismatches.row(vec!["mismatch".into(), c.name.clone(), c.n.to_string()]);
    }
    for c in &table.commands {
        mismatches.row(vec!["command".into(), c.name.clone(), c.n.to_string()]);
    }

    let mut levels = Table::new(
        "replay_levels",
        "Replay: comparison levels",
        "The comparison level at which the observations of the replayed trajectories matched, in steps (the paper's Table 15): exact, sorted_lines (the same lines in another order); char_multiset (the same characters in another order) only in replays stored before it stopped being accepted.",
        &["level", "steps", "share"],
    );
    let steps: u32 = table.levels.iter().map(|c| c.n).sum();
    for c in &table.levels {
        levels.row(vec![c.name.clone(), c.n.to_string(), percent(Some(f64::from(c.n) / f64::from(steps)))]);
    }

    let mut summary = Table::new(
        "replay_summary",
        "Replay: first mismatch and back-fills",
        "The step of the first mismatch over the non-replayable trajectories with one (median, quartiles, maximum), the anchor snapshots the replays committed, and the selection's back-fills: each non-replayable pick is replaced from its own stratum, a back-fill of a round-r pick being of round r + 1; a stratum with no candidate left is exhausted and the study goes on with one trajectory fewer.",
        &["quantity", "value"],
    );
    let first = table.first_mismatch.as_ref().map_or_else(
        || NOT_MEASURED.to_string(),
        |s| format!("median {} (quartiles {}, {}; maximum {}; n = {})", s.median, s.q1, s.q3, s.max, s.n),
    );
    summary.row(vec!["first mismatch step".into(), first]);
    summary.row(vec!["anchors committed".into(), table.anchors.to_string()]);
    if let Some(b) = &table.back_fills {
        summary.row(vec![
            "picks (initial + back-fills)".into(),
            format!("{} ({} + {})", b.picks, b.initial, b.back_fills),
        ]);
        summary.row(vec!["back-fills, rounds".into(), format!("{} in {} round(s)", b.back_fills, b.rounds)]);
        let strata: Vec<String> = b.exhausted_strata.iter().map(Stratum::to_string).collect();
        let exhausted = match b.exhausted {
            0 => "0".to_string(),
            n => format!("{n} ({})", strata.join(", ")),
        };
        summary.row(vec!["strata exhausted".into(), exhausted]);
        summary
            .row(vec!["dropped, active".into(), format!("{} dropped, {} of {} active", b.dropped, b.active, b.picks)]);
    }
    vec![groups, mismatches, levels, summary]
}

/// What kind of command a recorded command is (the paper's Table 14, right).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandKind {
    /// `git stash …`.
    GitStash,
    /// A test runner: pytest, `python -m pytest|unittest`, tox, nose, Django's `runtests.py`,
    /// SymPy's `bin/test`, `python setup.py test`, `make test`.
    TestRun,
    /// Writing a file: a here-document into `cat`/`tee`, `cat`/`echo`/`printf` redirected into a
    /// file, `tee`, an in-place `sed -i`/`perl -i`.
    WriteFile,
    /// Running Python otherwise: `python x.py`, `python -c …`, `python - <<EOF`, `./x.py`.
    PythonScript,
    /// `pip install`, `python -m pip install`, `apt-get install`, `conda install`.
    Install,
    /// Any other `git` command.
    Git,
    /// Reading and searching: `cat`, `head`, `tail`, `grep`, `rg`, `find`, `ls`, `sed -n`, `nl`,
    /// `wc`, `tree`, `awk`, `less`.
    Read,
    Other,
}

impl CommandKind {
    /// In priority order: a compound command is of the first kind any of its parts is.
    pub const ALL: [CommandKind; 8] = [
        CommandKind::GitStash,
        CommandKind::TestRun,
        CommandKind::WriteFile,
        CommandKind::PythonScript,
        CommandKind::Install,
        CommandKind::Git,
        CommandKind::Read,
        CommandKind::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CommandKind::GitStash => "git stash",
            CommandKind::TestRun => "test run",
            CommandKind::WriteFile => "write file / heredoc",
            CommandKind::PythonScript => "python script",
            CommandKind::Install => "package install",
            CommandKind::Git => "git (other)",
            CommandKind::Read => "read / search",
            CommandKind::Other => "other",
        }
    }
}

/// The command's text without the bodies of its here-documents (the lines after a `<<WORD` up to
/// the line `WORD`), and whether it had one.
fn without_heredoc_bodies(command: &str) -> (String, bool) {
    let mut out = String::new();
    let mut until: Vec<String> = Vec::new();
    let mut any = false;
    for line in command.lines() {
        if let Some(end) = until.first() {
            if line.trim() == end {
                until.remove(0);
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
        let mut rest = line;
        while let Some(i) = rest.find("<<") {
            rest = &rest[i + 2..];
            if rest.starts_with('<') {
                // A here-string (`<<<`): no body.
                rest = &rest[1..];
                continue;
            }
            let word: String = rest
                .trim_start_matches('-')
                .trim_start()
                .chars()
                .take_while(|c| !c.is_whitespace() && !matches!(c, ';' | '&' | '|' | '>' | '<' | ')'))
                .filter(|c| !matches!(c, '\'' | '"' | '\\'))
                .collect();
            if !word.is_empty() {
                until.push(word);
                any = true;
            }
        }
    }
    (out, any)
}

/// The simple commands of a command line: split at `;`, `&`, `|`, parentheses and line ends
/// outside quotes (the `&` of a redirection such as `2>&1` or `&>` does not split).
fn simple_commands(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match (quote, c) {
            (q, '\\') if q != Some('\'') => {
                current.push(c);
                current.extend(next);
                i += 1;
            }
            (None, '\'' | '"') => {
                quote = Some(c);
                current.push(c);
            }
            (Some(q), _) if c == q => {
                quote = None;
                current.push(c);
            }
            (None, '&') if current.ends_with('>') || next == Some('>') => current.push(c),
            (None, ';' | '&' | '|' | '\n' | '(' | ')') => parts.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
        i += 1;
    }
    parts.push(current);
    parts.into_iter().map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect()
}

/// Whether a simple command redirects its output into a file (not into another descriptor, as
/// `2>&1`, nor into `/dev/null`).
fn writes_a_file(part: &str) -> bool {
    let mut rest = part;
    while let Some(i) = rest.find('>') {
        rest = rest[i + 1..].trim_start_matches('>').trim_start_matches('|').trim_start();
        let target = rest.split_whitespace().next().unwrap_or("");
        if !target.is_empty() && !target.starts_with('&') && target != "/dev/null" {
            return true;
        }
    }
    false
}

/// The kind of one simple command; `None` for one that says nothing (`cd`, `source`, `export`).
fn simple_kind(part: &str, heredoc: bool) -> Option<CommandKind> {
    let words: Vec<&str> = part.split_whitespace().collect();
    // Leading assignments and wrappers.
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        let assignment = w.contains('=') && !w.starts_with('-') && !w.starts_with('=');
        match w {
            "sudo" | "nohup" | "time" | "exec" | "env" | "command" => i += 1,
            "timeout" => {
                i += 1;
                while i < words.len() && words[i].starts_with('-') {
                    i += 1;
                }
                i += 1; // the duration
            }
            _ if assignment => i += 1,
            _ => break,
        }
    }
    let words: Vec<&str> = words[i.min(words.len())..].to_vec();
    let program = *words.first()?;
    let name = program.rsplit('/').next().unwrap_or(program);
    let args = &words[1..];
    let has = |a: &str| args.contains(&a);
    let redirected = writes_a_file(part);
    let python = name.starts_with("python") && name[6..].chars().all(|c| c.is_ascii_digit() || c == '.');
    let module = args.iter().position(|a| *a == "-m").and_then(|k| args.get(k + 1)).copied();
    let first_arg = args.iter().find(|a| !a.starts_with('-')).copied();
    Some(match name {
        "git" if first_arg == Some("stash") => CommandKind::GitStash,
        "git" => CommandKind::Git,
        "pytest" | "py.test" | "tox" | "nosetests" | "nose2" | "trial" => CommandKind::TestRun,
        "make" if first_arg.is_some_and(|a| a.starts_with("test") || a == "check") => CommandKind::TestRun,
        _ if python && matches!(module, Some("pytest" | "unittest" | "tox" | "nose" | "py.test")) => {
            CommandKind::TestRun
        }
        _ if python && matches!(module, Some("pip")) && has("install") => CommandKind::Install,
        _ if python
            && first_arg.is_some_and(|a| a.ends_with("runtests.py") || a.ends_with("/test") || a == "setup.py")
            && (first_arg != Some("setup.py") || has("test")) =>
        {
            CommandKind::TestRun
        }
        _ if name.ends_with("runtests.py") || program == "bin/test" || program == "./bin/test" => CommandKind::TestRun,
        _ if python => CommandKind::PythonScript,
        "pip" | "pip3" | "conda" | "apt-get" | "apt" | "uv" if has("install") => CommandKind::Install,
        "tee" => CommandKind::WriteFile,
        "sed" | "perl" if args.iter().any(|a| a.starts_with("-i") || a.starts_with("-pi")) => CommandKind::WriteFile,
        "cat" | "echo" | "printf" if redirected || (name == "cat" && heredoc && part.contains("<<")) => {
            CommandKind::WriteFile
        }
        _ if name.ends_with(".py") => CommandKind::PythonScript,
        "cat" | "head" | "tail" | "less" | "more" | "grep" | "egrep" | "rg" | "ag" | "find" | "ls" | "sed" | "nl"
        | "wc" | "tree" | "awk" | "diff" | "file" | "stat" | "which" | "pwd" => CommandKind::Read,
        "cd" | "source" | "." | "export" | "set" | "true" | ":" => return None,
        _ => CommandKind::Other,
    })
}

/// The kind of a recorded command: each of its simple commands (here-document bodies left out)
/// classified, and the first kind in [`CommandKind::ALL`]'s order any of them is — so
/// `cat > t.py <<EOF … EOF; python t.py` is a written file, `cd /testbed && pytest -x` a test run;
/// [`CommandKind::Other`] when nothing is recognized.
pub fn command_kind(command: &str) -> CommandKind {
    let (text, heredoc) = without_heredoc_bodies(command);
    simple_commands(&text).iter().filter_map(|p| simple_kind(p, heredoc)).min().unwrap_or(CommandKind::Other)
}

#[cfg(test)]
pub(crate) mod tests;

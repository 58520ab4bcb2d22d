//! What a replayed action or state fingerprint is checked against the record with: the
//! [`Mismatch`] that names the first thing that differs, with excerpts around it.

use std::collections::BTreeSet;

use super::excerpt::{excerpt, first_differing_line};
use super::levels::compare;
use super::normalize::Normalizer;
use super::paths::{fingerprint_paths, status_outside_caches};
use crate::jobs::{CompareLevel, MismatchKind, NonReplayable, clip_command};
use crate::trajectory::{Action, Fingerprint};

impl Normalizer {
    /// Check one recorded action against what its re-execution observed: the normalized output at
    /// the two levels ([`compare`]), the return code and the timeout, exactly. An output the
    /// record cut to fit the store ([`Action::omitted`]) is compared cut alike: its head, its
    /// tail and how many bytes lay between them, not those bytes. Returns the level the output
    /// matched at.
    ///
    /// On a mismatch the [`Mismatch::level`] is `sorted_lines`, the loosest level tried, when the
    /// output matched at no level, else the level the output did match at (the return code or
    /// the timeout differed); its [`Mismatch::kind`] is the first of `observation`, `timeout`,
    /// `returncode` that differed, and its [`Mismatch::command`] the recorded command.
    pub fn compare_action(
        &self,
        recorded: &Action,
        output: &str,
        returncode: Option<i32>,
        timed_out: bool,
    ) -> Result<CompareLevel, Mismatch> {
        // A record cut to fit the store keeps the output's head and tail: the replayed output is
        // cut alike, so the head, the tail and the number of bytes between them are compared.
        let cut;
        let output = match &recorded.omitted {
            Some(omitted) if output != recorded.output => {
                cut = omitted.cut(output);
                cut.as_str()
            }
            _ => output,
        };
        let rec = self.normalize(&recorded.output);
        let rep = self.normalize(output);
        let level = compare(&rec, &rep);
        let mut reasons = Vec::new();
        if level.is_none() {
            let line = first_differing_line(&rec, &rep) + 1;
            reasons.push(format!("output differs at every level (first at line {line})"));
        }
        if recorded.timed_out != timed_out {
            reasons.push(match recorded.timed_out {
                true => "the recorded command timed out; the replayed one finished".to_owned(),
                false => "the replayed command timed out; the recorded one finished".to_owned(),
            });
        } else if recorded.returncode != returncode {
            reasons.push(format!(
                "return code {} recorded, {} replayed",
                show_code(recorded.returncode),
                show_code(returncode)
            ));
        }
        match (level, reasons.is_empty()) {
            (Some(level), true) => Ok(level),
            (level, _) => {
                let (recorded_excerpt, replayed_excerpt) = excerpt(&rec, &rep);
                let kind = if level.is_none() {
                    MismatchKind::Observation
                } else if recorded.timed_out != timed_out {
                    MismatchKind::Timeout
                } else {
                    MismatchKind::Returncode
                };
                Err(Mismatch {
                    level: level.unwrap_or(CompareLevel::SortedLines),
                    kind,
                    command: Some(clip_command(&recorded.command)),
                    reason: format!("command {:?}: {}", short(&recorded.command, 120), reasons.join("; ")),
                    recorded_excerpt,
                    replayed_excerpt,
                })
            }
        }
    }

    /// Compare a recorded fingerprint with the replayed one: the changed paths (both through
    /// [`fingerprint_paths`]), the return code, and `git diff` and `git status` after
    /// normalization (status lines of excluded paths dropped), exactly. The error names every
    /// component that differs.
    pub fn compare_fingerprint(&self, recorded: &Fingerprint, replayed: &Fingerprint) -> Result<(), String> {
        self.check_fingerprint(recorded, replayed).map_err(|m| m.reason)
    }

    /// [`Normalizer::compare_fingerprint`] with excerpts of the first component that differs
    /// (`git diff`, then `git status`, then the changed paths), for a [`NonReplayable`]; that
    /// component (the return code when nothing else differs) is the [`Mismatch::kind`]. A
    /// fingerprint knows no command: the caller adds the step's ([`Mismatch::with_command`]).
    pub fn check_fingerprint(&self, recorded: &Fingerprint, replayed: &Fingerprint) -> Result<(), Mismatch> {
        let mut reasons = Vec::new();
        let mut excerpts: Option<(MismatchKind, String, String)> = None;
        let with = |kind: MismatchKind, (a, b): (String, String)| (kind, a, b);

        let rec_paths = fingerprint_paths(recorded.changed_paths.iter().map(String::as_str));
        let rep_paths = fingerprint_paths(replayed.changed_paths.iter().map(String::as_str));
        let paths_differ = rec_paths != rep_paths;
        if paths_differ {
            let rec: BTreeSet<&String> = rec_paths.iter().collect();
            let rep: BTreeSet<&String> = rep_paths.iter().collect();
            let missing: Vec<&str> = rec.difference(&rep).map(|s| s.as_str()).collect();
            let added: Vec<&str> = rep.difference(&rec).map(|s| s.as_str()).collect();
            let mut parts = Vec::new();
            if !missing.is_empty() {
                parts.push(format!("missing in the replay: {}", list(&missing)));
            }
            if !added.is_empty() {
                parts.push(format!("only in the replay: {}", list(&added)));
            }
            reasons.push(format!("changed paths differ ({})", parts.join("; ")));
        }
        if recorded.returncode != replayed.returncode {
            reasons.push(format!(
                "return code {} recorded, {} replayed",
                show_code(recorded.returncode),
                show_code(replayed.returncode)
            ));
        }
        let (rec_diff, rep_diff) = (self.normalize(&recorded.git_diff), self.normalize(&replayed.git_diff));
        if rec_diff != rep_diff {
            let line = first_differing_line(&rec_diff, &rep_diff) + 1;
            reasons.push(format!("git diff differs (first at line {line})"));
            excerpts.get_or_insert_with(|| with(MismatchKind::GitDiff, excerpt(&rec_diff, &rep_diff)));
        }
        let rec_status = status_outside_caches(&self.normalize(&recorded.git_status));
        let rep_status = status_outside_caches(&self.normalize(&replayed.git_status));
        if rec_status != rep_status {
            let line = first_differing_line(&rec_status, &rep_status) + 1;
            reasons.push(format!("git status differs (first at line {line})"));
            excerpts.get_or_insert_with(|| with(MismatchKind::GitStatus, excerpt(&rec_status, &rep_status)));
        }
        if paths_differ {
            excerpts.get_or_insert_with(|| {
                with(MismatchKind::ChangedPaths, excerpt(&rec_paths.join("\n"), &rep_paths.join("\n")))
            });
        }
        if reasons.is_empty() {
            return Ok(());
        }
        let (kind, recorded_excerpt, replayed_excerpt) = excerpts.unwrap_or_else(|| {
            (
                MismatchKind::Returncode,
                format!("return code {}", show_code(recorded.returncode)),
                format!("return code {}", show_code(replayed.returncode)),
            )
        });
        Err(Mismatch {
            level: CompareLevel::Fingerprint,
            kind,
            command: None,
            reason: format!("state fingerprint: {}", reasons.join("; ")),
            recorded_excerpt,
            replayed_excerpt,
        })
    }
}

/// A replayed observation or state that differs from the record: a [`NonReplayable`] without its
/// step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub level: CompareLevel,
    /// What differed.
    pub kind: MismatchKind,
    /// The recorded command, clipped ([`clip_command`]); `None` until known.
    pub command: Option<String>,
    pub reason: String,
    pub recorded_excerpt: String,
    pub replayed_excerpt: String,
}

impl Mismatch {
    /// The report for a mismatch at the 1-based `step`.
    pub fn at_step(self, step: u32) -> NonReplayable {
        NonReplayable {
            step,
            level: self.level,
            reason: self.reason,
            recorded_excerpt: self.recorded_excerpt,
            replayed_excerpt: self.replayed_excerpt,
            mismatch: Some(self.kind),
            command: self.command,
        }
    }

    /// With the recorded `command` (clipped; none when empty): for a fingerprint's mismatch, the
    /// step's commands.
    pub fn with_command(self, command: &str) -> Mismatch {
        let command = (!command.is_empty()).then(|| clip_command(command));
        Mismatch { command, ..self }
    }
}

fn show_code(code: Option<i32>) -> String {
    code.map_or_else(|| "none".to_owned(), |c| c.to_string())
}

fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max { s.to_owned() } else { format!("{}…", s.chars().take(max).collect::<String>()) }
}

fn list(paths: &[&str]) -> String {
    const SHOWN: usize = 10;
    let mut out = paths.iter().take(SHOWN).copied().collect::<Vec<_>>().join(", ");
    if paths.len() > SHOWN {
        out.push_str(&format!(" and {} more", paths.len() - SHOWN));
    }
    out
}

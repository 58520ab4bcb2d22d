//! The prompt templates of the model stages, as versioned files compiled into the binary.
//!
//! Each template is a file `prompts/<family>/<name>.v<N>.md` of the repository. Its lines before
//! the first section marker are documentation (never sent); then come the messages, each opened
//! by a marker line `=== system ===` or `=== user ===`. Placeholders are `{{name}}` (lowercase
//! letters, digits and `_`); a value is inserted as it is and never scanned again. The first line
//! of the first message is `template: ID` (`task_state.reader.v1`), so a server or a log reader
//! can tell which template a request came from.
//!
//! A template's hash is the SHA-256 of the whole file (documentation included), so any edit of a
//! file changes its hash; a change of its wording is a new version file (docs/decisions.md,
//! "Task-state study: model calls").

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::OnceLock;

use sha2::{Digest as _, Sha256};

/// A chat role of a template's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    pub fn key(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One chat message, as sent.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
}

/// The templates vcurve ships.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TemplateName {
    /// Atom extraction from the full context of a checkpoint.
    ExtractAtoms,
    /// One probe (question and reference) per atom.
    GenerateProbes,
    /// A reader answering a checkpoint's probes from one view.
    Reader,
    /// The one user message appended to the actor's own history.
    ActorProbe,
    /// The judge crediting answers against references.
    Judge,
    /// A judge labelling the first mistake of a trajectory (curve studies' `judges:`).
    FirstMistake,
}

impl TemplateName {
    pub const ALL: [TemplateName; 6] = [
        TemplateName::ExtractAtoms,
        TemplateName::GenerateProbes,
        TemplateName::Reader,
        TemplateName::ActorProbe,
        TemplateName::Judge,
        TemplateName::FirstMistake,
    ];

    fn source(self) -> (&'static str, u32, &'static str, &'static str) {
        match self {
            TemplateName::ExtractAtoms => (
                "task_state.extract_atoms",
                1,
                "prompts/task_state/extract_atoms.v1.md",
                include_str!("../../../prompts/task_state/extract_atoms.v1.md"),
            ),
            TemplateName::GenerateProbes => (
                "task_state.generate_probes",
                1,
                "prompts/task_state/generate_probes.v1.md",
                include_str!("../../../prompts/task_state/generate_probes.v1.md"),
            ),
            TemplateName::Reader => (
                "task_state.reader",
                1,
                "prompts/task_state/reader.v1.md",
                include_str!("../../../prompts/task_state/reader.v1.md"),
            ),
            TemplateName::ActorProbe => (
                "task_state.actor_probe",
                1,
                "prompts/task_state/actor_probe.v1.md",
                include_str!("../../../prompts/task_state/actor_probe.v1.md"),
            ),
            TemplateName::Judge => (
                "task_state.judge",
                1,
                "prompts/task_state/judge.v1.md",
                include_str!("../../../prompts/task_state/judge.v1.md"),
            ),
            TemplateName::FirstMistake => (
                "labels.first_mistake",
                1,
                "prompts/labels/first_mistake.v1.md",
                include_str!("../../../prompts/labels/first_mistake.v1.md"),
            ),
        }
    }

    /// The template, parsed once. The shipped files are checked by the tests, so this does not
    /// fail on them; [`Template::parse`] is the checked path.
    pub fn template(self) -> &'static Template {
        static ALL: OnceLock<Vec<Template>> = OnceLock::new();
        let all = ALL.get_or_init(|| {
            TemplateName::ALL
                .iter()
                .map(|n| {
                    let (id, version, path, text) = n.source();
                    Template::parse(id, version, path, text)
                        .unwrap_or_else(|e| panic!("a shipped prompt template does not parse: {e}"))
                })
                .collect()
        });
        let i = TemplateName::ALL.iter().position(|n| *n == self).expect("every name is in ALL");
        &all[i]
    }
}

/// What is wrong with a template file or a rendering.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("template {template} ({path}): {reason}")]
    Malformed { template: String, path: String, reason: String },
    #[error("template {template}: variable {name:?} is not given (it needs {needs})")]
    MissingVariable { template: String, name: String, needs: String },
    #[error("template {template}: variable {name:?} is not one of the template's ({needs})")]
    UnknownVariable { template: String, name: String, needs: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Var(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Section {
    role: Role,
    pieces: Vec<Piece>,
}

/// A parsed prompt template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// `task_state.reader`.
    pub id: String,
    pub version: u32,
    /// The file it was read from, relative to the repository.
    pub path: String,
    /// SHA-256 of the file's text, lowercase hex.
    pub sha256: String,
    /// The placeholders, in name order.
    pub variables: BTreeSet<String>,
    sections: Vec<Section>,
}

const SYSTEM_MARKER: &str = "=== system ===";
const USER_MARKER: &str = "=== user ===";
const ASSISTANT_MARKER: &str = "=== assistant ===";

impl Template {
    /// `task_state.reader.v1`: the id with its version, as the template's first line names it.
    pub fn versioned_id(&self) -> String {
        format!("{}.v{}", self.id, self.version)
    }

    /// Parses a template file, refusing one without a message, with an empty message, with a
    /// `{{` that opens no placeholder, or whose first line is not `template: ID.vN`.
    pub fn parse(id: &str, version: u32, path: &str, text: &str) -> Result<Template, TemplateError> {
        let bad = |reason: String| TemplateError::Malformed {
            template: format!("{id}.v{version}"),
            path: path.into(),
            reason,
        };
        let mut sections: Vec<(Role, Vec<&str>)> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let role = match line.trim_end() {
                SYSTEM_MARKER => Some(Role::System),
                USER_MARKER => Some(Role::User),
                ASSISTANT_MARKER => Some(Role::Assistant),
                other if other.starts_with("===") && other.ends_with("===") => {
                    return Err(bad(format!(
                        "line {}: {other:?} is not a section marker (system, user, assistant)",
                        n + 1
                    )));
                }
                _ => None,
            };
            match (role, sections.last_mut()) {
                (Some(role), _) => sections.push((role, Vec::new())),
                (None, Some((_, lines))) => lines.push(line),
                (None, None) => {} // documentation
            }
        }
        if sections.is_empty() {
            return Err(bad(format!("has no message: a line {SYSTEM_MARKER:?} or {USER_MARKER:?} opens one")));
        }
        let mut parsed = Vec::new();
        let mut variables = BTreeSet::new();
        for (i, (role, lines)) in sections.into_iter().enumerate() {
            let body = lines.join("\n");
            let body = body.trim_matches('\n');
            if body.trim().is_empty() {
                return Err(bad(format!("message {} ({}) is empty", i + 1, role.key())));
            }
            let pieces = scan(body).map_err(|e| bad(format!("message {} ({}): {e}", i + 1, role.key())))?;
            for p in &pieces {
                if let Piece::Var(v) = p {
                    variables.insert(v.clone());
                }
            }
            parsed.push(Section { role, pieces });
        }
        let want = format!("template: {id}.v{version}");
        let first_line = match parsed[0].pieces.first() {
            Some(Piece::Text(t)) => t.lines().next().unwrap_or(""),
            _ => "",
        };
        if first_line.trim_end() != want {
            return Err(bad(format!("the first message must open with the line {want:?}, not {first_line:?}")));
        }
        Ok(Template {
            id: id.into(),
            version,
            path: path.into(),
            sha256: hex(&Sha256::digest(text.as_bytes())),
            variables,
            sections: parsed,
        })
    }

    /// The template's messages with every placeholder replaced. Every variable of the template
    /// must be given and no other.
    pub fn render(&self, values: &BTreeMap<&str, String>) -> Result<Vec<ChatMessage>, TemplateError> {
        let needs = || self.variables.iter().cloned().collect::<Vec<_>>().join(", ");
        for name in values.keys() {
            if !self.variables.contains(*name) {
                return Err(TemplateError::UnknownVariable {
                    template: self.versioned_id(),
                    name: (*name).into(),
                    needs: needs(),
                });
            }
        }
        for name in &self.variables {
            if !values.contains_key(name.as_str()) {
                return Err(TemplateError::MissingVariable {
                    template: self.versioned_id(),
                    name: name.clone(),
                    needs: needs(),
                });
            }
        }
        Ok(self
            .sections
            .iter()
            .map(|s| ChatMessage {
                role: s.role,
                content: s
                    .pieces
                    .iter()
                    .map(|p| match p {
                        Piece::Text(t) => t.as_str(),
                        Piece::Var(v) => values[v.as_str()].as_str(),
                    })
                    .collect(),
            })
            .collect())
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}, sha256 {})", self.versioned_id(), self.path, self.sha256)
    }
}

fn scan(body: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut rest = body;
    while let Some(at) = rest.find("{{") {
        if at > 0 {
            pieces.push(Piece::Text(rest[..at].into()));
        }
        let after = &rest[at + 2..];
        let end =
            after.find("}}").ok_or_else(|| format!("{{{{ at {:?} is not closed by }}}}", excerpt(&rest[at..])))?;
        let name = &after[..end];
        let valid = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && name.starts_with(|c: char| c.is_ascii_lowercase());
        if !valid {
            return Err(format!(
                "{:?} is not a placeholder: a name of lowercase letters, digits and _",
                excerpt(&rest[at..])
            ));
        }
        pieces.push(Piece::Var(name.into()));
        rest = &after[end + 2..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.into()));
    }
    Ok(pieces)
}

fn excerpt(s: &str) -> String {
    s.chars().take(30).collect()
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The template whose `template: ID` line (`task_state.reader.v1`) occurs last in `messages`, as a
/// server reads it from a request; `None` when no message names one.
pub fn find_template_line<'a>(messages: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut found = None;
    for m in messages {
        for line in m.lines() {
            if let Some(id) = line.strip_prefix("template: ") {
                let id = id.trim();
                if !id.is_empty() && !id.contains(char::is_whitespace) {
                    found = Some(id.to_string());
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(pairs: &[(&'static str, &str)]) -> BTreeMap<&'static str, String> {
        pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
    }

    #[test]
    fn every_shipped_template_parses_with_its_variables_and_hash() {
        let want: [(TemplateName, &[&str]); 6] = [
            (TemplateName::ExtractAtoms, &["checkpoint", "context", "task_id"]),
            (TemplateName::GenerateProbes, &["atoms", "checkpoint", "task_id"]),
            (TemplateName::Reader, &["context", "questions"]),
            (TemplateName::ActorProbe, &["question"]),
            (TemplateName::Judge, &["items"]),
            (TemplateName::FirstMistake, &["step_count", "steps", "task"]),
        ];
        for (name, vars) in want {
            let t = name.template();
            assert_eq!(t.variables.iter().map(String::as_str).collect::<Vec<_>>(), vars, "{t}");
            assert_eq!(t.sha256.len(), 64);
            let (_, _, _, text) = name.source();
            assert_eq!(t.sha256, hex(&Sha256::digest(text.as_bytes())));
        }
        let ids: BTreeSet<_> = TemplateName::ALL.iter().map(|n| n.template().versioned_id()).collect();
        assert_eq!(ids.len(), 6);
        // The actor's message is appended to the agent's own history: one user message.
        let actor = TemplateName::ActorProbe.template().render(&vals(&[("question", "Q?")])).unwrap();
        assert_eq!(actor.len(), 1);
        assert_eq!(actor[0].role, Role::User);
        assert!(actor[0].content.starts_with("template: task_state.actor_probe.v1\n"));
    }

    #[test]
    fn the_docs_name_every_template_with_its_hash() {
        let docs = include_str!("../../../docs/task-state.md");
        for name in TemplateName::ALL {
            let t = name.template();
            let row = format!("| `{}` | `{}` |", t.versioned_id(), t.path);
            let line = docs
                .lines()
                .find(|l| l.starts_with(&row))
                .unwrap_or_else(|| panic!("docs/task-state.md has no row {row}"));
            assert!(
                line.contains(&format!("`{}…`", &t.sha256[..16])),
                "docs/task-state.md: {} has hash {}: {line}",
                t.versioned_id(),
                t.sha256
            );
        }
    }

    #[test]
    fn rendering_replaces_placeholders_once_and_names_missing_and_unknown_variables() {
        let t = TemplateName::Reader.template();
        let msgs = t.render(&vals(&[("context", "ctx {{questions}}"), ("questions", "[]")])).unwrap();
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0].role, Role::System);
        assert!(msgs[0].content.starts_with("template: task_state.reader.v1\n"));
        assert!(msgs[1].content.contains("<context>\nctx {{questions}}\n</context>"), "a value is not scanned again");
        assert!(msgs[1].content.contains("<questions>\n[]\n</questions>"));
        assert!(!msgs[0].content.contains("Placeholders"), "documentation is not sent");
        let missing = t.render(&vals(&[("context", "c")])).unwrap_err();
        assert_eq!(
            missing.to_string(),
            "template task_state.reader.v1: variable \"questions\" is not given (it needs context, questions)"
        );
        let unknown = t.render(&vals(&[("context", "c"), ("questions", "q"), ("view", "v")])).unwrap_err();
        assert!(matches!(unknown, TemplateError::UnknownVariable { ref name, .. } if name == "view"), "{unknown}");
        assert_eq!(
            find_template_line(msgs.iter().map(|m| m.content.as_str())).as_deref(),
            Some("task_state.reader.v1")
        );
    }

    #[test]
    fn malformed_template_files_are_refused_naming_the_file() {
        let p = |text: &str| Template::parse("x.y", 1, "prompts/x/y.v1.md", text).unwrap_err().to_string();
        assert!(p("just docs\n").contains("has no message"));
        assert!(p("=== system ===\n\n=== user ===\nhi\n").contains("message 1 (system) is empty"));
        assert!(p("=== user ===\ntemplate: x.y.v1\n{{Bad}}\n").contains("is not a placeholder"));
        assert!(p("=== user ===\ntemplate: x.y.v1\n{{open\n").contains("is not closed"));
        assert!(p("=== user ===\nhello\n").contains("must open with the line \"template: x.y.v1\""));
        assert!(p("=== tool ===\nx\n").contains("is not a section marker"));
        let ok =
            Template::parse("x.y", 1, "p", "doc {{not_a_var}}\n=== user ===\ntemplate: x.y.v1\n{{a}} and {{b_2}}\n")
                .unwrap();
        assert_eq!(ok.variables.iter().map(String::as_str).collect::<Vec<_>>(), ["a", "b_2"]);
    }
}

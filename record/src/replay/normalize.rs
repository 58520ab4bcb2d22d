//! The normalization of observations: an ordered list of [`Rule`]s, compiled into a [`Normalizer`].

use std::collections::BTreeSet;

use regex::{Captures, Regex};
use serde::{Deserialize, Serialize};

use super::levels::compare;
use crate::jobs::CompareLevel;

/// The default rules, as shipped.
pub const DEFAULT_RULES_YAML: &str = include_str!("../../rules/normalization.yaml");

/// One normalization rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// A unique name, used in errors and tests.
    pub name: String,
    /// A regular expression in the regex crate's syntax.
    pub pattern: String,
    /// What each match becomes; `${1}`, `${2}`… insert groups.
    pub replacement: String,
}

#[derive(Debug, Clone)]
struct Compiled {
    name: String,
    regex: Regex,
    replacement: String,
}

/// An ordered set of compiled [`Rule`]s.
#[derive(Debug, Clone)]
pub struct Normalizer {
    rules: Vec<Compiled>,
}

impl Normalizer {
    /// Compile `rules`; an error names the rule and what is wrong with it.
    pub fn new(rules: &[Rule]) -> Result<Normalizer, String> {
        let mut seen = BTreeSet::new();
        let mut compiled = Vec::with_capacity(rules.len());
        for (i, rule) in rules.iter().enumerate() {
            if rule.name.trim().is_empty() {
                return Err(format!("normalization rule {} has an empty name", i + 1));
            }
            if !seen.insert(rule.name.as_str()) {
                return Err(format!("normalization rule {:?} is defined twice", rule.name));
            }
            let regex = Regex::new(&rule.pattern)
                .map_err(|e| format!("normalization rule {:?}: pattern does not compile: {e}", rule.name))?;
            if regex.is_match("") {
                return Err(format!(
                    "normalization rule {:?}: pattern {:?} matches the empty string",
                    rule.name, rule.pattern
                ));
            }
            compiled.push(Compiled { name: rule.name.clone(), regex, replacement: rule.replacement.clone() });
        }
        Ok(Normalizer { rules: compiled })
    }

    /// Parse a rule file (a YAML list of `{name, pattern, replacement}`) and compile it.
    pub fn from_yaml(yaml: &str) -> Result<Normalizer, String> {
        let rules: Vec<Rule> =
            serde_norway::from_str(yaml).map_err(|e| format!("normalization rules are not a list of rules: {e}"))?;
        Normalizer::new(&rules)
    }

    /// The rules' names, in the order they apply.
    pub fn rule_names(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().map(|r| r.name.as_str())
    }

    /// Apply every rule in order.
    pub fn normalize(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for rule in &self.rules {
            // An empty match (a pattern that can match nothing somewhere) is left as it was, so no
            // rule can insert its replacement between characters.
            let replaced = rule.regex.replace_all(&out, |caps: &Captures<'_>| {
                let mut dst = String::new();
                if caps[0].is_empty() {
                    return dst;
                }
                caps.expand(&rule.replacement, &mut dst);
                dst
            });
            if let std::borrow::Cow::Owned(s) = replaced {
                out = s;
            }
        }
        out
    }

    /// Normalize both texts and [`compare`] them.
    pub fn compare(&self, recorded: &str, replayed: &str) -> Option<CompareLevel> {
        compare(&self.normalize(recorded), &self.normalize(replayed))
    }
}

impl Default for Normalizer {
    /// The shipped rules (`record/rules/normalization.yaml`). A unit test compiles them, so this
    /// cannot fail in a build whose tests pass.
    fn default() -> Self {
        match Normalizer::from_yaml(DEFAULT_RULES_YAML) {
            Ok(n) => n,
            Err(e) => panic!("the shipped normalization rules do not compile: {e}"),
        }
    }
}

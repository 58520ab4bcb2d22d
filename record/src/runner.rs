//! Typed options of the agent runners a study can name, validated at launch: a bad option is
//! refused by `vcurve launch` naming the field, never discovered later as a retired key.

use serde::{Deserialize, Serialize};

/// The runner kind whose outcomes are a pure function of the key (testing, capacity planning).
pub const SYNTHETIC: &str = "synthetic";

/// The runner kinds this build offers: a study naming another is refused at launch.
pub const KINDS: &[&str] = &[SYNTHETIC];

/// The options of the `synthetic` runner.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SyntheticOptions {
    /// Simulated work per continuation, in milliseconds.
    pub duration_ms: u64,
    /// Probability of an injected no-outcome per attempt, in `[0, 1]`.
    pub no_outcome_rate: f64,
}

impl SyntheticOptions {
    /// The option names, for error messages.
    pub const FIELDS: &'static [&'static str] = &["duration_ms", "no_outcome_rate"];

    /// Parse and validate the options JSON; `null` means every default; other fields (such as
    /// `kind`) are ignored — the study spec refuses unknown ones. The error names the field.
    pub fn from_json(options: &serde_json::Value) -> Result<Self, String> {
        if options.is_null() {
            return Ok(Self::default());
        }
        if !options.is_object() {
            return Err(format!("invalid synthetic runner options: expected a JSON object, got {options}"));
        }
        let parsed = Self::deserialize(options).map_err(|e| format!("invalid synthetic runner options: {e}"))?;
        if !(0.0..=1.0).contains(&parsed.no_outcome_rate) {
            return Err(format!(
                "invalid synthetic runner options: no_outcome_rate = {} is outside [0, 1]",
                parsed.no_outcome_rate
            ));
        }
        Ok(parsed)
    }
}

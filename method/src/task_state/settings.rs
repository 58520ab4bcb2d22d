//! The estimators' settings: the CTXGAP study's fixed parameters (its Tables 6 and 7) and vcurve's
//! choices where the study is silent, as one named, versioned struct (docs/decisions.md,
//! "Task-state study (CTXGAP)").

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::error::TaskStateError;
use super::records::{Category, View};

/// How a probe is weighted in the pooled estimator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "scheme")]
pub enum WeightScheme {
    /// A probe stands for the atoms of its stratum (task, checkpoint, category): weight = the
    /// stratum's atoms / its eligible probes, the inverse of the sampling fraction. The pooled
    /// accuracy then estimates the share of extracted atoms recovered.
    InverseSamplingFraction,
    /// Every probe weighs 1 (an unweighted probe-level mean).
    Uniform,
    /// A fixed weight per category; a probe of a category not listed is an error.
    PerCategory { weights: BTreeMap<Category, f64> },
}

/// The settings of every task-state estimator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EstimatorSettings {
    /// The name of this set of settings; stored beside every result computed with it.
    pub version: String,
    /// Minimum atom importance (Table 7: 2).
    pub min_importance: u32,
    /// Answer samples asked per probe and view (Table 7: 3).
    pub samples_per_view: u32,
    /// A view's score of a probe needs at least this many scored samples.
    pub min_scored_samples: u32,
    pub weights: WeightScheme,
    /// Issue-clustered percentile bootstrap draws for accuracies and gaps (Table 7: 10,000).
    pub bootstrap_draws: u32,
    /// Paired task-cluster draws for the decomposition's share intervals (Table 13: 2,000).
    pub decomposition_draws: u32,
    /// The generator's seed (Table 5: 0).
    pub seed: u64,
    /// Two-sided confidence level (Table 7: 95%).
    pub confidence: f64,
    /// The telescoping chain, from reports to full context (Table 13).
    pub decomposition_chain: Vec<View>,
    /// The view a probe must be recovered in, better than in `U`, to count as unaligned (Table 15).
    pub unaligned_reference: View,
}

impl EstimatorSettings {
    /// `ctxgap-1`: the study's fixed parameters, and vcurve's first choices where it is silent.
    pub fn ctxgap_1() -> EstimatorSettings {
        EstimatorSettings {
            version: "ctxgap-1".into(),
            min_importance: 2,
            samples_per_view: 3,
            min_scored_samples: 1,
            weights: WeightScheme::InverseSamplingFraction,
            bootstrap_draws: 10_000,
            decomposition_draws: 2_000,
            seed: 0,
            confidence: 0.95,
            decomposition_chain: vec![View::Reports, View::Scrollback, View::FullMinusReasoning, View::Full],
            unaligned_reference: View::Full,
        }
    }

    /// Refuses settings no estimator can use, naming the field.
    pub fn validate(&self) -> Result<(), TaskStateError> {
        let bad = |field: &str, why: String| Err(TaskStateError::Settings(format!("{}: {field}: {why}", self.version)));
        if self.version.trim().is_empty() {
            return Err(TaskStateError::Settings("version: a settings version needs a name".into()));
        }
        if self.samples_per_view == 0 {
            return bad("samples_per_view", "at least 1 sample per view".into());
        }
        if self.min_scored_samples == 0 || self.min_scored_samples > self.samples_per_view {
            return bad(
                "min_scored_samples",
                format!(
                    "must be between 1 and samples_per_view ({}), not {}",
                    self.samples_per_view, self.min_scored_samples
                ),
            );
        }
        if !(self.confidence > 0.0 && self.confidence < 1.0) {
            return bad("confidence", format!("must lie strictly between 0 and 1, not {}", self.confidence));
        }
        if self.decomposition_chain.len() < 2 {
            return bad("decomposition_chain", "needs at least two views".into());
        }
        for (i, view) in self.decomposition_chain.iter().enumerate() {
            if self.decomposition_chain[..i].contains(view) {
                return bad("decomposition_chain", format!("view {view} is listed twice"));
            }
        }
        if let WeightScheme::PerCategory { weights } = &self.weights {
            for (category, w) in weights {
                if !(w.is_finite() && *w > 0.0) {
                    return bad("weights", format!("category {category:?} has weight {w}; weights are positive"));
                }
            }
        }
        Ok(())
    }
}

impl Default for EstimatorSettings {
    fn default() -> EstimatorSettings {
        EstimatorSettings::ctxgap_1()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctxgap_1_carries_the_fixed_parameters_of_tables_5_and_7() {
        let s = EstimatorSettings::ctxgap_1();
        assert_eq!(s.version, "ctxgap-1");
        assert_eq!(s.min_importance, 2);
        assert_eq!(s.samples_per_view, 3);
        assert_eq!(s.bootstrap_draws, 10_000);
        assert_eq!(s.seed, 0);
        assert_eq!(s.confidence, 0.95);
        // Table 13: U -> V -> T_minusR -> T, 2,000 paired resamples.
        assert_eq!(s.decomposition_draws, 2_000);
        assert_eq!(s.decomposition_chain, [View::Reports, View::Scrollback, View::FullMinusReasoning, View::Full]);
        assert_eq!(s.validate(), Ok(()));
    }

    #[test]
    fn settings_round_trip_and_refuse_bad_fields() {
        let s = EstimatorSettings::ctxgap_1();
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains(r#""weights":{"scheme":"inverse_sampling_fraction"}"#), "{json}");
        assert_eq!(serde_json::from_str::<EstimatorSettings>(&json).unwrap(), s);

        let mut bad = s.clone();
        bad.confidence = 1.0;
        assert!(
            bad.validate().unwrap_err().to_string().contains("ctxgap-1: confidence: must lie strictly between 0 and 1")
        );
        let mut bad = s.clone();
        bad.min_scored_samples = 4;
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("min_scored_samples: must be between 1 and samples_per_view (3), not 4")
        );
        let mut bad = s.clone();
        bad.decomposition_chain = vec![View::Reports, View::Reports];
        assert!(bad.validate().unwrap_err().to_string().contains("view reports is listed twice"));
        let mut bad = s.clone();
        bad.weights = WeightScheme::PerCategory { weights: BTreeMap::from([(Category::Risks, -1.0)]) };
        assert!(bad.validate().unwrap_err().to_string().contains("category Risks has weight -1"));
        let mut bad = s;
        bad.version = " ".into();
        assert!(bad.validate().unwrap_err().to_string().contains("version"));
    }
}

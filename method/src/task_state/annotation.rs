//! Human annotation of gap atoms (the study's Tables 2 and 22): which state of the reports an
//! unrecovered atom is in — not mentioned, mentioned without enough to answer, sufficient but not
//! recovered — measured by two independent annotators on a stratified sample of the gap atoms, with
//! their agreement (Cohen's κ) and inverse-stratum-probability weighted shares of the gap mass.
//!
//! - A **gap atom** is an eligible probe that the full context (`T`) recovers better than the
//!   reports (`U`); its **gap mass** is its weight times that difference ([`gap_atoms`]): the
//!   positive parts of the pooled gap `Gap_view(U)`.
//! - **The sample** ([`stratified_sample`]) is drawn per stratum (the atom's category), without
//!   replacement, the same number from each stratum as far as strata allow (small categories are
//!   seen at all), from a seeded generator: each sampled atom carries its inclusion probability
//!   `π = n_s / N_s`.
//! - **Shares** ([`state_shares`]) are Hájek ratios: `Σ m_i / π_i` over sampled atoms in a state,
//!   over the same sum for all sampled atoms, so each annotator's shares sum to one (Table 22's
//!   columns do); intervals resample tasks (the clusters) with replacement.
//! - **Agreement** ([`agreement`]): Cohen's κ on mention over every atom both annotators labelled,
//!   and on sufficiency over the atoms both said were mentioned (where sufficiency is asked).
//!
//! The choices the study leaves open (the strata, the allocation, the κ populations) are written in
//! docs/decisions.md ("Task-state study (CTXGAP)").

use std::collections::{BTreeMap, BTreeSet};

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::error::TaskStateError;
use super::estimate::{Ci, Population, Statistic, cluster_percentile};
use super::records::{Category, View};

/// An atom the full context recovers better than the reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GapAtom {
    pub probe: String,
    pub task: String,
    pub checkpoint: u32,
    pub category: Category,
    /// The probe's weight × (score in `T` − score in `U`), above 0.
    pub mass: f64,
}

/// The gap atoms of `population`: probes scored in both `reference` (the full context, `T`) and
/// `reports` (`U`) with a higher score in `reference`, in probe order.
pub fn gap_atoms(population: &Population, reference: View, reports: View) -> Vec<GapAtom> {
    population
        .probes
        .iter()
        .filter_map(|p| {
            let gap = p.scores[reference.index()]? - p.scores[reports.index()]?;
            (gap > 0.0 && p.weight > 0.0).then(|| GapAtom {
                probe: p.record.probe.clone(),
                task: p.record.task.clone(),
                checkpoint: p.record.checkpoint,
                category: p.record.category,
                mass: p.weight * gap,
            })
        })
        .collect()
}

/// One sampled atom and its inclusion probability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampledAtom {
    pub atom: GapAtom,
    /// `n_s / N_s` of its stratum.
    pub inclusion: f64,
}

/// A stratum of the sample: its category, atoms in the population and in the sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stratum {
    pub category: Category,
    pub population: u32,
    pub sampled: u32,
}

/// The atoms to annotate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnnotationSample {
    pub seed: u64,
    pub atoms: Vec<SampledAtom>,
    pub strata: Vec<Stratum>,
}

/// Draw `n` gap atoms (all of them when there are fewer), stratified by category: the strata get
/// `n / strata` each, a stratum with fewer atoms gives all it has and the rest goes to the others
/// in turn (largest remaining stratum first); within a stratum, atoms in a random order from
/// ChaCha8 seeded with `seed` (atoms sorted by probe id first, so the draw does not depend on the
/// input's order). The atoms come out in probe order.
pub fn stratified_sample(atoms: &[GapAtom], n: usize, seed: u64) -> AnnotationSample {
    let mut by_stratum: BTreeMap<Category, Vec<&GapAtom>> = BTreeMap::new();
    for atom in atoms {
        by_stratum.entry(atom.category).or_default().push(atom);
    }
    // Allocation: equal shares, capped by the stratum's size, the remainder handed round.
    let mut quota: BTreeMap<Category, usize> = by_stratum.keys().map(|c| (*c, 0)).collect();
    let mut left = n.min(atoms.len());
    while left > 0 {
        let open: Vec<Category> = by_stratum.iter().filter(|(c, a)| quota[*c] < a.len()).map(|(c, _)| *c).collect();
        let share = (left / open.len()).max(1);
        // Largest remaining first, so a remainder of 1 goes where most atoms are unsampled.
        let mut order = open.clone();
        order.sort_by_key(|c| (std::cmp::Reverse(by_stratum[c].len() - quota[c]), *c));
        for c in order {
            if left == 0 {
                break;
            }
            let take = share.min(by_stratum[&c].len() - quota[&c]).min(left);
            *quota.get_mut(&c).expect("a stratum") += take;
            left -= take;
        }
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut sampled = Vec::new();
    let mut strata = Vec::new();
    for (category, mut members) in by_stratum {
        members.sort_by(|a, b| a.probe.cmp(&b.probe));
        members.shuffle(&mut rng);
        let take = quota[&category];
        let inclusion = take as f64 / members.len() as f64;
        strata.push(Stratum { category, population: members.len() as u32, sampled: take as u32 });
        sampled.extend(members.into_iter().take(take).map(|atom| SampledAtom { atom: atom.clone(), inclusion }));
    }
    sampled.sort_by(|a, b| a.atom.probe.cmp(&b.atom.probe));
    AnnotationSample { seed, atoms: sampled, strata }
}

/// Whether the reports mention the atom's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mention {
    Mentioned,
    NotMentioned,
    Uncertain,
}

/// Whether what the reports say is enough to answer the probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sufficiency {
    Sufficient,
    Insufficient,
    Uncertain,
}

/// One annotator's label of one atom: mention, and sufficiency when mentioned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    pub mention: Mention,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sufficiency: Option<Sufficiency>,
}

/// Where an unrecovered atom's information stands in the reports (Table 22's rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GapState {
    NotMentioned,
    MentionedInsufficient,
    SufficientNotRecovered,
    Uncertain,
}

impl GapState {
    pub const ALL: [GapState; 4] = [
        GapState::NotMentioned,
        GapState::MentionedInsufficient,
        GapState::SufficientNotRecovered,
        GapState::Uncertain,
    ];

    /// Table 22's name of the state.
    pub fn name(self) -> &'static str {
        match self {
            GapState::NotMentioned => "Not mentioned",
            GapState::MentionedInsufficient => "Mentioned, insufficient",
            GapState::SufficientNotRecovered => "Sufficient, not recovered",
            GapState::Uncertain => "Uncertain",
        }
    }
}

impl Label {
    /// The state the label puts the atom in; an error for a mentioned atom without a sufficiency
    /// label, or a sufficiency label on an atom not mentioned.
    pub fn state(&self) -> Result<GapState, String> {
        match (self.mention, self.sufficiency) {
            (Mention::NotMentioned, None) => Ok(GapState::NotMentioned),
            (Mention::Uncertain, None) => Ok(GapState::Uncertain),
            (Mention::Mentioned, Some(Sufficiency::Insufficient)) => Ok(GapState::MentionedInsufficient),
            (Mention::Mentioned, Some(Sufficiency::Sufficient)) => Ok(GapState::SufficientNotRecovered),
            (Mention::Mentioned, Some(Sufficiency::Uncertain)) => Ok(GapState::Uncertain),
            (Mention::Mentioned, None) => Err("mentioned, but no sufficiency label".into()),
            (_, Some(_)) => Err("a sufficiency label on an atom not mentioned".into()),
        }
    }
}

/// Cohen's κ of paired labels: `(p_o − p_e) / (1 − p_e)`. `None` without pairs, or when chance
/// agreement is total (both raters gave one and the same label to everything).
pub fn cohen_kappa<T: Ord + Copy>(pairs: &[(T, T)]) -> Option<f64> {
    if pairs.is_empty() {
        return None;
    }
    let n = pairs.len() as f64;
    let observed = pairs.iter().filter(|(a, b)| a == b).count() as f64 / n;
    let mut first: BTreeMap<T, f64> = BTreeMap::new();
    let mut second: BTreeMap<T, f64> = BTreeMap::new();
    for (a, b) in pairs {
        *first.entry(*a).or_default() += 1.0;
        *second.entry(*b).or_default() += 1.0;
    }
    let expected: f64 = first.iter().map(|(label, x)| x / n * second.get(label).copied().unwrap_or(0.0) / n).sum();
    (expected < 1.0).then(|| (observed - expected) / (1.0 - expected))
}

/// The two annotators' agreement.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Agreement {
    /// Atoms both labelled.
    pub atoms: u32,
    pub mention_kappa: Option<f64>,
    /// Atoms both said were mentioned (the sufficiency κ's population).
    pub both_mentioned: u32,
    pub sufficiency_kappa: Option<f64>,
}

/// κ on mention over the atoms both annotators labelled, and on sufficiency over those both said
/// were mentioned.
pub fn agreement(a: &BTreeMap<String, Label>, b: &BTreeMap<String, Label>) -> Agreement {
    let both: Vec<(&Label, &Label)> = a.iter().filter_map(|(probe, la)| Some((la, b.get(probe)?))).collect();
    let mention: Vec<(Mention, Mention)> = both.iter().map(|(x, y)| (x.mention, y.mention)).collect();
    let sufficiency: Vec<(Sufficiency, Sufficiency)> = both
        .iter()
        .filter_map(|(x, y)| match (x.mention, y.mention) {
            (Mention::Mentioned, Mention::Mentioned) => Some((x.sufficiency?, y.sufficiency?)),
            _ => None,
        })
        .collect();
    Agreement {
        atoms: both.len() as u32,
        mention_kappa: cohen_kappa(&mention),
        both_mentioned: sufficiency.len() as u32,
        sufficiency_kappa: cohen_kappa(&sufficiency),
    }
}

/// One state's share of the gap mass with its task-cluster interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StateShare {
    pub state: GapState,
    /// Sampled atoms labelled in this state.
    pub atoms: u32,
    pub share: f64,
    pub ci: Option<Ci>,
}

/// One annotator's shares of the gap mass by state (Table 22's column): Hájek ratios over the
/// sampled atoms weighted by mass / inclusion probability, with percentile intervals from `draws`
/// task-cluster resamples (ChaCha8 from `seed`). Every sampled atom needs a valid label; an atom
/// labelled but not in the sample is an error too (a label file for another sample).
pub fn state_shares(
    sample: &AnnotationSample,
    labels: &BTreeMap<String, Label>,
    draws: u32,
    seed: u64,
    confidence: f64,
) -> Result<Vec<StateShare>, TaskStateError> {
    let sampled: BTreeSet<&str> = sample.atoms.iter().map(|s| s.atom.probe.as_str()).collect();
    if let Some(stray) = labels.keys().find(|p| !sampled.contains(p.as_str())) {
        return Err(TaskStateError::Input(format!("the label of probe {stray}: it is not in the annotation sample")));
    }
    let width = GapState::ALL.len();
    let mut by_task: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut counts = [0u32; GapState::ALL.len()];
    for s in &sample.atoms {
        let label = labels.get(&s.atom.probe).ok_or_else(|| {
            TaskStateError::Input(format!("probe {} of the annotation sample has no label", s.atom.probe))
        })?;
        let state =
            label.state().map_err(|e| TaskStateError::Input(format!("the label of probe {}: {e}", s.atom.probe)))?;
        if !(s.inclusion > 0.0 && s.inclusion <= 1.0) {
            return Err(TaskStateError::Input(format!(
                "probe {}: inclusion probability {} is not in (0, 1]",
                s.atom.probe, s.inclusion
            )));
        }
        let i = GapState::ALL.iter().position(|x| *x == state).expect("every state is listed");
        counts[i] += 1;
        by_task.entry(s.atom.task.as_str()).or_insert_with(|| vec![0.0; width])[i] += s.atom.mass / s.inclusion;
    }
    let clusters: Vec<Vec<f64>> = by_task.into_values().collect();
    let total: Vec<f64> = (0..width).map(|i| clusters.iter().map(|c| c[i]).sum()).collect();
    let all: f64 = total.iter().sum();
    let stats: Vec<Statistic> = (0..width)
        .map(|i| {
            Box::new(move |s: &[f64]| {
                let all: f64 = s.iter().sum();
                (all > 0.0).then(|| s[i] / all)
            }) as Statistic
        })
        .collect();
    let cis = cluster_percentile(&clusters, &stats, draws, seed, confidence);
    Ok(GapState::ALL
        .iter()
        .zip(cis)
        .enumerate()
        .map(|(i, (state, ci))| StateShare {
            state: *state,
            atoms: counts[i],
            share: if all > 0.0 { total[i] / all } else { 0.0 },
            // A state no sampled atom is in has no interval (Table 22's "—").
            ci: if counts[i] == 0 { None } else { ci },
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn atom(probe: &str, task: &str, category: Category, mass: f64) -> GapAtom {
        GapAtom { probe: probe.into(), task: task.into(), checkpoint: 1, category, mass }
    }

    fn label(mention: Mention, sufficiency: Option<Sufficiency>) -> Label {
        Label { mention, sufficiency }
    }

    #[test]
    fn gap_atoms_are_the_probes_the_full_context_recovers_better_than_the_reports() {
        use crate::task_state::records::{Credit, EligibilityFlags, ProbeRecord, StudyInput};
        use crate::task_state::settings::{EstimatorSettings, WeightScheme};
        let probe = |id: &str, full: f64, reports: f64| ProbeRecord {
            probe: id.into(),
            task: "t".into(),
            checkpoint: 2,
            category: Category::Failures,
            importance: 2,
            origin_turn: 1,
            flags: EligibilityFlags { well_formed: true, excluded: None },
            credits: BTreeMap::from([
                (View::Full, vec![Credit::try_from(full).unwrap()]),
                (View::Reports, vec![Credit::try_from(reports).unwrap()]),
            ]),
        };
        let input = StudyInput {
            checkpoints: vec![],
            probes: vec![
                probe("gap", 1.0, 0.0),
                probe("half", 1.0, 0.5),
                probe("none", 0.5, 0.5),
                probe("neg", 0.0, 1.0),
            ],
        };
        let settings = EstimatorSettings { weights: WeightScheme::Uniform, ..EstimatorSettings::ctxgap_1() };
        let pop = Population::eligible(&input, &settings, |_| true).unwrap();
        let atoms = gap_atoms(&pop, View::Full, View::Reports);
        let masses: Vec<(&str, f64)> = atoms.iter().map(|a| (a.probe.as_str(), a.mass)).collect();
        assert_eq!(masses, [("gap", 1.0), ("half", 0.5)]);
        // The masses are the gap's positive parts: the pooled gap times the total weight, plus
        // what the probe the reports recover better takes away (1).
        let gap = pop.point(crate::task_state::Quantity::gap_view(View::Reports)).unwrap();
        assert!((masses.iter().map(|(_, m)| m).sum::<f64>() - (gap * 4.0 + 1.0)).abs() < 1e-12, "{gap}");
    }

    #[test]
    fn cohens_kappa_is_agreement_beyond_chance() {
        // 50 items: both yes 20, both no 15, yes/no 5, no/yes 10: p_o = .7, p_e = .5·.6 + .5·.4 = .5.
        let mut pairs = vec![(true, true); 20];
        pairs.extend(vec![(false, false); 15]);
        pairs.extend(vec![(true, false); 5]);
        pairs.extend(vec![(false, true); 10]);
        assert!((cohen_kappa(&pairs).unwrap() - 0.4).abs() < 1e-12);
        assert_eq!(cohen_kappa(&[(1, 1), (2, 2)]), Some(1.0));
        assert_eq!(cohen_kappa::<u8>(&[]), None);
        assert_eq!(cohen_kappa(&[(1, 1), (1, 1)]), None, "one label everywhere: chance agreement is total");
    }

    #[test]
    fn agreement_takes_sufficiency_only_where_both_saw_a_mention() {
        use Mention::*;
        use Sufficiency::*;
        let a = BTreeMap::from([
            ("p1".to_string(), label(Mentioned, Some(Insufficient))),
            ("p2".to_string(), label(Mentioned, Some(Sufficient))),
            ("p3".to_string(), label(NotMentioned, None)),
            ("p4".to_string(), label(Mentioned, Some(Insufficient))),
        ]);
        let b = BTreeMap::from([
            ("p1".to_string(), label(Mentioned, Some(Insufficient))),
            ("p2".to_string(), label(Mentioned, Some(Sufficient))),
            ("p3".to_string(), label(NotMentioned, None)),
            ("p4".to_string(), label(NotMentioned, None)),
            ("p5".to_string(), label(NotMentioned, None)),
        ]);
        let g = agreement(&a, &b);
        assert_eq!((g.atoms, g.both_mentioned), (4, 2));
        assert_eq!(g.sufficiency_kappa, Some(1.0));
        // Mention: 3 of 4 agree; a: 3 mentioned / 1 not, b: 2 / 2 → p_e = .75·.5 + .25·.5 = .5.
        assert!((g.mention_kappa.unwrap() - 0.5).abs() < 1e-12);
    }

    #[test]
    fn labels_map_to_table_22s_states_and_bad_ones_are_refused() {
        use Mention::{Mentioned, NotMentioned};
        use Sufficiency::{Insufficient, Sufficient};
        assert_eq!(label(NotMentioned, None).state(), Ok(GapState::NotMentioned));
        assert_eq!(label(Mentioned, Some(Insufficient)).state(), Ok(GapState::MentionedInsufficient));
        assert_eq!(label(Mentioned, Some(Sufficient)).state(), Ok(GapState::SufficientNotRecovered));
        assert_eq!(label(Mentioned, Some(Sufficiency::Uncertain)).state(), Ok(GapState::Uncertain));
        assert_eq!(label(Mention::Uncertain, None).state(), Ok(GapState::Uncertain));
        assert!(label(Mentioned, None).state().is_err());
        assert!(label(NotMentioned, Some(Sufficient)).state().is_err());
    }

    #[test]
    fn the_sample_is_stratified_seeded_and_carries_inclusion_probabilities() {
        let mut atoms = Vec::new();
        for i in 0..30 {
            atoms.push(atom(&format!("f{i:02}"), &format!("t{}", i % 5), Category::Failures, 1.0));
        }
        for i in 0..3 {
            atoms.push(atom(&format!("r{i}"), "t0", Category::Risks, 2.0));
        }
        for i in 0..10 {
            atoms.push(atom(&format!("d{i}"), "t1", Category::Decisions, 0.5));
        }
        let s = stratified_sample(&atoms, 12, 0);
        assert_eq!(s.atoms.len(), 12);
        let strata: BTreeMap<Category, (u32, u32)> =
            s.strata.iter().map(|x| (x.category, (x.population, x.sampled))).collect();
        // Four each, but risks has only 3: the one left goes to the largest remaining stratum.
        assert_eq!(strata[&Category::Risks], (3, 3));
        assert_eq!(strata[&Category::Failures], (30, 5));
        assert_eq!(strata[&Category::Decisions], (10, 4));
        for a in &s.atoms {
            let st = strata[&a.atom.category];
            assert!((a.inclusion - st.1 as f64 / st.0 as f64).abs() < 1e-12);
        }
        assert_eq!(stratified_sample(&atoms, 12, 0), s, "the seed fixes the draw");
        let mut reversed = atoms.clone();
        reversed.reverse();
        assert_eq!(stratified_sample(&reversed, 12, 0), s, "the input's order does not");
        assert_ne!(stratified_sample(&atoms, 12, 1).atoms, s.atoms);
        assert_eq!(stratified_sample(&atoms, 1000, 0).atoms.len(), atoms.len(), "all of them at most");
        assert!(stratified_sample(&[], 10, 0).atoms.is_empty());
    }

    #[test]
    fn shares_are_inverse_probability_weighted_hajek_ratios_that_sum_to_one() {
        use Mention::*;
        use Sufficiency::*;
        // Stratum A sampled 1 in 4, stratum B 1 in 1.
        let sample = AnnotationSample {
            seed: 0,
            atoms: vec![
                SampledAtom { atom: atom("a1", "t1", Category::Failures, 1.0), inclusion: 0.25 },
                SampledAtom { atom: atom("a2", "t2", Category::Failures, 0.5), inclusion: 0.25 },
                SampledAtom { atom: atom("b1", "t1", Category::Risks, 2.0), inclusion: 1.0 },
                SampledAtom { atom: atom("b2", "t3", Category::Risks, 1.0), inclusion: 1.0 },
            ],
            strata: vec![],
        };
        let labels = BTreeMap::from([
            ("a1".to_string(), label(NotMentioned, None)),
            ("a2".to_string(), label(Mentioned, Some(Insufficient))),
            ("b1".to_string(), label(Mentioned, Some(Insufficient))),
            ("b2".to_string(), label(Mentioned, Some(Sufficient))),
        ]);
        let shares = state_shares(&sample, &labels, 2000, 0, 0.95).unwrap();
        // Weighted masses: a1 4, a2 2, b1 2, b2 1 → total 9.
        let by: BTreeMap<GapState, &StateShare> = shares.iter().map(|s| (s.state, s)).collect();
        assert!((by[&GapState::NotMentioned].share - 4.0 / 9.0).abs() < 1e-12);
        assert!((by[&GapState::MentionedInsufficient].share - 4.0 / 9.0).abs() < 1e-12);
        assert!((by[&GapState::SufficientNotRecovered].share - 1.0 / 9.0).abs() < 1e-12);
        assert_eq!((by[&GapState::Uncertain].share, by[&GapState::Uncertain].ci), (0.0, None), "Table 22's —");
        assert!((shares.iter().map(|s| s.share).sum::<f64>() - 1.0).abs() < 1e-12);
        for s in shares.iter().filter(|s| s.atoms > 0) {
            let ci = s.ci.unwrap();
            assert!(ci.lo <= s.share && s.share <= ci.hi && 0.0 <= ci.lo && ci.hi <= 1.0, "{s:?}");
        }
        assert_eq!(state_shares(&sample, &labels, 2000, 0, 0.95).unwrap(), shares, "seeded");

        let mut missing = labels.clone();
        missing.remove("b2");
        let e = state_shares(&sample, &missing, 10, 0, 0.95).unwrap_err().to_string();
        assert!(e.contains("probe b2") && e.contains("no label"), "{e}");
        let mut stray = labels.clone();
        stray.insert("zz".into(), label(NotMentioned, None));
        let e = state_shares(&sample, &stray, 10, 0, 0.95).unwrap_err().to_string();
        assert!(e.contains("probe zz") && e.contains("not in the annotation sample"), "{e}");
        let mut bad = labels;
        bad.insert("a1".into(), label(Mentioned, None));
        let e = state_shares(&sample, &bad, 10, 0, 0.95).unwrap_err().to_string();
        assert!(e.contains("probe a1") && e.contains("no sufficiency label"), "{e}");
    }
}

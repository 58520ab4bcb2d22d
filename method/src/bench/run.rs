//! Running the schedule benchmark: the schedules a list names, and every simulation of one
//! schedule, spread however the caller likes ([`Spread`]).

use super::simulate::{
    CurveResult, ScheduleReport, SuppliedCurve, SuppliedReport, group_reports, schedule_report, simulate,
    simulate_supplied,
};
use crate::Thresholds;
use crate::schedule::Variant;
use crate::schedule::variants::{VARIANTS, variant_by_name};
use crate::synthetic::Family;

/// How the benchmark runs its simulations, which are independent of each other: `f` of every job,
/// in the order of the jobs. [`InOrder`] runs them one after another on the calling thread; the
/// `vcurve` binary spreads them over the machine's cores. The results, and so the reports, are the
/// same either way.
pub trait Spread {
    fn map<J: Sync>(&self, jobs: &[J], f: &(dyn Fn(&J) -> CurveResult + Sync)) -> Vec<CurveResult>;
}

/// Every simulation in turn, on the calling thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct InOrder;

impl Spread for InOrder {
    fn map<J: Sync>(&self, jobs: &[J], f: &(dyn Fn(&J) -> CurveResult + Sync)) -> Vec<CurveResult> {
        jobs.iter().map(f).collect()
    }
}

/// Run `variant` on `per_family` curves of every family.
pub fn run(
    variant: &'static dyn Variant,
    params: &Thresholds,
    per_family: u64,
    seed: u64,
    spread: &impl Spread,
) -> ScheduleReport {
    run_families(variant, params, &Family::ALL, per_family, seed, spread)
}

/// Run `variant` on `per_family` curves of each of `families` (a family's curves are the same
/// whichever others run beside it).
pub fn run_families(
    variant: &'static dyn Variant,
    params: &Thresholds,
    families: &[Family],
    per_family: u64,
    seed: u64,
    spread: &impl Spread,
) -> ScheduleReport {
    let jobs: Vec<(Family, u64)> = families.iter().flat_map(|&f| (0..per_family).map(move |i| (f, i))).collect();
    let results = spread.map(&jobs, &|&(f, i): &(Family, u64)| simulate(variant, params, f, seed, i));
    schedule_report(variant.name(), &results)
}

/// Run `variant` on `replicates` replicates of every supplied curve. Replicate `r` of a curve has
/// the same outcomes under every schedule (they hash the seed, the curve's name, `r` and the key).
pub fn run_supplied(
    variant: &'static dyn Variant,
    params: &Thresholds,
    curves: &[SuppliedCurve],
    replicates: u64,
    seed: u64,
    spread: &impl Spread,
) -> SuppliedReport {
    let jobs: Vec<(&SuppliedCurve, u64)> = curves.iter().flat_map(|c| (0..replicates).map(move |r| (c, r))).collect();
    let results = spread.map(&jobs, &|&(c, r): &(&SuppliedCurve, u64)| simulate_supplied(variant, params, c, seed, r));
    SuppliedReport { schedule: variant.name(), groups: group_reports(&results) }
}

/// Why a list of schedules does not name schedules to run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleListError {
    #[error("the list has an empty name")]
    EmptyName,
    #[error("`all` stands alone (it already runs every schedule)")]
    AllNotAlone,
    #[error("unknown schedule {0:?}")]
    Unknown(String),
    #[error("the list names `{0}` twice")]
    Twice(String),
}

/// The schedules of a list: `all` (every variant, in [`VARIANTS`] order), or distinct variant
/// names separated by commas, in the order given.
pub fn schedule_list(list: &str) -> Result<Vec<&'static dyn Variant>, ScheduleListError> {
    if list.trim() == "all" {
        return Ok(VARIANTS.to_vec());
    }
    let mut chosen: Vec<&'static dyn Variant> = Vec::new();
    for name in list.split(',').map(str::trim) {
        if name.is_empty() {
            return Err(ScheduleListError::EmptyName);
        }
        if name == "all" {
            return Err(ScheduleListError::AllNotAlone);
        }
        let Some(variant) = variant_by_name(name) else {
            return Err(ScheduleListError::Unknown(name.to_string()));
        };
        if chosen.iter().any(|v| v.name() == name) {
            return Err(ScheduleListError::Twice(name.to_string()));
        }
        chosen.push(variant);
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_list_is_all_or_distinct_known_names() {
        let names = |list: &str| schedule_list(list).map(|v| v.iter().map(|v| v.name()).collect::<Vec<_>>());
        assert_eq!(names(" all ").unwrap().len(), VARIANTS.len());
        assert_eq!(names("screen-k4, paper").unwrap(), ["screen-k4", "paper"]);
        assert_eq!(names("paper,"), Err(ScheduleListError::EmptyName));
        assert_eq!(names("all,paper"), Err(ScheduleListError::AllNotAlone));
        assert_eq!(names("papr"), Err(ScheduleListError::Unknown("papr".into())));
        assert_eq!(names("paper,paper"), Err(ScheduleListError::Twice("paper".into())));
    }

    #[test]
    fn a_run_is_every_curve_of_every_family_in_order() {
        let (variant, params) = (variant_by_name("paper").unwrap(), &Thresholds::default());
        let results: Vec<CurveResult> =
            Family::ALL.iter().flat_map(|&f| (0..3).map(move |i| simulate(variant, params, f, 7, i))).collect();
        assert_eq!(run(variant, params, 3, 7, &InOrder), schedule_report("paper", &results));
        // A family's figures do not depend on the families beside it.
        let paper_only = run_families(variant, params, &Family::PAPER, 3, 7, &InOrder);
        let all = run(variant, params, 3, 7, &InOrder);
        assert_eq!(paper_only.families.len(), 4);
        for (family, report) in &paper_only.families {
            assert_eq!(report, &all.families[family], "{family}");
        }
    }
}

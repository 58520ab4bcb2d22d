//! `vcurve analyze`: the estimator on a points file, as one JSON object.

use serde::Serialize;
use vcurve_method::curve::Interval;
use vcurve_method::{CurveAnalysis, FittedPoint, Shape};

/// The JSON document `vcurve analyze` prints. Field names are part of the CLI's contract.
#[derive(Debug, Serialize)]
pub struct AnalyzeReport {
    pub length: u32,
    pub points: Vec<FittedPoint>,
    pub v0_fit: Option<f64>,
    pub t_star: Option<u32>,
    pub decisive_interval: Option<[u32; 2]>,
    pub decisive_drop: Option<f64>,
    pub concentration: Option<f64>,
    pub shape: Shape,
    pub onset: Option<u32>,
    pub onset_interval: Option<[u32; 2]>,
    pub onset_p_value: Option<f64>,
    pub pnr: u32,
    pub pnr_certified: bool,
    pub restart_point: Option<u32>,
}

fn pair(i: Option<Interval>) -> Option<[u32; 2]> {
    i.map(|i| [i.a, i.b])
}

impl From<CurveAnalysis> for AnalyzeReport {
    fn from(a: CurveAnalysis) -> Self {
        AnalyzeReport {
            length: a.length,
            v0_fit: a.v0_fit(),
            t_star: a.t_star,
            decisive_interval: pair(a.decisive_interval),
            decisive_drop: a.decisive_drop,
            concentration: a.concentration,
            shape: a.shape,
            onset: a.onset,
            onset_interval: pair(a.onset_interval),
            onset_p_value: a.onset_p_value,
            pnr: a.pnr,
            pnr_certified: a.pnr_certified,
            restart_point: a.restart_point,
            points: a.points,
        }
    }
}

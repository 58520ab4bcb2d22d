//! A small hand-made study through `analyze`, rendered and read back: the figure carries a bar per
//! measured view and the actor's line, the tables the numbers `analyze` gave, and what was not
//! measured says so.

use std::collections::BTreeMap;

use plotters::style::{BLACK, RGBColor};
use vcurve_method::task_state::{
    CheckpointRecord, Credit, EligibilityFlags, EstimatorSettings, ProbeRecord, StudyInput, TaskStateReport, View,
    analyze,
};

use super::figure::{ACTOR, LEGEND_HEIGHT, PRIOR, VIEW};
use super::*;

/// Views the study scored; the reports' additions (narration, headers, last outputs) are not.
const SCORED: [View; 7] = [
    View::LatestReport,
    View::Reports,
    View::Scrollback,
    View::FullMinusReasoning,
    View::Full,
    View::TaskOnly,
    View::Actor,
];

/// Four tasks, two checkpoints each, six probes per checkpoint; a view's recovery rises with its
/// reading depth, and varies by probe so the intervals have width.
fn input(views: &[View]) -> StudyInput {
    let mut checkpoints = Vec::new();
    let mut probes = Vec::new();
    for task in 0..4u32 {
        for k in 1..=2u32 {
            checkpoints.push(CheckpointRecord {
                task: format!("task-{task}"),
                checkpoint: k,
                fixed: Some(task != 3),
                view_chars: views.iter().map(|&v| (v, 1000 + 1500 * u64::from(task) + 10 * v as u64)).collect(),
                atoms: BTreeMap::from([(vcurve_method::task_state::Category::Facts, 10)]),
            });
            for i in 0..6u32 {
                let credits = views
                    .iter()
                    .map(|&v| {
                        let depth = match v {
                            View::TaskOnly => 0,
                            View::LatestReport => 1,
                            View::Reports => 2,
                            View::Scrollback => 3,
                            View::FullMinusReasoning => 4,
                            View::Full => 5,
                            _ => 6,
                        };
                        // Tasks differ in how much a view carries, so the task-cluster intervals have width.
                        let sample = |s: u32| match (i * 7 + s * 5 + task * 3 + k) % 7 + 1 < depth + task % 3 {
                            true => Credit::Full,
                            false if (i + s).is_multiple_of(2) => Credit::Partial,
                            false => Credit::None,
                        };
                        (v, (0..3).map(sample).collect())
                    })
                    .collect();
                probes.push(ProbeRecord {
                    probe: format!("t{task}-k{k}-p{i}"),
                    task: format!("task-{task}"),
                    checkpoint: k,
                    category: vcurve_method::task_state::Category::Facts,
                    // One atom below the minimum importance: left out of every estimate.
                    importance: if (task, k, i) == (0, 1, 5) { 1 } else { 2 + i % 2 },
                    origin_turn: if i % 3 == 0 { k } else { k - 1 },
                    flags: EligibilityFlags { well_formed: true, excluded: None },
                    credits,
                });
            }
        }
    }
    StudyInput { checkpoints, probes }
}

fn settings() -> EstimatorSettings {
    EstimatorSettings { bootstrap_draws: 400, decomposition_draws: 200, ..EstimatorSettings::ctxgap_1() }
}

fn report(views: &[View]) -> TaskStateReport {
    analyze(&input(views), &settings()).unwrap()
}

fn hex(c: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

struct Element {
    tag: String,
    attrs: BTreeMap<String, String>,
    text: String,
}

impl Element {
    fn attr(&self, name: &str) -> &str {
        self.attrs.get(name).map_or("", String::as_str)
    }

    fn points(&self) -> Vec<(f64, f64)> {
        self.attr("points")
            .split_whitespace()
            .map(|p| {
                let (x, y) = p.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect()
    }
}

fn elements(svg: &str) -> Vec<Element> {
    let doc = roxmltree::Document::parse(svg).expect("the figure is well-formed XML");
    assert_eq!(doc.root_element().attribute("width"), Some(WIDTH.to_string().as_str()));
    assert_eq!(doc.root_element().attribute("height"), Some(HEIGHT.to_string().as_str()));
    doc.root_element()
        .descendants()
        .filter(|n| n.is_element())
        .map(|n| Element {
            tag: n.tag_name().name().to_owned(),
            attrs: n.attributes().map(|a| (a.name().to_owned(), a.value().to_owned())).collect(),
            text: n.text().unwrap_or("").trim().to_owned(),
        })
        .collect()
}

/// Polylines of one colour above the legend.
fn in_plot(els: &[Element], colour: RGBColor) -> Vec<Vec<(f64, f64)>> {
    let legend = f64::from(HEIGHT - LEGEND_HEIGHT);
    els.iter()
        .filter(|e| e.tag == "polyline" && e.attr("stroke") == hex(colour))
        .map(Element::points)
        .filter(|p| p.iter().all(|&(_, y)| y < legend))
        .collect()
}

fn vertical(lines: Vec<Vec<(f64, f64)>>) -> Vec<Vec<(f64, f64)>> {
    lines.into_iter().filter(|p| p.len() == 2 && p[0].0 == p[1].0 && p[0].1 != p[1].1).collect()
}

fn texts(els: &[Element]) -> Vec<String> {
    els.iter().filter(|e| e.tag == "text").map(|e| e.text.clone()).collect()
}

/// The y axis's extent: the pixel rows of accuracy 1 and 0.
fn y_axis(els: &[Element]) -> (f64, f64) {
    let axis = vertical(in_plot(els, BLACK)).into_iter().min_by(|a, b| a[0].0.total_cmp(&b[0].0)).expect("a y axis");
    (axis[0].1.min(axis[1].1), axis[0].1.max(axis[1].1))
}

#[test]
fn one_error_bar_per_measured_view_in_reading_depth_order() {
    let r = report(&SCORED);
    let els = elements(&figure_svg(&r).unwrap());
    let (top, bottom) = y_axis(&els);
    let row = |y: f64| bottom - y * (bottom - top);
    let bars = vertical(in_plot(&els, VIEW));
    let text_views = [View::LatestReport, View::Reports, View::Scrollback, View::FullMinusReasoning, View::Full];
    assert_eq!(bars.len(), text_views.len(), "one bar per measured text view: {bars:?}");
    let mut last_x = f64::MIN;
    for (bar, view) in bars.iter().zip(text_views) {
        let e = r.views.iter().find(|v| v.view == view).unwrap().accuracy;
        let ci = e.ci.unwrap();
        assert!(bar[0].0 > last_x, "{view:?} right of the view before it");
        last_x = bar[0].0;
        let (hi, lo) = (bar[0].1.min(bar[1].1), bar[0].1.max(bar[1].1));
        assert!((lo - row(ci.lo)).abs() <= 1.5 && (hi - row(ci.hi)).abs() <= 1.5, "{view:?}: {bar:?} for {ci:?}");
        let dot = els
            .iter()
            .find(|d| {
                d.tag == "circle" && d.attr("fill") == hex(VIEW) && d.attr("cx").parse::<f64>().unwrap() == bar[0].0
            })
            .unwrap_or_else(|| panic!("a dot on {view:?}'s bar"));
        let cy: f64 = dot.attr("cy").parse().unwrap();
        assert!((cy - row(e.value.unwrap())).abs() <= 1.5, "{view:?}: dot at {cy}");
    }
    let prior = vertical(in_plot(&els, PRIOR));
    assert_eq!(prior.len(), 1, "the task-only prior's bar");
    assert!(prior[0][0].0 > last_x, "the prior apart at the right");
}

#[test]
fn the_actor_is_a_line_across_the_plot_with_its_band_and_gaps_above_the_views() {
    let r = report(&SCORED);
    let els = elements(&figure_svg(&r).unwrap());
    let (top, bottom) = y_axis(&els);
    let actor = r.views.iter().find(|v| v.view == View::Actor).unwrap();
    let a = actor.accuracy.value.unwrap();
    let lines: Vec<_> = in_plot(&els, ACTOR).into_iter().filter(|p| p.len() == 2 && p[0].1 == p[1].1).collect();
    assert_eq!(lines.len(), 1, "one actor line: {lines:?}");
    assert!((lines[0][0].1 - (bottom - a * (bottom - top))).abs() <= 1.5);
    assert!((lines[0][1].0 - lines[0][0].0).abs() > f64::from(WIDTH) * 0.8, "across the plot");
    let band = els.iter().filter(|e| e.tag == "rect" && e.attr("fill") == hex(ACTOR)).count();
    assert_eq!(band, 2, "the band in the plot and in the legend");
    let all = texts(&els);
    for row in r.views.iter().filter(|v| v.view != View::Actor) {
        let gap = format!("{:.3}", row.gap_actor.value.unwrap());
        assert!(all.contains(&gap), "{:?}'s gap {gap} among {all:?}", row.view);
    }
    let ci = actor.accuracy.ci.unwrap();
    let legend = format!("actor A = {a:.3} [{:.3}, {:.3}]", ci.lo, ci.hi);
    assert!(all.contains(&legend), "{legend} among {all:?}");
}

#[test]
fn views_not_measured_are_left_out_and_named() {
    let r = report(&SCORED);
    let all = texts(&elements(&figure_svg(&r).unwrap()));
    assert!(!all.iter().any(|t| t == "narration" || t == "headers" || t == "last 3"), "{all:?}");
    let missing =
        "not measured (left out): U + narration, U + command headers, U + last 3 outputs, U + last 10 outputs";
    assert!(all.iter().any(|t| t == missing), "{all:?}");
    assert!(figure_caption(&r).contains("Not measured (left out): U + narration"));

    // Without the actor and the prior: no line, no gaps, and the legend says so.
    let r = report(&[View::Reports, View::Scrollback, View::Full]);
    let els = elements(&figure_svg(&r).unwrap());
    assert!(in_plot(&els, ACTOR).is_empty());
    assert!(vertical(in_plot(&els, PRIOR)).is_empty());
    assert_eq!(vertical(in_plot(&els, VIEW)).len(), 3);
    let all = texts(&els);
    assert!(all.iter().any(|t| t == "actor A not measured"), "{all:?}");
    let first = all.iter().position(|t| t.starts_with("not measured (left out): latest report,")).unwrap();
    let listed = format!("{} {}", all[first], all[first + 1]);
    assert_eq!(
        listed,
        "not measured (left out): latest report, U + narration, U + command headers, U + last 3 outputs, U + last 10 outputs, T_minusR, task only"
    );
}

#[test]
fn the_png_decodes_at_the_figure_size_and_both_formats_are_deterministic() {
    let r = report(&SCORED);
    let bytes = figure_png(&r).unwrap();
    let decoder = png::Decoder::new(std::io::Cursor::new(&bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!((info.width, info.height), (WIDTH, HEIGHT));
    let channels = info.color_type.samples();
    let rgb: Vec<&[u8]> = pixels[..info.buffer_size()].chunks(channels).collect();
    assert!(rgb.iter().any(|p| p[..3] == [255, 255, 255]));
    assert!(rgb.iter().any(|p| p[..3].iter().all(|&c| c < 80)));
    let again = report(&SCORED);
    assert_eq!(figure_png(&again).unwrap(), bytes);
    assert_eq!(figure_svg(&again).unwrap(), figure_svg(&r).unwrap());
}

#[test]
fn the_markdown_carries_the_numbers_analyze_gave() {
    use super::tables::thousands;
    let r = report(&SCORED);
    let md = tables_markdown(&r, None);
    if let Ok(dir) = std::env::var("VCURVE_TASK_STATE_FIGURE_DIR") {
        std::fs::write(format!("{dir}/task_state.md"), &md).unwrap();
        std::fs::write(format!("{dir}/task_state.svg"), figure_svg(&r).unwrap()).unwrap();
        std::fs::write(format!("{dir}/task_state.png"), figure_png(&r).unwrap()).unwrap();
    }
    let u = r.views.iter().find(|v| v.view == View::Reports).unwrap();
    let ci = u.accuracy.ci.unwrap();
    let gap = u.gap_view;
    for needle in [
        format!("| U | {} | {} | {:.3} | [{:.3}, {:.3}] |", thousands(u.mean_chars.unwrap(), 1), u.accuracy.probes, u.accuracy.value.unwrap(), ci.lo, ci.hi),
        format!("| Gap_view | {:.3} | [{:.3}, {:.3}] |", gap.value.unwrap(), gap.ci.unwrap().lo, gap.ci.unwrap().hi),
        format!("| Gap_actor | {:.3} |", u.gap_actor.value.unwrap()),
        "| U + narration | not measured | not measured | not measured | not measured | not measured | not measured | not measured |"
            .to_string(),
        "| probes generated | 48 |".to_string(),
        "| probes eligible | 47 |".to_string(),
        "| left out: below min importance | 1 |".to_string(),
        "| scored samples: U + last 3 outputs | not measured |".to_string(),
    ] {
        assert!(md.contains(&needle), "{needle}\n{md}");
    }
    let d = r.decomposition.as_ref().unwrap();
    for row in &d.rows {
        assert!(md.contains(&format!("| {} | {:.4} |", row.view.symbol(), row.accuracy)), "{row:?}");
        if let Some(share) = row.share {
            assert!(md.contains(&format!("{:.1}%", 100.0 * share)), "{row:?}");
        }
    }
    for k in &r.checkpoints {
        assert!(md.contains(&format!("| {} | 4 | {} | {:.3} |", k.checkpoint, k.probes, k.fresh)), "{k:?}\n{md}");
    }
    let fixed =
        r.outcomes.iter().find(|o| o.subset == vcurve_method::task_state::tables::Subset::FixedAtFinal).unwrap();
    assert!(md.contains(&format!("| Fixed; final k | {} | 3 |", fixed.gap_view.probes)), "{md}");
    for line in md.lines().filter(|l| l.starts_with("| U + narration |")) {
        assert!(!line.contains("0.000"), "nothing unmeasured reads 0: {line}");
    }
}

#[test]
fn an_empty_study_prints_not_measured_and_still_draws() {
    let input = StudyInput {
        checkpoints: vec![CheckpointRecord {
            task: "t".into(),
            checkpoint: 1,
            fixed: None,
            view_chars: BTreeMap::new(),
            atoms: BTreeMap::new(),
        }],
        probes: vec![],
    };
    let r = analyze(&input, &settings()).unwrap();
    let md = tables_markdown(&r, None);
    assert!(md.contains("| Reports U | not measured | not measured | not measured | not measured |"), "{md}");
    assert!(md.contains("## Telescoping decomposition") && md.contains("(not measured)"), "{md}");
    let els = elements(&figure_svg(&r).unwrap());
    assert!(vertical(in_plot(&els, VIEW)).is_empty());
    assert!(texts(&els).iter().any(|t| t.starts_with("not measured (left out): latest report, U,")));
}

#[test]
fn usage_by_stage_prints_when_given() {
    use vcurve_method::task_state::usage::{CallOutcome, CallRecord, GroupBy, Purpose, Sampling, Stage, Tokens, usage};
    let calls: Vec<CallRecord> = [(Stage::Reader, 1200, Some(0.7)), (Stage::Judge, 300, None)]
        .into_iter()
        .map(|(stage, input, temperature)| CallRecord {
            call: format!("{stage:?}"),
            attempt: 1,
            stage,
            purpose: Purpose::Core,
            model: "m".into(),
            endpoint: "http://127.0.0.1:1/v1".into(),
            template: "t".into(),
            template_hash: "sha256:0".into(),
            sampling: Sampling { temperature, ..Sampling::default() },
            tokens: Some(Tokens { input, output: 20, cached: 0 }),
            latency_ms: 50,
            outcome: CallOutcome::Success,
        })
        .collect();
    let rows = usage(&calls, GroupBy::Stage).unwrap();
    let r = report(&SCORED);
    let md = tables_markdown(&r, Some(&rows));
    assert!(md.contains("| reader | 1 | 1 | 0 | 0 | 1,200 / 20 / 0 | 1,200 / 20 / 0 | 50 | 0.7: 1 |"), "{md}");
    assert!(md.contains("| judge | 1 | 1 | 0 | 0 | 300 / 20 / 0 |") && md.contains("unknown: 1"), "{md}");
    assert!(!tables_markdown(&r, None).contains("Model calls by stage"));
}

#[test]
fn the_html_section_inlines_the_figure_and_every_table() {
    let r = report(&SCORED);
    let html = html_section(&r, None).unwrap();
    assert!(html.starts_with("<section id=\"task_state\">") && !html.contains("<?xml"));
    assert_eq!(html.matches("<svg").count(), 1);
    for t in tables(&r, None) {
        assert!(html.contains(&format!("<h2 id=\"{}\">", t.name)), "{}", t.name);
    }
}

#[test]
fn thousands_group_digits() {
    use super::tables::thousands;
    assert_eq!(thousands(2565.06, 1), "2,565.1");
    assert_eq!(thousands(18256.3, 1), "18,256.3");
    assert_eq!(thousands(999.0, 0), "999");
    assert_eq!(thousands(1234567.0, 0), "1,234,567");
}

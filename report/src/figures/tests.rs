//! The figure of a known curve, rendered and read back: every element the paper's figures carry is
//! found in the SVG where the curve's numbers put it.

use std::collections::BTreeMap;

use plotters::style::RGBColor;
use vcurve_method::schedule::{Series, Stage};
use vcurve_method::{Point, Thresholds, analyze};

use super::*;
use crate::export::TrajectoryResult;
use vcurve_record::TrajectoryState;

/// Plotters rounds every coordinate to a whole pixel.
const PIXEL: f64 = 1.0;

/// A curve shaped like the paper's django-11555 s2 (Table 9: T = 88, decisive interval (34, 35],
/// point of no return 71), with its judges' labels (Tables 11–12) and one "no mistake" answer.
fn known() -> CurveFigure {
    let length = 88;
    let counts = [
        (0, 16, 8),
        (5, 8, 4),
        (10, 8, 4),
        (15, 8, 3),
        (20, 8, 4),
        (25, 8, 3),
        (30, 8, 3),
        (33, 8, 3),
        (34, 32, 12),
        (35, 32, 3),
        (40, 8, 1),
        (45, 8, 1),
        (50, 8, 0),
        (60, 8, 1),
        (70, 24, 1),
        (71, 24, 0),
        (80, 24, 0),
        (87, 24, 0),
    ];
    let points: Vec<Point> = counts.iter().map(|&(t, n, successes)| Point { t, n, successes }).collect();
    let a = analyze(length, &points, None, 100, &Thresholds::default()).unwrap();
    assert_eq!(a.decisive_interval.map(|i| (i.a, i.b)), Some((34, 35)));
    assert_eq!((a.pnr, a.pnr_certified), (71, true));
    CurveFigure {
        trajectory: "django-11555 s2".into(),
        shape: Some(a.shape),
        concentration: a.concentration,
        length,
        v0: a.v0_fit(),
        points: a.points.clone(),
        decisive: a.decisive_interval.map(|i| (i.a, i.b)),
        pnr: Some(a.pnr),
        pnr_certified: a.pnr_certified,
        labels: vec![
            ("GPT-6.1 Sol".into(), Some(13)),
            ("GPT-6 Astra".into(), Some(13)),
            ("GPT-5.5".into(), Some(56)),
            ("OpenAI o3".into(), Some(44)),
            ("GPT-6 Luna".into(), None),
        ],
    }
}

fn hex(c: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

fn close(actual: f64, expected: f64) -> bool {
    (actual - expected).abs() <= PIXEL
}

/// One drawn element of the SVG, with the attributes the checks read.
#[derive(Debug, Clone)]
struct Element {
    tag: String,
    attrs: BTreeMap<String, String>,
    text: String,
}

impl Element {
    fn attr(&self, name: &str) -> &str {
        self.attrs.get(name).map_or("", String::as_str)
    }

    fn num(&self, name: &str) -> f64 {
        self.attr(name).parse().unwrap_or_else(|_| panic!("{name} of {self:?} is a number"))
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

/// Parse the SVG and list its elements in drawing order.
fn elements(svg: &str) -> Vec<Element> {
    let doc = roxmltree::Document::parse(svg).expect("the figure is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    assert_eq!(doc.root_element().attribute("width"), Some("640"));
    assert_eq!(doc.root_element().attribute("height"), Some("400"));
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

/// The polylines of one colour that lie inside the plot's frame (the legend's samples lie outside).
fn polylines_in_frame(elements: &[Element], colour: RGBColor, frame: &Frame) -> Vec<Vec<(f64, f64)>> {
    elements
        .iter()
        .filter(|e| e.tag == "polyline" && e.attr("stroke") == hex(colour))
        .map(Element::points)
        .filter(|pts| pts.iter().all(|&(x, _)| x <= f64::from(frame.right) + PIXEL))
        .collect()
}

fn texts(elements: &[Element]) -> Vec<String> {
    elements.iter().filter(|e| e.tag == "text").map(|e| e.text.clone()).collect()
}

#[test]
fn the_axes_frame_the_plot_where_the_layout_says() {
    let f = known();
    let frame = Frame::of(f.length);
    let els = elements(&f.svg());
    let axes = polylines_in_frame(&els, BLACK, &frame);
    let (left, right) = (f64::from(frame.left), f64::from(frame.right));
    let (top, bottom) = (f64::from(frame.top), f64::from(frame.bottom));
    assert!(
        axes.iter().any(|p| p.len() == 2
            && p.iter().all(|&(x, _)| close(x, left - 1.0))
            && close(p[0].1.min(p[1].1), top)
            && close(p[0].1.max(p[1].1), bottom)),
        "a y axis along the frame's left edge: {axes:?}"
    );
    assert!(
        axes.iter().any(|p| p.len() == 2
            && p.iter().all(|&(_, y)| close(y, bottom + 1.0))
            && close(p[0].0.min(p[1].0), left)
            && close(p[0].0.max(p[1].0), right)),
        "an x axis along the frame's bottom edge: {axes:?}"
    );
    let all = texts(&els);
    for label in ["step t", "V(hₜ)", "0.0", "0.4", "1.0", "0", "40", "80"] {
        assert!(all.iter().any(|t| t == label), "{label:?} among {all:?}");
    }
    assert!(!all.iter().any(|t| t == "1.2" || t == "-0.2"), "y runs over [0, 1]: {all:?}");
}

#[test]
fn one_wilson_bar_and_one_estimate_per_point() {
    let f = known();
    let frame = Frame::of(f.length);
    let els = elements(&f.svg());
    let vertical: Vec<_> = polylines_in_frame(&els, ESTIMATE, &frame)
        .into_iter()
        .filter(|p| p.len() == 2 && p[0].0 == p[1].0 && p[0].1 != p[1].1)
        .collect();
    assert_eq!(vertical.len(), f.points.len(), "one vertical bar per point");
    for p in &f.points {
        let x = frame.x(f64::from(p.t));
        let bar = vertical
            .iter()
            .find(|b| close(b[0].0, x) && close(b[0].1, frame.y(p.wilson_lo)) && close(b[1].1, frame.y(p.wilson_hi)));
        assert!(bar.is_some(), "a bar at t = {} from {} to {}", p.t, p.wilson_lo, p.wilson_hi);
    }
    let dots: Vec<&Element> = els
        .iter()
        .filter(|e| e.tag == "circle" && e.attr("fill") == hex(ESTIMATE) && e.num("cx") <= f64::from(frame.right))
        .collect();
    assert_eq!(dots.len(), f.points.len());
    for (dot, p) in dots.iter().zip(&f.points) {
        assert!(
            close(dot.num("cx"), frame.x(f64::from(p.t))) && close(dot.num("cy"), frame.y(p.v_hat)),
            "{dot:?} {p:?}"
        );
    }
}

#[test]
fn the_fit_runs_through_every_point_to_the_terminal_zero() {
    let f = known();
    let frame = Frame::of(f.length);
    let fits = polylines_in_frame(&elements(&f.svg()), FIT, &frame);
    assert_eq!(fits.len(), 1, "one fit line: {fits:?}");
    let line = &fits[0];
    assert_eq!(line.len(), f.points.len() + 1);
    for (&(x, y), p) in line.iter().zip(&f.points) {
        assert!(close(x, frame.x(f64::from(p.t))) && close(y, frame.y(p.v_fit)), "({x}, {y}) for {p:?}");
    }
    let &(x_end, y_end) = line.last().unwrap();
    assert!(close(x_end, frame.x(f64::from(f.length))), "ends at x(T): {x_end}");
    assert!(close(y_end, frame.y(0.0)), "ends at y(0): {y_end}");
}

#[test]
fn the_decisive_interval_is_shaded_from_a_to_b() {
    let f = known();
    let frame = Frame::of(f.length);
    let els = elements(&f.svg());
    let shaded: Vec<&Element> = els
        .iter()
        .filter(|e| e.tag == "rect" && e.attr("fill") == hex(DECISIVE) && e.num("x") <= f64::from(frame.right))
        .collect();
    assert_eq!(shaded.len(), 1);
    let r = shaded[0];
    let (x, w, y, h) = (r.num("x"), r.num("width"), r.num("y"), r.num("height"));
    assert!(close(x, frame.x(34.0)) && close(x + w, frame.x(35.0)), "spans x(34)..x(35): {x}..{}", x + w);
    assert!(close(y, frame.y(1.0)) && close(y + h, frame.y(0.0)), "spans the whole height: {y}..{}", y + h);
    assert!(r.num("opacity") < 0.5, "translucent");
    assert!(texts(&els).iter().any(|t| t == "decisive (34, 35]"));
}

#[test]
fn a_certified_point_of_no_return_is_a_dotted_line_at_its_step() {
    let f = known();
    let frame = Frame::of(f.length);
    let els = elements(&f.svg());
    let dashes = polylines_in_frame(&els, PNR, &frame);
    assert!(dashes.len() > 20, "a dotted line is many short dashes: {}", dashes.len());
    let x = frame.x(71.0);
    assert!(dashes.iter().flatten().all(|&(dx, _)| close(dx, x)), "every dash at x(71) = {x}");
    let ys: Vec<f64> = dashes.iter().flatten().map(|&(_, y)| y).collect();
    let (lo, hi) = ys.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &y| (lo.min(y), hi.max(y)));
    let dash = f64::from(DOT + DOT_GAP);
    assert!(close(hi, frame.y(0.0)) && (lo - frame.y(1.0)).abs() <= dash, "from V = 0 up to V = 1: {lo}..{hi}");
    let inked: f64 = dashes.iter().map(|d| (d[1].1 - d[0].1).abs()).sum();
    assert!(inked < 0.7 * (hi - lo), "with gaps between the dashes: {inked} of {}", hi - lo);
    assert!(texts(&els).iter().any(|t| t == "PNR 71 (certified)"));
}

#[test]
fn an_uncertified_point_of_no_return_is_not_drawn_and_the_legend_says_so() {
    let f = CurveFigure { pnr: Some(88), pnr_certified: false, ..known() };
    let frame = Frame::of(f.length);
    let els = elements(&f.svg());
    assert!(polylines_in_frame(&els, PNR, &frame).is_empty());
    let all = texts(&els);
    assert!(all.iter().any(|t| t == "PNR not certified"), "{all:?}");
    assert!(!all.iter().any(|t| t.contains("(certified)")));
}

#[test]
fn each_label_is_a_triangle_of_its_source_above_the_axis_between_its_steps() {
    let f = known();
    let frame = Frame::of(f.length);
    let els = elements(&f.svg());
    // Sources in name order: GPT-5.5, GPT-6 Astra, GPT-6 Luna, GPT-6.1 Sol, OpenAI o3.
    let expected = [
        ("GPT-5.5", 0, Some(56)),
        ("GPT-6 Astra", 1, Some(13)),
        ("GPT-6 Luna", 2, None),
        ("GPT-6.1 Sol", 3, Some(13)),
        ("OpenAI o3", 4, Some(44)),
    ];
    for (source, row, m) in expected {
        let colour = hex(SOURCE_COLOURS[row]);
        let triangles: Vec<Vec<(f64, f64)>> = els
            .iter()
            .filter(|e| e.tag == "polygon" && e.attr("fill") == colour)
            .map(Element::points)
            .filter(|pts| pts.iter().all(|&(x, _)| x <= f64::from(frame.right)))
            .collect();
        let Some(m) = m else {
            assert!(triangles.is_empty(), "{source} said no mistake: no triangle in the plot");
            assert!(texts(&els).iter().any(|t| t == &format!("{source}: no mistake")));
            continue;
        };
        assert_eq!(triangles.len(), 1, "{source}: one triangle");
        let tri = &triangles[0];
        assert_eq!(tri.len(), 3);
        let centre = tri.iter().map(|p| p.0).sum::<f64>() / 3.0;
        assert!(close(centre, frame.x(f64::from(m) - 0.5)), "{source}: at x({m} − 0.5), found {centre}");
        assert!(
            tri.iter().all(|&(_, y)| y < frame.y(0.0) && y > frame.y(0.5)),
            "{source}: just above the axis: {tri:?}"
        );
        assert!(texts(&els).iter().any(|t| t == &format!("{source}: m = {m}")));
    }
    // GPT-6 Astra and GPT-6.1 Sol agree on step 13 and are drawn on different rows.
    let at_13: Vec<f64> = els
        .iter()
        .filter(|e| e.tag == "polygon")
        .map(Element::points)
        .filter(|pts| close(pts.iter().map(|p| p.0).sum::<f64>() / 3.0, frame.x(12.5)))
        .map(|pts| pts[0].1)
        .collect();
    assert_eq!(at_13.len(), 2);
    assert!((at_13[0] - at_13[1]).abs() >= f64::from(TRIANGLE_HEIGHT), "not on top of each other: {at_13:?}");
}

#[test]
fn colours_follow_the_sources_names_not_their_order() {
    let f = known();
    let mut shuffled = f.clone();
    shuffled.labels.reverse();
    assert_eq!(f.svg(), shuffled.svg());
}

#[test]
fn the_title_carries_the_trajectory_shape_c_t_and_v0() {
    let f = known();
    let title = f.title();
    assert_eq!(title, "django-11555 s2 · cliff, C = 0.54, T = 88, V(h₀) = 0.50");
    let els = elements(&f.svg());
    assert!(texts(&els).contains(&title));
    let flat = CurveFigure { shape: Some(Shape::Flat), concentration: None, v0: None, ..known() };
    assert_eq!(flat.title(), "django-11555 s2 · flat, C = –, T = 88, V(h₀) = –");
}

#[test]
fn text_is_legible_at_column_width() {
    // 640 px across a 3.3 in column is about 194 px per inch: 11 px is the smallest readable text.
    let els = elements(&known().svg());
    for t in els.iter().filter(|e| e.tag == "text") {
        assert!(t.num("font-size") >= 11.0, "{:?} at {} px", t.text, t.num("font-size"));
    }
    let long = CurveFigure { trajectory: "scikit-learn-13439-with-a-long-name s2".into(), ..known() };
    for t in elements(&long.svg()).iter().filter(|e| e.tag == "text") {
        assert!(t.num("font-size") >= 11.0);
    }
}

#[test]
fn names_too_long_for_their_place_are_shortened_not_cut() {
    let f = CurveFigure {
        trajectory: format!("{} s2", "astropy-".repeat(12)),
        labels: vec![("A judge with a very long model name, version 2".into(), None)],
        ..known()
    };
    let all = texts(&elements(&f.svg()));
    assert!(
        all.iter().any(|t| t.starts_with("astropy-") && t.ends_with("… · cliff, C = 0.54, T = 88, V(h₀) = 0.50")),
        "{all:?}"
    );
    assert!(all.iter().any(|t| t.starts_with("A judge") && t.ends_with("…: no mistake")), "{all:?}");
}

#[test]
fn a_short_trajectory_has_whole_step_ticks() {
    let f = CurveFigure {
        length: 3,
        points: known().points.into_iter().filter(|p| p.t < 3).collect(),
        decisive: None,
        pnr: None,
        pnr_certified: false,
        labels: vec![("GPT-5.5".into(), Some(2))],
        ..known()
    };
    let all = texts(&elements(&f.svg()));
    let ticks: Vec<&String> = all.iter().filter(|t| t.parse::<i64>().is_ok()).collect();
    assert_eq!(ticks, ["0", "1", "2", "3"]);
    assert!(all.iter().any(|t| t == "no decisive interval"));
}

#[test]
fn the_png_decodes_to_the_figure_size_and_both_formats_are_deterministic() {
    let f = known();
    let bytes = f.png().unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let decoder = png::Decoder::new(std::io::Cursor::new(&bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!((info.width, info.height), (WIDTH, HEIGHT));
    // Not blank: the white background and dark ink both occur.
    let channels = info.color_type.samples();
    let rgb: Vec<&[u8]> = pixels[..info.buffer_size()].chunks(channels).collect();
    assert!(rgb.iter().any(|p| p[..3] == [255, 255, 255]));
    assert!(rgb.iter().any(|p| p[..3].iter().all(|&c| c < 80)));
    assert_eq!(f.png().unwrap(), bytes);
    assert_eq!(f.svg(), f.svg());
}

fn result(state: TrajectoryState, main: Vec<vcurve_method::FittedPoint>) -> TrajectoryResult {
    let f = known();
    TrajectoryResult {
        trajectory: f.trajectory.clone(),
        task: "django__django-11555".into(),
        state,
        stage: Stage::Done,
        length: f.length,
        shape: f.shape,
        v0_fit: f.v0,
        concentration: f.concentration,
        t_star: Some(35),
        decisive_a: Some(34),
        decisive_b: Some(35),
        onset: None,
        pnr: Some(71),
        pnr_certified: Some(true),
        restart_point: None,
        continuations: 0,
        retired: 0,
        cap_hits: 0,
        continuations_by_stage: BTreeMap::new(),
        labels: f.labels.clone(),
        series: if main.is_empty() { BTreeMap::new() } else { BTreeMap::from([(Series::Main, main)]) },
        base_runs: Default::default(),
        controls: Default::default(),
        first_edit: Default::default(),
        first_symptom: Default::default(),
        first_edit_source: None,
        non_replayable: None,
        replay: None,
        recorded: None,
    }
}

#[test]
fn a_figure_is_built_from_an_exported_trajectory_with_a_main_series() {
    let f = known();
    assert_eq!(CurveFigure::from_result(&result(TrajectoryState::Done, f.points.clone())), Some(f.clone()));
    assert_eq!(CurveFigure::from_result(&result(TrajectoryState::Doomed, f.points.clone())), None);
    assert_eq!(CurveFigure::from_result(&result(TrajectoryState::Running, Vec::new())), None);
}

//! The study's Figure 2: recovery by reading depth.
//!
//! - one dot per measured text view, in reading-depth order ([`View::ALL`]: latest report, `U`,
//!   `U` + narration, + command headers, + last 3 outputs, + last 10 outputs, `V`, `T_minusR`,
//!   `T`), with its 95% issue-clustered bootstrap interval as an error bar;
//! - the task-only prior as a hollow dot with its bar, set apart right of a dashed divider: it is
//!   no reading depth, the floor a reader reaches without any view;
//! - the actor's accuracy `A` as a horizontal line across the plot with its interval as a band;
//! - above each view, in the actor's purple, `Gap_actor = A − view` (the paper's purple
//!   annotations);
//! - a view without a value is left out, never drawn at 0, and the legend names it "not measured".
//!
//! Drawn as [`crate::figures`] draws V-curves: plotters writes the SVG, resvg rasterizes it to PNG
//! with the embedded DejaVu Sans, the same bytes for the same report. 800 × 480 px, wider than a
//! V-curve so the ten tick labels (two lines each) fit side by side; the legend sits under the plot.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use vcurve_method::task_state::tables::ViewRow;
use vcurve_method::task_state::{TaskStateReport, View};

use crate::figures::{FAMILY, FigureError, draw_error, rasterize, register_font};

/// The figure's size in pixels (PNG) and user units (SVG).
pub const WIDTH: u32 = 800;
pub const HEIGHT: u32 = 480;

pub(crate) const TITLE_HEIGHT: u32 = 30;
const LEGEND_ROW: i32 = 21;
pub(crate) const LEGEND_HEIGHT: u32 = 4 * LEGEND_ROW as u32 + 8;
const MARGIN_TOP: u32 = 10;
const MARGIN_RIGHT: u32 = 12;
const MARGIN_LEFT: u32 = 4;
const X_LABEL_AREA: u32 = 40;
const Y_LABEL_AREA: u32 = 52;

const TITLE_SIZE: u32 = 18;
const TICK_SIZE: u32 = 16;
const AXIS_SIZE: u32 = 17;
const LEGEND_SIZE: u32 = 15;
const GAP_SIZE: u32 = 14;
/// Half the width of an error bar's caps.
const CAP: i32 = 3;

/// Text views' dots and bars.
pub(crate) const VIEW: RGBColor = RGBColor(85, 85, 85);
/// The task-only prior's hollow dot and bar.
pub(crate) const PRIOR: RGBColor = RGBColor(140, 140, 140);
/// The actor's line, band and the gap annotations.
pub(crate) const ACTOR: RGBColor = RGBColor(118, 42, 131);
const ACTOR_BAND_OPACITY: f64 = 0.14;
const MUTED: RGBColor = RGBColor(110, 110, 110);
const GRID: RGBColor = RGBColor(232, 232, 232);

/// The tick label of a view, one or two lines.
fn tick(view: View) -> &'static [&'static str] {
    match view {
        View::LatestReport => &["latest", "report"],
        View::Reports => &["U"],
        View::ReportsNarration => &["U +", "narration"],
        View::ReportsHeaders => &["U +", "headers"],
        View::ReportsLast3 => &["U +", "last 3"],
        View::ReportsLast10 => &["U +", "last 10"],
        View::Scrollback => &["V"],
        View::FullMinusReasoning => &["T_minusR"],
        View::Full => &["T"],
        View::TaskOnly => &["task", "only"],
        View::Actor => &["A"],
    }
}

/// What the figure draws, read off a report once.
struct Plan<'a> {
    /// The measured text views in reading-depth order, each at its slot on the x axis.
    views: Vec<(&'a ViewRow, f64)>,
    /// The task-only prior, apart at the right.
    prior: Option<(&'a ViewRow, f64)>,
    /// Where the dashed divider before the prior runs.
    divider: Option<f64>,
    actor: Option<&'a ViewRow>,
    /// Every view but the actor without a value, in reading-depth order.
    not_measured: Vec<View>,
    x_max: f64,
}

fn measured(report: &TaskStateReport, view: View) -> Option<&ViewRow> {
    report.views.iter().find(|r| r.view == view && r.accuracy.value.is_some())
}

impl<'a> Plan<'a> {
    fn of(report: &'a TaskStateReport) -> Plan<'a> {
        let text: Vec<View> = View::ALL.into_iter().filter(|v| !matches!(v, View::TaskOnly | View::Actor)).collect();
        let mut views = Vec::new();
        let mut not_measured = Vec::new();
        for view in text.iter().copied().chain([View::TaskOnly]) {
            if measured(report, view).is_none() {
                not_measured.push(view);
            }
        }
        for view in text {
            if let Some(row) = measured(report, view) {
                views.push((row, views.len() as f64));
            }
        }
        let last = views.len() as f64 - 1.0;
        let prior = measured(report, View::TaskOnly).map(|r| (r, last + 1.5));
        let divider = prior.filter(|_| !views.is_empty()).map(|_| last + 0.75);
        let x_max = prior.map_or(last, |(_, x)| x).max(0.0) + 0.6;
        Plan { views, prior, divider, actor: measured(report, View::Actor), not_measured, x_max }
    }
}

/// The figure's title: the study's size as Figure 2 states it.
pub fn figure_title(report: &TaskStateReport) -> String {
    format!("Recovery by reading depth · {} tasks, {} probes", report.inventory.tasks, report.inventory.probes_eligible)
}

/// A caption for the figure: what it shows, the actor's accuracy, and the views not measured.
pub fn figure_caption(report: &TaskStateReport) -> String {
    let plan = Plan::of(report);
    let actor = match plan.actor {
        Some(a) => format!("the actor's self-answer accuracy A = {}", estimate_text(a)),
        None => "the actor's accuracy A: not measured".into(),
    };
    let missing = match plan.not_measured.is_empty() {
        true => "Every view is measured.".to_string(),
        false => format!(
            "Not measured (left out): {}.",
            plan.not_measured.iter().map(|v| v.symbol()).collect::<Vec<_>>().join(", ")
        ),
    };
    format!(
        "{}. Accuracy per view in order of reading depth, with 95% issue-clustered bootstrap intervals; the task-only prior apart at the right; the line and band are {actor}; purple numbers are Gap_actor = A − view. {missing}",
        figure_title(report)
    )
}

fn estimate_text(row: &ViewRow) -> String {
    let value = row.accuracy.value.map_or_else(|| "not measured".to_string(), |v| format!("{v:.3}"));
    match row.accuracy.ci {
        Some(ci) => format!("{value} [{:.3}, {:.3}]", ci.lo, ci.hi),
        None => value,
    }
}

/// Figure 2 as a standalone SVG document of `WIDTH × HEIGHT`.
pub fn figure_svg(report: &TaskStateReport) -> Result<String, FigureError> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        draw(report, &root)?;
        root.present().map_err(draw_error)?;
    }
    Ok(out)
}

/// Figure 2 as a PNG of `WIDTH × HEIGHT` pixels: the SVG rasterized by resvg with the embedded font.
pub fn figure_png(report: &TaskStateReport) -> Result<Vec<u8>, FigureError> {
    rasterize(&figure_svg(report)?, WIDTH, HEIGHT)
}

fn draw<DB: DrawingBackend>(report: &TaskStateReport, root: &DrawingArea<DB, Shift>) -> Result<(), FigureError> {
    register_font()?;
    let plan = Plan::of(report);
    root.fill(&WHITE).map_err(draw_error)?;
    let title_style = (FAMILY, TITLE_SIZE).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Center));
    root.draw(&Text::new(figure_title(report), ((WIDTH / 2) as i32, (TITLE_HEIGHT / 2) as i32 + 2), title_style))
        .map_err(draw_error)?;

    let chart_area = root.clone().shrink((0, TITLE_HEIGHT), (WIDTH, HEIGHT - TITLE_HEIGHT - LEGEND_HEIGHT));
    let mut chart = ChartBuilder::on(&chart_area)
        .margin_top(MARGIN_TOP)
        .margin_right(MARGIN_RIGHT)
        .margin_left(MARGIN_LEFT)
        .x_label_area_size(X_LABEL_AREA)
        .y_label_area_size(Y_LABEL_AREA)
        .build_cartesian_2d(-0.6f64..plan.x_max, 0f64..1f64)
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(GRID)
        .axis_style(BLACK)
        .x_labels(0)
        .y_labels(6)
        .y_label_formatter(&|y| format!("{y:.1}"))
        .label_style((FAMILY, TICK_SIZE))
        .axis_desc_style((FAMILY, AXIS_SIZE))
        .y_desc("accuracy")
        .draw()
        .map_err(draw_error)?;
    let px = |x: f64, y: f64| chart.backend_coord(&(x, y));
    let (left, top) = px(-0.6, 1.0);
    let (right, bottom) = px(plan.x_max, 0.0);

    let actor_y = plan.actor.and_then(|a| a.accuracy.value).map(|a| px(0.0, a).1);
    if let Some(actor) = plan.actor {
        // A degenerate interval (every resample the same) has no band: the line alone shows it.
        if let Some(ci) = actor.accuracy.ci
            && px(0.0, ci.lo).1 > px(0.0, ci.hi).1
        {
            let (lo, hi) = (px(0.0, ci.lo).1, px(0.0, ci.hi).1);
            root.draw(&Rectangle::new([(left, hi), (right, lo)], ACTOR.mix(ACTOR_BAND_OPACITY).filled()))
                .map_err(draw_error)?;
        }
        let y = px(0.0, actor.accuracy.value.unwrap_or_default()).1;
        root.draw(&PathElement::new(vec![(left, y), (right, y)], ACTOR.stroke_width(2))).map_err(draw_error)?;
    }
    if let Some(x) = plan.divider {
        let x = px(x, 0.0).0;
        let mut y = bottom;
        while y > top {
            root.draw(&PathElement::new(vec![(x, y), (x, (y - 4).max(top))], MUTED.stroke_width(1)))
                .map_err(draw_error)?;
            y -= 8;
        }
    }

    let tick_style = (FAMILY, TICK_SIZE).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Top));
    let gap_style = (FAMILY, GAP_SIZE).into_font().color(&ACTOR);
    let drawn = plan.views.iter().map(|&(r, x)| (r, x, false)).chain(plan.prior.map(|(r, x)| (r, x, true)));
    for (row, x, prior) in drawn {
        let value = row.accuracy.value.unwrap_or_default();
        let (cx, cy) = px(x, value);
        let colour = if prior { PRIOR } else { VIEW };
        let (bar_top, bar_bottom) = match row.accuracy.ci {
            Some(ci) => {
                let (hi, lo) = (px(x, ci.hi).1, px(x, ci.lo).1);
                error_bar(root, cx, lo, hi, colour)?;
                (hi, lo)
            }
            None => (cy, cy),
        };
        match prior {
            true => root.draw(&Circle::new((cx, cy), 3, colour.stroke_width(2))).map_err(draw_error)?,
            false => root.draw(&Circle::new((cx, cy), 3, colour.filled())).map_err(draw_error)?,
        }
        if let Some(gap) = row.gap_actor.value {
            // Above the bar, or under it when the bar reaches the top of the plot or the text
            // would sit on the actor's line.
            let on_line = actor_y.is_some_and(|a| (bar_top - 20..=bar_top).contains(&a));
            let (y, v) = match bar_top - top > 20 && !on_line {
                true => (bar_top - 4, VPos::Bottom),
                false => (bar_bottom + 4, VPos::Top),
            };
            root.draw(&Text::new(format!("{gap:.3}"), (cx, y), gap_style.clone().pos(Pos::new(HPos::Center, v))))
                .map_err(draw_error)?;
        }
        root.draw(&PathElement::new(vec![(cx, bottom + 1), (cx, bottom + 5)], BLACK.stroke_width(1)))
            .map_err(draw_error)?;
        for (i, line) in tick(row.view).iter().enumerate() {
            root.draw(&Text::new(*line, (cx, bottom + 7 + 15 * i as i32), tick_style.clone())).map_err(draw_error)?;
        }
    }
    draw_legend(root, &plan)
}

fn error_bar<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    x: i32,
    lo: i32,
    hi: i32,
    colour: RGBColor,
) -> Result<(), FigureError> {
    let style = ShapeStyle::from(colour).stroke_width(1);
    root.draw(&PathElement::new(vec![(x, lo), (x, hi)], style)).map_err(draw_error)?;
    for y in [lo, hi] {
        root.draw(&PathElement::new(vec![(x - CAP, y), (x + CAP, y)], style)).map_err(draw_error)?;
    }
    Ok(())
}

fn draw_legend<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, plan: &Plan) -> Result<(), FigureError> {
    let text = (FAMILY, LEGEND_SIZE).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
    let muted = (FAMILY, LEGEND_SIZE).into_font().color(&MUTED).pos(Pos::new(HPos::Left, VPos::Center));
    let columns = [Y_LABEL_AREA as i32, (WIDTH / 2) as i32 + 10];
    let mut y = (HEIGHT - LEGEND_HEIGHT) as i32 + 6 + LEGEND_ROW / 2;
    let sample = |c: usize| columns[c] + 11;
    let label = |c: usize| columns[c] + 30;

    // Row 1: the views' dots and bars; the actor's line and band.
    root.draw(&Circle::new((sample(0), y), 3, VIEW.filled())).map_err(draw_error)?;
    error_bar(root, sample(0), y + 7, y - 7, VIEW)?;
    root.draw(&Text::new("view accuracy, 95% bootstrap CI", (label(0), y), text.clone())).map_err(draw_error)?;
    match plan.actor {
        Some(actor) => {
            let band = ACTOR.mix(ACTOR_BAND_OPACITY).filled();
            root.draw(&Rectangle::new([(columns[1], y - 6), (columns[1] + 22, y + 6)], band)).map_err(draw_error)?;
            root.draw(&PathElement::new(vec![(columns[1], y), (columns[1] + 22, y)], ACTOR.stroke_width(2)))
                .map_err(draw_error)?;
            root.draw(&Text::new(format!("actor A = {}", estimate_text(actor)), (label(1), y), text.clone()))
                .map_err(draw_error)?;
        }
        None => root.draw(&Text::new("actor A not measured", (label(1), y), muted.clone())).map_err(draw_error)?,
    }
    y += LEGEND_ROW;

    // Row 2: the gap annotations; the prior.
    let gap_sample = (FAMILY, GAP_SIZE).into_font().color(&ACTOR).pos(Pos::new(HPos::Center, VPos::Center));
    root.draw(&Text::new(".42", (sample(0), y), gap_sample)).map_err(draw_error)?;
    let gap_text = match plan.actor {
        Some(_) => "Gap_actor = A − view",
        None => "no gaps to A without the actor",
    };
    root.draw(&Text::new(gap_text, (label(0), y), text.clone())).map_err(draw_error)?;
    if plan.prior.is_some() {
        root.draw(&Circle::new((sample(1), y), 3, PRIOR.stroke_width(2))).map_err(draw_error)?;
        root.draw(&Text::new("task only: the prior, apart", (label(1), y), text.clone())).map_err(draw_error)?;
    }
    y += LEGEND_ROW;

    // Rows 3 and 4: what is left out.
    let names: Vec<&str> = plan.not_measured.iter().map(|v| v.symbol()).collect();
    if names.is_empty() {
        return root.draw(&Text::new("every view measured", (columns[0], y), muted)).map_err(draw_error);
    }
    let width = WIDTH - columns[0] as u32 - 12;
    for line in wrap(root, &names, &text, width)? {
        root.draw(&Text::new(line, (columns[0], y), text.clone())).map_err(draw_error)?;
        y += LEGEND_ROW;
    }
    Ok(())
}

/// "not measured (left out): a, b, …" on at most two lines of `width` pixels, names whole, the
/// second line ending in "…" when even two do not hold them all (the caption lists every one).
fn wrap<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    names: &[&str],
    style: &TextStyle,
    width: u32,
) -> Result<Vec<String>, FigureError> {
    let fits = |s: &str| -> Result<bool, FigureError> {
        Ok(root.estimate_text_size(s, style).map_err(draw_error)?.0 <= width)
    };
    let mut lines = vec!["not measured (left out): ".to_string()];
    for (i, name) in names.iter().enumerate() {
        let sep = if i + 1 < names.len() { "," } else { "" };
        let last = lines.last_mut().expect("a line");
        let candidate = format!("{last}{name}{sep}");
        if fits(&candidate)? || last.ends_with(": ") {
            *last = candidate + " ";
        } else if lines.len() < 2 {
            lines.push(format!("{name}{sep} "));
        } else {
            let last = lines.last_mut().expect("a line");
            *last = format!("{}…", last.trim_end());
            break;
        }
    }
    Ok(lines.into_iter().map(|l| l.trim_end().to_string()).collect())
}

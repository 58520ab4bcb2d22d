//! V-curve figures as the paper draws them (its Figure 2 and Appendix W): one figure per
//! trajectory, as SVG and as PNG.
//!
//! Pure: a [`CurveFigure`] in, bytes out, the same bytes for the same figure. What a figure shows:
//!
//! - the raw estimates `V̂(h_t)` as dots with their two-sided Wilson 95% bars;
//! - the isotonic fit as a line through the fitted points and the fixed terminal point `(T, 0)`;
//! - the decisive interval `(a, b]` shaded;
//! - the point of no return as a dotted vertical line, drawn only when it is certified (`t_pnr < T`);
//!   the legend says whether it is;
//! - each label source's first-mistake label `m` as a coloured triangle just above the step axis,
//!   between `h_{m−1}` and `h_m` (at `x = m − 0.5`), one row per source so that sources agreeing on a
//!   step stay visible; "no mistake" answers appear only in the legend;
//! - a title with the trajectory, its shape, `C`, `T` and the fitted `V(h_0)` (Table 9's quantities).
//!
//! plotters draws the SVG; the PNG is that SVG rasterized by resvg, so the two show the same picture.
//! Text is laid out and rasterized with DejaVu Sans embedded in the binary (`assets/DejaVuSans.ttf`),
//! so rendering never looks up system fonts; the SVG names the generic `sans-serif` family and
//! leaves the face to its viewer. (plotters' own bitmap backend places glyphs unevenly, which is
//! why it is not used for the PNG.)
//!
//! The size, 640 × 400 px with text of at least 11 px, is meant for a paper's column width
//! (about 3.3 in): the figure scales down by about half there and its text stays readable.

use std::sync::{Arc, OnceLock};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use resvg::tiny_skia;
use resvg::usvg::{self, fontdb};
use vcurve_method::schedule::Series;
use vcurve_method::{FittedPoint, Shape};

use crate::results::TrajectoryResult;
use vcurve_record::TrajectoryState;

/// The figure's size in pixels (PNG) and user units (SVG).
pub const WIDTH: u32 = 640;
pub const HEIGHT: u32 = 400;

const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
/// The font's family name, which the rasterizer also answers for the SVG's `sans-serif`.
const FONT_NAME: &str = "DejaVu Sans";
pub(crate) const FAMILY: &str = "sans-serif";

// Layout, in pixels. The plot's frame is derived from these in `Frame::of`, the same numbers
// plotters lays the chart out with.
const TITLE_HEIGHT: u32 = 30;
const LEGEND_WIDTH: u32 = 188;
const MARGIN_TOP: u32 = 8;
const MARGIN_RIGHT: u32 = 8;
const MARGIN_LEFT: u32 = 4;
const MARGIN_BOTTOM: u32 = 2;
const X_LABEL_AREA: u32 = 40;
const Y_LABEL_AREA: u32 = 52;

// Text sizes in plotters' unit, the line height: the SVG's font size is `size / 1.24` (the title's
// 18 is 14.5 px, the legend's 15 is 12.1 px).
const TITLE_SIZE: u32 = 18;
const TITLE_MIN_SIZE: u32 = 14;
const TITLE_WIDTH: u32 = WIDTH - 16;
const TICK_SIZE: u32 = 16;
const AXIS_SIZE: u32 = 17;
const LEGEND_SIZE: u32 = 15;
const LEGEND_ROW: i32 = 21;
// The legend's text starts 34 px into it, after the samples.
const LEGEND_TEXT_WIDTH: u32 = LEGEND_WIDTH - 34 - 2;

// Label triangles: half base width, height, and the rows' distance above the axis.
const TRIANGLE_HALF_WIDTH: i32 = 5;
const TRIANGLE_HEIGHT: i32 = 10;
const TRIANGLE_GAP: i32 = 3;
const TRIANGLE_ROW: i32 = 12;
// The dotted line's dash and gap, in pixels.
const DOT: i32 = 2;
const DOT_GAP: i32 = 3;
// Half the width of a Wilson bar's caps.
const CAP: i32 = 3;

pub(crate) const FIT: RGBColor = RGBColor(31, 78, 121);
pub(crate) const ESTIMATE: RGBColor = RGBColor(85, 85, 85);
pub(crate) const PNR: RGBColor = RGBColor(20, 20, 20);
pub(crate) const DECISIVE: RGBColor = RGBColor(214, 39, 40);
const DECISIVE_OPACITY: f64 = 0.16;
const OUTLINE: RGBColor = RGBColor(50, 50, 50);
const MUTED: RGBColor = RGBColor(110, 110, 110);
const GRID: RGBColor = RGBColor(232, 232, 232);

/// Label sources' colours, assigned in the order of the sources' names. The first four, in that
/// order, are the paper's colours for its four judges (whose names sort as GPT-5.5, GPT-6 Astra,
/// GPT-6.1 Sol, OpenAI o3: green, yellow, orange, purple); more sources cycle through the rest.
pub(crate) const SOURCE_COLOURS: [RGBColor; 8] = [
    RGBColor(0, 158, 115),
    RGBColor(240, 200, 0),
    RGBColor(240, 120, 0),
    RGBColor(140, 90, 180),
    RGBColor(0, 114, 178),
    RGBColor(86, 180, 233),
    RGBColor(204, 121, 167),
    RGBColor(127, 127, 127),
];

/// Why a figure could not be rendered. Fatal for that figure: the same input fails the same way.
#[derive(Debug, thiserror::Error)]
pub enum FigureError {
    #[error("the embedded font could not be loaded")]
    Font,
    #[error("drawing the figure failed: {0}")]
    Draw(String),
    #[error("the figure's SVG does not parse: {0}")]
    Svg(#[from] resvg::usvg::Error),
    #[error("encoding the PNG failed: {0}")]
    Encode(String),
    #[error("the curve under a figure's note does not analyze: {0}")]
    Note(#[from] vcurve_method::CurveError),
}

/// Everything one V-curve figure shows: the main series of one trajectory with its quantities.
#[derive(Debug, Clone, PartialEq)]
pub struct CurveFigure {
    pub trajectory: String,
    pub shape: Option<Shape>,
    pub concentration: Option<f64>,
    /// `T`: the terminal point `(T, 0)` ends the fit.
    pub length: u32,
    /// The fitted `V(h_0)`.
    pub v0: Option<f64>,
    /// The main series' sampled points, sorted by `t`.
    pub points: Vec<FittedPoint>,
    /// The decisive interval `(a, b]`.
    pub decisive: Option<(u32, u32)>,
    pub pnr: Option<u32>,
    pub pnr_certified: bool,
    /// `(source, m)`: each source's first-mistake label, `None` for "no mistake".
    pub labels: Vec<(String, Option<u32>)>,
}

impl CurveFigure {
    /// The figure of one exported trajectory; `None` for a doomed trajectory or one without a main
    /// series to draw.
    pub fn from_result(r: &TrajectoryResult) -> Option<Self> {
        if r.state == TrajectoryState::Doomed || r.length == 0 {
            return None;
        }
        let points = r.series.get(&Series::Main).filter(|p| !p.is_empty())?;
        let mut points = points.clone();
        points.sort_by_key(|p| p.t);
        Some(CurveFigure {
            trajectory: r.trajectory.clone(),
            shape: r.shape,
            concentration: r.concentration,
            length: r.length,
            v0: r.v0_fit,
            points,
            decisive: r.decisive_a.zip(r.decisive_b),
            pnr: r.pnr,
            pnr_certified: r.pnr_certified.unwrap_or(false),
            labels: r.labels.clone(),
        })
    }

    /// The figure as a standalone SVG document.
    pub fn svg(&self) -> String {
        let mut out = String::new();
        {
            let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
            // Drawing into a String fails only if the embedded font does not load, which the
            // tests rule out for the font the binary carries.
            self.draw(&root).expect("the figure draws into an SVG string");
            root.present().expect("an SVG string backend presents");
        }
        out
    }

    /// The figure as a PNG image of `WIDTH × HEIGHT` pixels: the SVG, rasterized by resvg with the
    /// embedded font.
    pub fn png(&self) -> Result<Vec<u8>, FigureError> {
        rasterize(&self.svg(), WIDTH, HEIGHT)
    }

    /// The title: the trajectory and Table 9's quantities.
    pub fn title(&self) -> String {
        format!("{}{}", self.trajectory, self.title_quantities())
    }

    fn title_quantities(&self) -> String {
        let shape = self.shape.map_or("no shape", |s| s.as_str());
        let c = self.concentration.map_or_else(|| "–".to_owned(), |c| format!("{c:.2}"));
        let v0 = self.v0.map_or_else(|| "–".to_owned(), |v| format!("{v:.2}"));
        format!(" · {shape}, C = {c}, T = {}, V(h₀) = {v0}", self.length)
    }

    /// The point of no return to draw: certified, and on the curve.
    fn certified_pnr(&self) -> Option<u32> {
        self.pnr.filter(|&t| self.pnr_certified && t <= self.length)
    }

    /// The label sources in name order, each once: a source's index here is its colour and its row
    /// above the axis.
    fn sources(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.labels.iter().map(|(s, _)| s.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), FigureError> {
        register_font()?;
        let frame = Frame::of(self.length);
        root.fill(&WHITE).map_err(draw_error)?;

        // The title at the largest size that fits the width; a name too long even at the smallest
        // size is shortened.
        let title = self.title();
        let fits = |size: u32| -> Result<bool, FigureError> {
            let style = TextStyle::from((FAMILY, size).into_font());
            Ok(root.estimate_text_size(&title, &style).map_err(draw_error)?.0 <= TITLE_WIDTH)
        };
        let mut size = TITLE_SIZE;
        while size > TITLE_MIN_SIZE && !fits(size)? {
            size -= 1;
        }
        let title_style = (FAMILY, size).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Center));
        let title = match fits(size)? {
            true => title,
            false => fit_width(root, &self.trajectory, &self.title_quantities(), &title_style, TITLE_WIDTH)?,
        };
        root.draw(&Text::new(title, ((WIDTH / 2) as i32, (TITLE_HEIGHT / 2) as i32 + 2), title_style))
            .map_err(draw_error)?;

        let chart_area = root.clone().shrink((0, TITLE_HEIGHT), (WIDTH - LEGEND_WIDTH, HEIGHT - TITLE_HEIGHT));
        let mut chart = ChartBuilder::on(&chart_area)
            .margin_top(MARGIN_TOP)
            .margin_right(MARGIN_RIGHT)
            .margin_left(MARGIN_LEFT)
            .margin_bottom(MARGIN_BOTTOM)
            .x_label_area_size(X_LABEL_AREA)
            .y_label_area_size(Y_LABEL_AREA)
            .build_cartesian_2d(frame.x_min..frame.x_max, 0f64..1f64)
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(GRID)
            .axis_style(BLACK)
            // At most one tick per step, so that short trajectories get whole-step ticks.
            .x_labels((self.length as usize + 1).min(7))
            .y_labels(6)
            .x_label_formatter(&|x| format!("{}", x.round() as i64))
            .y_label_formatter(&|y| format!("{y:.1}"))
            .label_style((FAMILY, TICK_SIZE))
            .axis_desc_style((FAMILY, AXIS_SIZE))
            .x_desc("step t")
            .y_desc("V(hₜ)")
            .draw()
            .map_err(draw_error)?;

        if let Some((a, b)) = self.decisive {
            let shade = DECISIVE.mix(DECISIVE_OPACITY).filled();
            chart
                .draw_series([Rectangle::new([(f64::from(a), 0.0), (f64::from(b), 1.0)], shade)])
                .map_err(draw_error)?;
        }

        if let Some(pnr) = self.certified_pnr() {
            let (x, top) = chart.backend_coord(&(f64::from(pnr), 1.0));
            let (_, bottom) = chart.backend_coord(&(f64::from(pnr), 0.0));
            dotted_vertical(root, x, top, bottom)?;
        }

        for p in &self.points {
            let t = f64::from(p.t);
            let (x, lo) = chart.backend_coord(&(t, p.wilson_lo));
            let (_, hi) = chart.backend_coord(&(t, p.wilson_hi));
            wilson_bar(root, x, lo, hi)?;
        }

        let fit: Vec<(f64, f64)> =
            self.points.iter().map(|p| (f64::from(p.t), p.v_fit)).chain([(f64::from(self.length), 0.0)]).collect();
        chart.draw_series(LineSeries::new(fit, FIT.stroke_width(2))).map_err(draw_error)?;

        chart
            .draw_series(self.points.iter().map(|p| Circle::new((f64::from(p.t), p.v_hat), 3, ESTIMATE.filled())))
            .map_err(draw_error)?;

        let sources = self.sources();
        let mut labels: Vec<&(String, Option<u32>)> = self.labels.iter().collect();
        labels.sort();
        for (source, m) in labels {
            let Some(m) = m.filter(|m| (1..=self.length).contains(m)) else { continue };
            let row = sources.iter().position(|s| s == source).unwrap_or(0);
            let (x, axis) = chart.backend_coord(&(f64::from(m) - 0.5, 0.0));
            let base = axis - TRIANGLE_GAP - TRIANGLE_ROW * row as i32;
            triangle(root, x, base, SOURCE_COLOURS[row % SOURCE_COLOURS.len()])?;
        }

        self.draw_legend(root, &sources, frame.top)?;
        Ok(())
    }

    fn draw_legend<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        sources: &[&str],
        top: i32,
    ) -> Result<(), FigureError> {
        let left = (WIDTH - LEGEND_WIDTH) as i32 + 6;
        let text_x = (WIDTH - LEGEND_WIDTH) as i32 + 34;
        let text = (FAMILY, LEGEND_SIZE).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
        let muted = (FAMILY, LEGEND_SIZE).into_font().color(&MUTED).pos(Pos::new(HPos::Left, VPos::Center));
        let mut y = top + LEGEND_ROW / 2;
        let glyph_x = left + 11;

        root.draw(&Circle::new((glyph_x, y), 3, ESTIMATE.filled())).map_err(draw_error)?;
        wilson_bar(root, glyph_x, y + 7, y - 7)?;
        root.draw(&Text::new("estimate, Wilson 95%", (text_x, y), text.clone())).map_err(draw_error)?;
        y += LEGEND_ROW;

        root.draw(&PathElement::new(vec![(left, y), (left + 22, y)], FIT.stroke_width(2))).map_err(draw_error)?;
        root.draw(&Text::new("isotonic fit", (text_x, y), text.clone())).map_err(draw_error)?;
        y += LEGEND_ROW;

        if let Some((a, b)) = self.decisive {
            let shade = DECISIVE.mix(DECISIVE_OPACITY).filled();
            root.draw(&Rectangle::new([(left, y - 7), (left + 22, y + 7)], shade)).map_err(draw_error)?;
            root.draw(&Text::new(format!("decisive ({a}, {b}]"), (text_x, y), text.clone())).map_err(draw_error)?;
        } else {
            root.draw(&Text::new("no decisive interval", (text_x, y), muted.clone())).map_err(draw_error)?;
        }
        y += LEGEND_ROW;

        match self.certified_pnr() {
            Some(pnr) => {
                dotted_vertical(root, glyph_x, y - 8, y + 8)?;
                root.draw(&Text::new(format!("PNR {pnr} (certified)"), (text_x, y), text.clone()))
                    .map_err(draw_error)?;
            }
            None => {
                root.draw(&Text::new("PNR not certified", (text_x, y), muted.clone())).map_err(draw_error)?;
            }
        }
        y += LEGEND_ROW;

        for (row, source) in sources.iter().enumerate() {
            let steps: Vec<String> = self
                .labels
                .iter()
                .filter(|(s, _)| s == source)
                .map(|(_, m)| m.map_or_else(|| "no mistake".to_owned(), |m| format!("m = {m}")))
                .collect();
            let colour = SOURCE_COLOURS[row % SOURCE_COLOURS.len()];
            triangle(root, glyph_x, y + TRIANGLE_HEIGHT / 2, colour)?;
            let entry = fit_width(root, source, &format!(": {}", steps.join(", ")), &text, LEGEND_TEXT_WIDTH)?;
            root.draw(&Text::new(entry, (text_x, y), text.clone())).map_err(draw_error)?;
            y += LEGEND_ROW;
        }
        Ok(())
    }
}

/// The plot's frame and data ranges: where plotters puts the chart of a curve of length `T`.
/// `left..=right` and `top..=bottom` are the pixels data map onto (`x_min` to `left`, `V = 0` to
/// `bottom`); the axes run just outside, at column `left − 1` and row `bottom + 1`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Frame {
    pub left: i32,
    pub right: i32,
    pub top: i32,
    pub bottom: i32,
    pub x_min: f64,
    pub x_max: f64,
}

impl Frame {
    pub(crate) fn of(length: u32) -> Frame {
        // A little room either side keeps the bars at t = 0 and the terminal point off the axes.
        let pad = (f64::from(length) * 0.02).max(0.5);
        Frame {
            left: (MARGIN_LEFT + Y_LABEL_AREA) as i32,
            right: (WIDTH - LEGEND_WIDTH - MARGIN_RIGHT) as i32 - 1,
            top: (TITLE_HEIGHT + MARGIN_TOP) as i32,
            bottom: (HEIGHT - MARGIN_BOTTOM - X_LABEL_AREA) as i32 - 1,
            x_min: -pad,
            x_max: f64::from(length) + pad,
        }
    }

    /// The pixel column of step `t`, before plotters rounds it.
    #[cfg(test)]
    pub(crate) fn x(&self, t: f64) -> f64 {
        f64::from(self.left) + (t - self.x_min) / (self.x_max - self.x_min) * f64::from(self.right - self.left)
    }

    /// The pixel row of value `v`, before plotters rounds it.
    #[cfg(test)]
    pub(crate) fn y(&self, v: f64) -> f64 {
        f64::from(self.bottom) - v * f64::from(self.bottom - self.top)
    }
}

/// Draw a Wilson bar in pixels: a vertical line at column `x` from row `lo` to row `hi`, with caps.
fn wilson_bar<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, x: i32, lo: i32, hi: i32) -> Result<(), FigureError> {
    let style = ShapeStyle::from(ESTIMATE).stroke_width(1);
    root.draw(&PathElement::new(vec![(x, lo), (x, hi)], style)).map_err(draw_error)?;
    for y in [lo, hi] {
        root.draw(&PathElement::new(vec![(x - CAP, y), (x + CAP, y)], style)).map_err(draw_error)?;
    }
    Ok(())
}

/// Draw a dotted vertical line in pixels at column `x` from row `bottom` up to row `top`: short
/// dashes, each its own segment, starting on the axis.
fn dotted_vertical<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    x: i32,
    top: i32,
    bottom: i32,
) -> Result<(), FigureError> {
    let style = PNR.stroke_width(2);
    let mut y = bottom;
    while y > top {
        root.draw(&PathElement::new(vec![(x, y), (x, (y - DOT).max(top))], style)).map_err(draw_error)?;
        y -= DOT + DOT_GAP;
    }
    Ok(())
}

/// Draw a label triangle pointing up, centred on column `x` with its base on row `base`: the filled
/// shape and a thin dark outline that keeps light colours visible on white.
fn triangle<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    x: i32,
    base: i32,
    colour: RGBColor,
) -> Result<(), FigureError> {
    let corners = vec![(x - TRIANGLE_HALF_WIDTH, base), (x + TRIANGLE_HALF_WIDTH, base), (x, base - TRIANGLE_HEIGHT)];
    root.draw(&Polygon::new(corners.clone(), colour.filled())).map_err(draw_error)?;
    let mut outline = corners;
    outline.push(outline[0]);
    root.draw(&PathElement::new(outline, OUTLINE.stroke_width(1))).map_err(draw_error)
}

/// `name` followed by `rest`, the name shortened with an ellipsis until the whole fits `width` pixels
/// (by the embedded font's measure, which runs a little wider than the SVG's text).
fn fit_width<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    name: &str,
    rest: &str,
    style: &TextStyle,
    width: u32,
) -> Result<String, FigureError> {
    let chars: Vec<char> = name.chars().collect();
    let mut keep = chars.len();
    loop {
        let shown: String = chars[..keep].iter().collect();
        let entry = match keep == chars.len() {
            true => format!("{shown}{rest}"),
            false => format!("{}…{rest}", shown.trim_end()),
        };
        if keep <= 1 || root.estimate_text_size(&entry, style).map_err(draw_error)?.0 <= width {
            return Ok(entry);
        }
        keep -= 1;
    }
}

pub(crate) fn draw_error<E: std::fmt::Display>(e: E) -> FigureError {
    FigureError::Draw(e.to_string())
}

/// Rasterize a figure's SVG of `width × height` to PNG with the embedded font as every family the
/// SVG names.
pub(crate) fn rasterize(svg: &str, width: u32, height: u32) -> Result<Vec<u8>, FigureError> {
    static FONTS: OnceLock<Arc<fontdb::Database>> = OnceLock::new();
    let fonts = FONTS.get_or_init(|| {
        let mut db = fontdb::Database::new();
        db.load_font_data(FONT.to_vec());
        db.set_sans_serif_family(FONT_NAME);
        Arc::new(db)
    });
    let options = usvg::Options { font_family: FONT_NAME.to_owned(), fontdb: Arc::clone(fonts), ..Default::default() };
    let tree = usvg::Tree::from_str(svg, &options)?;
    let mut pixmap = tiny_skia::Pixmap::new(width, height).ok_or_else(|| FigureError::Encode("empty image".into()))?;
    resvg::render(&tree, tiny_skia::Transform::identity(), &mut pixmap.as_mut());
    pixmap.encode_png().map_err(|e| FigureError::Encode(e.to_string()))
}

/// Register the embedded font with plotters once per process.
pub(crate) fn register_font() -> Result<(), FigureError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok { Ok(()) } else { Err(FigureError::Font) }
}

#[cfg(test)]
mod tests;

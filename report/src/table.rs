//! The tables of the report and their renderings — HTML, CSV and aligned text for a terminal —
//! with the cell and field helpers the export's CSV files share.

use std::fmt::Write as _;

use vcurve_method::analyses::{Measured, NOT_MEASURED};

/// A table: a title, a caption saying what it reproduces, and rows of text cells. A cell the study
/// has not measured reads [`NOT_MEASURED`], never 0.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// File name stem of the CSV (`labels` → `labels.csv`).
    pub name: &'static str,
    pub title: String,
    pub caption: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// The study has not measured what the table shows: it has no rows, and says "not measured"
    /// where an empty table says "nothing to show" (its CSV is the header alone).
    pub not_measured: bool,
}

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

impl Table {
    pub(crate) fn new(name: &'static str, title: &str, caption: &str, headers: &[&str]) -> Self {
        Table {
            name,
            title: title.into(),
            caption: caption.into(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            not_measured: false,
        }
    }

    /// The table of what `measured` holds, or a table marked not measured.
    pub(crate) fn fill<T>(mut self, measured: Measured<&T>, fill: impl FnOnce(&mut Table, &T)) -> Self {
        match measured {
            Measured::Value(v) => fill(&mut self, v),
            Measured::NotMeasured => self.not_measured = true,
        }
        self
    }

    /// What an empty table says.
    fn empty(&self) -> &'static str {
        if self.not_measured { NOT_MEASURED } else { "nothing to show" }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.headers.len());
        self.rows.push(cells);
    }

    pub fn csv(&self) -> String {
        let mut out = String::new();
        for line in std::iter::once(&self.headers).chain(&self.rows) {
            out.push_str(&line.iter().map(|c| csv_field(c)).collect::<Vec<_>>().join(","));
            out.push('\n');
        }
        out
    }

    /// The table as aligned text, for a terminal.
    pub fn text(&self) -> String {
        let mut out = format!("{}\n{}\n", self.title, "=".repeat(self.title.chars().count()));
        out.push_str(&aligned(&self.headers, &self.rows, &[]));
        if self.rows.is_empty() {
            let _ = writeln!(out, "({})", self.empty());
        }
        out
    }

    /// The table as Markdown: a heading, the caption, and a pipe table (an empty table says
    /// [`NOT_MEASURED`] or "nothing to show" under its header).
    pub fn markdown(&self) -> String {
        let cell = |c: &str| c.replace('|', "\\|").replace('\n', " ");
        let mut out = format!("## {}\n\n{}\n\n", self.title, self.caption);
        let _ = writeln!(out, "| {} |", self.headers.iter().map(|h| cell(h)).collect::<Vec<_>>().join(" | "));
        let _ = writeln!(out, "|{}", "---|".repeat(self.headers.len()));
        for row in &self.rows {
            let _ = writeln!(out, "| {} |", row.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | "));
        }
        if self.rows.is_empty() {
            let _ = writeln!(out, "\n({})", self.empty());
        }
        out
    }

    pub fn html(&self) -> String {
        let mut out = format!(
            "<h2 id=\"{}\">{}</h2>\n<p class=\"caption\">{}</p>\n<table>\n<tr>",
            self.name,
            esc(&self.title),
            esc(&self.caption)
        );
        for h in &self.headers {
            let _ = write!(out, "<th>{}</th>", esc(h));
        }
        out.push_str("</tr>\n");
        if self.rows.is_empty() {
            let _ =
                writeln!(out, "<tr><td colspan=\"{}\" class=\"muted\">{}</td></tr>", self.headers.len(), self.empty());
        }
        for row in &self.rows {
            out.push_str("<tr>");
            for c in row {
                let _ = write!(out, "<td>{}</td>", esc(c));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</table>\n");
        out
    }
}

/// How a column of [`aligned`] text lines up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// `headers` and `rows` as aligned text, one line each: every column as wide as its widest cell
/// (in characters), columns two spaces apart, each aligned as `align` says (columns past its end
/// to the left), trailing spaces trimmed.
pub fn aligned(headers: &[String], rows: &[Vec<String>], align: &[Align]) -> String {
    let width = |i: usize| {
        std::iter::once(headers).chain(rows.iter().map(Vec::as_slice)).map(|r| r[i].chars().count()).max().unwrap_or(0)
    };
    let widths: Vec<usize> = (0..headers.len()).map(width).collect();
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| match align.get(i).copied().unwrap_or(Align::Left) {
                Align::Left => format!("{c:<w$}"),
                Align::Right => format!("{c:>w$}"),
            })
            .collect();
        padded.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = line(headers);
    for row in rows {
        out.push_str(&line(row));
    }
    out
}

/// An optional CSV cell: empty when `None`.
pub(crate) fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(String::new, |v| v.to_string())
}

/// Quote a CSV field when it needs it.
pub(crate) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
}

/// The stylesheet of the report's pages.
pub(crate) const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}\
h1{font-size:1.6em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}\
th{background:#f4f4f4}.caption{color:#555;max-width:900px}.muted{color:#888}\
.gallery{display:flex;flex-wrap:wrap;gap:12px}.gallery figure{margin:0;width:482px}.gallery figcaption.note{font-size:13px;color:#333;margin:4px 0 8px}.gallery svg{width:480px;height:auto;border:1px solid #ddd}";

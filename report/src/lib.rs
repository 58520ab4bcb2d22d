//! # vcurve-report
//!
//! A study's results, from its [`StudyRecord`](vcurve_record::StudyRecord), as pure code: no I/O,
//! no async, no database.
//!
//! - [`results`]: every trajectory analyzed into [`Results`](results::Results).
//! - [`export`]: the export's files (`curves.csv`, `trajectories.csv`, `evaluation.csv`,
//!   `results.json`, `analyses.json`; `replay.csv`, `replay.json`, `selection.json`,
//!   `selection.csv`, `base_runs.csv` where the study has them).
//! - [`analyses`]: the paper's analyses of one study (docs/method.md §9), the glue between the results
//!   and the pure analyses of `vcurve_method::analyses`.
//! - [`figures`]: a trajectory's V-curve as SVG and PNG.
//! - [`html`]: the study's report — one self-contained HTML file, its tables as CSV.
//! - [`notes`]: one diagnostic note per curve, as the paper prints them under its figures, and
//!   `notes.csv` (`trajectory,note` and each clause's value).
//! - [`replay_table`]: replay as Appendix L reports it (Tables 14–15), and the kinds of commands.
//! - [`selection_export`]: the base-run pool (Table 8) and the selection of the study set.
//! - [`task_state`]: a task-state study's Figure 2 and tables (SVG, PNG, Markdown, HTML).
//! - [`table`]: a table as HTML, CSV and text, aligned text for any rows ([`table::aligned`], which
//!   `vcurve labels` prints with), and the helpers of the CSV files.

pub mod analyses;
pub mod calls;
pub mod export;
pub mod figures;
pub mod html;
pub mod notes;
pub mod replay_table;
pub mod restart_check;
pub mod results;
pub mod selection_export;
pub mod table;
pub mod task_state;

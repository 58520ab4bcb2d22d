//! What an evaluation answers, shared by both evaluators (the command's and SWE-bench's): a
//! [`Verdict`] with how the patch applied ([`ApplyMethod`]), or an [`EvalFailure`].

/// Where the patch is written in the container: outside any task's working directory, so that
/// neither `git clean` nor the patch itself touches it.
pub const PATCH_PATH: &str = "/tmp/vcurve/patch.diff";
/// How much of the test command's output a verdict keeps.
pub const OUTPUT_TAIL_BYTES: usize = 4096;

/// How a patch was applied: the SWE-bench harness's methods, in the order they are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApplyMethod {
    /// `git apply --verbose`
    GitApply,
    /// `git apply --verbose --3way`
    GitApply3Way,
    /// `git apply --verbose --reject`
    GitApplyReject,
    /// `patch --batch --fuzz=5 -p1 -i`
    Patch,
}

impl ApplyMethod {
    /// Every method, in the order they are tried.
    pub const CASCADE: [ApplyMethod; 4] =
        [ApplyMethod::GitApply, ApplyMethod::GitApply3Way, ApplyMethod::GitApplyReject, ApplyMethod::Patch];

    pub fn as_str(self) -> &'static str {
        match self {
            ApplyMethod::GitApply => "git_apply",
            ApplyMethod::GitApply3Way => "git_apply_3way",
            ApplyMethod::GitApplyReject => "git_apply_reject",
            ApplyMethod::Patch => "patch",
        }
    }

    /// The shell command that applies [`PATCH_PATH`] this way.
    pub fn command(self) -> String {
        match self {
            ApplyMethod::GitApply => format!("git apply --verbose {PATCH_PATH}"),
            ApplyMethod::GitApply3Way => format!("git apply --verbose --3way {PATCH_PATH}"),
            ApplyMethod::GitApplyReject => format!("git apply --verbose --reject {PATCH_PATH}"),
            ApplyMethod::Patch => format!("patch --batch --fuzz=5 -p1 -i {PATCH_PATH}"),
        }
    }

    /// Whether the tree is reset before trying this method (a failed attempt before it may
    /// have left changes).
    pub(super) fn resets_first(self) -> bool {
        matches!(self, ApplyMethod::GitApplyReject | ApplyMethod::Patch)
    }
}

impl std::fmt::Display for ApplyMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a patch was judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub resolved: bool,
    /// How the patch applied; `None` when it is empty or no method applied it.
    pub applied: Option<ApplyMethod>,
    /// The evaluator command's exit code; `None` when it did not run or did not finish.
    pub returncode: Option<i32>,
    /// Whether the evaluator command's timeout stopped it.
    pub timed_out: bool,
    /// The last [`OUTPUT_TAIL_BYTES`] of the evaluator command's output; when no method applied
    /// the patch, of the last attempt's output instead. Empty for an empty patch.
    pub output_tail: String,
    /// The reason of the SWE-bench harness's advisory `infra_failure` flag, when it raised one:
    /// the verdict is the harness's own (unresolved, as its run report counts it), and the flag
    /// is counted ([`super::swebench::infra_failure_verdicts`]), never run again.
    pub infra_failure: Option<String>,
}

impl Verdict {
    pub(super) fn unresolved(output_tail: String) -> Verdict {
        Verdict { resolved: false, applied: None, returncode: None, timed_out: false, output_tail, infra_failure: None }
    }
}

/// Why an evaluation has no verdict.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalFailure {
    /// The container runtime failed, or the container could not be brought to a state to judge
    /// in: no outcome, run again.
    #[error("infrastructure failure during evaluation: {0}")]
    Infrastructure(String),
    /// This worker cannot run the task's evaluator (say, it lacks the SWE-bench harness).
    #[error("{0}")]
    Unsupported(String),
    /// The task cannot be evaluated as it is given (a SWE-bench evaluator without its dataset
    /// row, a row the harness refuses): running it again changes nothing until the task does.
    #[error("{0}")]
    InvalidTask(String),
    /// The caller cancelled the evaluation.
    #[error("the evaluation was cancelled")]
    Cancelled,
}

/// Whether a patch counts as empty: nothing but whitespace.
pub fn is_empty_patch(patch: &str) -> bool {
    patch.trim().is_empty()
}

//! The `vcurve` command line: a thin shell over [`vcurve_coordinator::cli`].

fn main() -> std::process::ExitCode {
    vcurve_coordinator::cli::main()
}

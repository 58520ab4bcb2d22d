//! The `vcurve` binary: a thin shell over [`vcurve_cli::cli::main`].

fn main() -> std::process::ExitCode {
    vcurve_cli::cli::main()
}

//! `ratomic`: simulate traffic through the rate limiter, or benchmark it.
//! Run `ratomic --help`.

fn main() -> std::process::ExitCode {
    ratomic_cli::cli::main_with(std::env::args_os())
}

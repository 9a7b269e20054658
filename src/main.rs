//! The doorway: parse the command line, run it, map the result to an exit code.

fn main() -> std::process::ExitCode {
    callsync::cli::main()
}

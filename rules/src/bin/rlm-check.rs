//! `rlm-check FILE...`: validate rule files (the same as `rlm check FILE`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let code = rules::check_command(std::env::args_os().skip(1), &mut std::io::stdout(), &mut std::io::stderr());
    ExitCode::from(code)
}

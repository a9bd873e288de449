//! The `formwork` command line. All work happens in the library; this file only
//! maps a result to an exit code (0 ok/valid, 1 produced but invalid, 2 error).

use std::process::ExitCode;

fn main() -> ExitCode {
    match formwork::cli::main() {
        Ok(code) => code,
        Err(err) => {
            // One line, with the cause chain, never a panic or a backtrace.
            let mut line = format!("error: {err}");
            for cause in err.chain().skip(1) {
                line.push_str(&format!(": {cause}"));
            }
            eprintln!("{line}");
            ExitCode::from(2)
        }
    }
}

//! `formwork compile`: owned by the compile work; replaced as it lands.

use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct CompileArgs {}

pub fn run(_args: CompileArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`formwork compile` is not built yet")
}

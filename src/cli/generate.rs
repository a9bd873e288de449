//! `formwork generate`: owned by the generate work; replaced as it lands.

use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct GenerateArgs {}

pub fn run(_args: GenerateArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`formwork generate` is not built yet")
}

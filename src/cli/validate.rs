//! `formwork validate`: owned by the validate work; replaced as it lands.

use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct ValidateArgs {}

pub fn run(_args: ValidateArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`formwork validate` is not built yet")
}

//! `formwork models`: owned by the models work; replaced as it lands.

use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct ModelsArgs {}

pub fn run(_args: ModelsArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`formwork models` is not built yet")
}

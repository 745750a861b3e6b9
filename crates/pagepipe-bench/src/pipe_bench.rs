//! pipe_bench (being written).
#[derive(clap::Args)]
pub struct Args {}
pub fn run(_a: &Args, _json: bool) -> std::io::Result<()> {
    Ok(())
}

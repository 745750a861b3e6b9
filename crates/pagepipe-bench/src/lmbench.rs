//! lmbench (being written).
#[derive(clap::Args)]
pub struct BwArgs {}
#[derive(clap::Args)]
pub struct LatArgs {}
pub fn run_bw(_a: &BwArgs, _json: bool) -> std::io::Result<()> {
    Ok(())
}
pub fn run_lat(_a: &LatArgs, _json: bool) -> std::io::Result<()> {
    Ok(())
}

//! Not built yet: the security scenario of issue 8. Running it is a finding, so `cargo xtask chaos`
//! fails until it exists.

use super::discover::Baseline;
use super::{Finding, Kind, Settings, Tally};

/// Reports that this scenario does not exist yet.
#[allow(clippy::unused_async)] // the signature every scenario has
pub async fn run(_s: &Settings, _base: &Baseline) -> anyhow::Result<Tally> {
    Ok(Tally {
        scenario: "security",
        count: 0,
        line: "chaos: security not built yet".into(),
        findings: vec![Finding::new(
            Kind::Other,
            "the security scenario is not built yet",
        )],
    })
}

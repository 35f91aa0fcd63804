//! Which Lease a resume adopts: the one the holder's fences were taken under. A fence records
//! its Lease (`AnnotationKeys::lease`); a resume that took another one — the free default
//! Lease while the holder runs under `--lease ns/other` — would release a live run's fences.
//! Pure; the read is in `resume`.

use flux_fence::LeaseConfig;
use flux_fence::keys::{is_dns_label, is_dns_subdomain};

/// The Lease to adopt for a holder whose fences name `named` (one entry per fence; `None` for
/// a fence written before fences recorded their Lease): the one they all name, with
/// `default`'s timing; `default` itself when none names one. `Err` lists the Leases when they
/// differ, or a recorded value that is no `namespace/name`: nothing can be adopted safely.
pub(crate) fn lease_named<'a>(
    default: &LeaseConfig,
    named: impl IntoIterator<Item = Option<&'a str>>,
) -> Result<LeaseConfig, Vec<String>> {
    let mut seen: Vec<&str> = named.into_iter().flatten().collect();
    seen.sort_unstable();
    seen.dedup();
    match seen.as_slice() {
        [] => Ok(default.clone()),
        [one] => match one.split_once('/') {
            Some((ns, name)) if is_dns_label(ns) && is_dns_subdomain(name) => {
                let mut cfg = default.clone();
                cfg.namespace = ns.to_string();
                cfg.name = name.to_string();
                Ok(cfg)
            }
            _ => Err(vec![(*one).to_string()]),
        },
        many => Err(many.iter().map(ToString::to_string).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::lease_named;

    #[test]
    fn release_engine_resume_adopts_the_lease_the_fences_name() {
        let default = flux_fence::LeaseConfig::default();
        let name = |c: &flux_fence::LeaseConfig| format!("{}/{}", c.namespace, c.name);
        // Older fences name none: the configured Lease.
        assert_eq!(
            name(&lease_named(&default, [None, None]).unwrap()),
            "flux-system/flux-handoff"
        );
        // Fences under another Lease: that one, never the (free) default.
        let other =
            lease_named(&default, [Some("apps/deploys"), None, Some("apps/deploys")]).unwrap();
        assert_eq!(name(&other), "apps/deploys");
        assert_eq!(other.duration, default.duration);
        // One holder's fences under different Leases, or a value that is no name: refused.
        assert_eq!(
            lease_named(&default, [Some("a/x"), Some("b/y")]).unwrap_err(),
            vec!["a/x", "b/y"]
        );
        assert_eq!(
            lease_named(&default, [Some("no-slash")]).unwrap_err(),
            vec!["no-slash"]
        );
        assert_eq!(
            lease_named(&default, [Some("Bad/x")]).unwrap_err(),
            vec!["Bad/x"]
        );
    }
}

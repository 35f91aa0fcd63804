//! The doctor's check of forgotten pauses: every pause in the fence scope held past the
//! max-hold it recorded (`--max-hold`), with its holder, reason, age and limit, as one finding.
//! Read-only: nothing is resumed because its time ran out.

use flux_fence::discover::Scope;
use flux_fence::recovery::FenceListing;
use flux_fence::recovery::overdue::OverduePause;
use kube::Client;

use super::{Checkup, Finding};

/// Lists the fences where a handoff of `c` looks for them (`namespaces`, or every namespace)
/// and says whether a pause there is held past its max-hold.
pub(super) async fn check(client: &Client, c: &Checkup, namespaces: &[String]) -> Finding {
    let scope = if c.all_namespaces {
        Scope::All
    } else {
        let mut nss: Vec<String> = Vec::new();
        for ns in namespaces.iter().chain(&c.also_in) {
            if !nss.contains(ns) {
                nss.push(ns.clone());
            }
        }
        Scope::Namespaces(nss)
    };
    let where_ = match &scope {
        Scope::Namespaces(n) => format!("in {}", n.join(", ")),
        _ => "in all namespaces".to_string(),
    };
    let check = format!("no pause held past its max-hold {where_}");
    let recovery = crate::fences::recovery(client.clone(), c.keys.clone(), c.lease.clone());
    match recovery.scope(scope).list().await {
        Ok(listing) => finding(check, &listing),
        Err(e) => Finding::fail(
            check,
            format!("cannot list fences: {}", flux_fence::one_line(&e)),
        ),
    }
}

/// `ok` when no pause is overdue, else one `FAIL` naming each (pure).
pub(super) fn finding(check: String, listing: &FenceListing) -> Finding {
    if listing.overdue.is_empty() {
        return Finding::ok(check);
    }
    let lines: Vec<String> = listing.overdue.iter().map(line).collect();
    Finding::fail(
        check,
        format!(
            "{}\nresume each when its work is done (`flux-handoff fences --overdue` prints the \
             command); nothing resumes it automatically",
            lines.join("\n")
        ),
    )
}

/// `pause by H (epoch E): held D, max-hold M, reason: R; fenced: ks/ns/a, ...`.
fn line(p: &OverduePause) -> String {
    let reason = p
        .reason
        .as_deref()
        .map(|r| format!(", reason: {}", printable(r)))
        .unwrap_or_default();
    let fenced: Vec<String> = p
        .objects
        .iter()
        .map(flux_fence::recovery::short_ref)
        .collect();
    format!(
        "  pause by {} (epoch {}): {}{reason}; fenced: {}",
        printable(&p.holder),
        p.epoch,
        p.held_line(),
        fenced.join(", ")
    )
}

/// `s` with every control character as a space: an annotation someone else wrote cannot add
/// a line to doctor's output.
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

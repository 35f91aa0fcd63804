//! How `fences` prints what it found: a table a person reads at a glance (stdout), or facts in
//! the one JSON document.

use std::fmt::Write as _;

use flux_fence::discover::Scope;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use flux_fence::recovery::{Action, LeaseView, Liveness, Row, Snapshot};

use super::Context;
use super::render::{self, age, duration_since};
use crate::output::Output;

/// Prints the table (text) or records the facts (json).
pub fn emit(ctx: &Context, snap: &Snapshot, rows: &[Row], out: &mut Output) {
    out.fact("scope", scope_json(&ctx.scope));
    out.fact("lease", lease_json(ctx, snap.lease.as_ref(), snap.now));
    out.fact(
        "fences",
        Value::Array(
            rows.iter()
                .map(|r| render::row_json(r, snap.now, &ctx.suffix))
                .collect(),
        ),
    );
    if !out.is_json() {
        print!("{}", render(ctx, snap, rows));
    }
}

fn scope_json(scope: &Scope) -> Value {
    match scope {
        Scope::All => json!("all namespaces"),
        Scope::Namespaces(n) => json!(n),
    }
}

fn lease_json(ctx: &Context, lease: Option<&LeaseView>, now: Timestamp) -> Value {
    match lease {
        None => json!({ "name": ctx.lease_name(), "exists": false }),
        Some(l) => json!({
            "name": ctx.lease_name(),
            "exists": true,
            "holder": l.found.holder,
            "epoch": l.found.epoch,
            "renewed": l.found.renewed.map(|t| t.to_string()),
            "renewed_seconds_ago": l.found.renewed.map(|t| duration_since(now, t).as_secs()),
            "expires": l.expires_at().map(|t| t.to_string()),
            "expired": l.found.expired,
            "parked": l.found.parked,
            "release_command": release_lease_command(ctx, l),
        }),
    }
}

/// The command that releases the Lease: a parked pause resumes as is; a holder that did not
/// park it looks live, so its caller must attest that its process has exited.
fn release_lease_command(ctx: &Context, l: &LeaseView) -> Option<String> {
    let exited = if l.found.parked {
        ""
    } else {
        " --holder-exited"
    };
    l.found.holder.as_ref().map(|h| {
        format!(
            "flux-handoff resume --holder {h}{exited} --lease {}{}",
            ctx.lease_name(),
            ctx.suffix
        )
    })
}

/// The Lease line (and how to release it).
fn lease_lines(ctx: &Context, lease: Option<&LeaseView>, now: Timestamp) -> String {
    let mut s = String::new();
    let Some(l) = lease else {
        let _ = writeln!(s, "LEASE {}: absent", ctx.lease_name());
        return s;
    };
    let Some(h) = &l.found.holder else {
        let _ = writeln!(
            s,
            "LEASE {}: free (epoch {})",
            ctx.lease_name(),
            l.found.epoch
        );
        return s;
    };
    let renewed = l.found.renewed.map_or_else(
        || "never renewed".to_string(),
        |t| format!("renewed {} ago", age(duration_since(now, t))),
    );
    let state = match (l.found.parked, l.found.expired) {
        (true, _) => "PAUSED",
        (false, true) => "EXPIRED",
        (false, false) => "LIVE",
    };
    let _ = writeln!(
        s,
        "LEASE {}: held by {h} (epoch {}), {renewed}, {state}",
        ctx.lease_name(),
        l.found.epoch
    );
    if let Some(cmd) = release_lease_command(ctx, l) {
        let when = if l.found.parked {
            "release once its fences are gone"
        } else {
            "once its process has exited and its fences are gone"
        };
        let _ = writeln!(s, "  {when}: {cmd}");
    }
    s
}

/// The text table.
pub fn render(ctx: &Context, snap: &Snapshot, rows: &[Row]) -> String {
    let mut s = lease_lines(ctx, snap.lease.as_ref(), snap.now);
    let now = snap.now;
    if rows.is_empty() {
        let where_ = match &ctx.scope {
            Scope::Namespaces(n) => format!("namespace(s) {}", n.join(", ")),
            Scope::All => "all namespaces".into(),
        };
        let how = if ctx.listing == flux_fence::discover::Listing::FullScan {
            ""
        } else {
            " (labelled ones; --full-scan also finds fences an older version wrote)"
        };
        let _ = writeln!(s, "no fences in {where_}{how}");
        return s;
    }
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                render::short_ref(&r.object),
                if r.child { "target" } else { "parent" }.into(),
                r.holder.clone().unwrap_or_else(|| "?".into()),
                r.epoch.map_or_else(|| "?".into(), |e| e.to_string()),
                r.age.map_or_else(|| "?".into(), age),
                r.liveness
                    .as_ref()
                    .map_or("MALFORMED", Liveness::label)
                    .into(),
            ]
        })
        .collect();
    let head = ["OBJECT", "ROLE", "HOLDER", "EPOCH", "AGE", "STATE"];
    let mut width = head.map(str::len);
    for c in &cells {
        for (w, v) in width.iter_mut().zip(c) {
            *w = (*w).max(v.len());
        }
    }
    let line = |cols: [&str; 6]| {
        let mut l = String::new();
        for (i, (c, w)) in cols.iter().zip(width).enumerate() {
            if i + 1 == cols.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ");
            }
        }
        l
    };
    let _ = writeln!(s, "{}", line(head));
    for (row, c) in rows.iter().zip(&cells) {
        let _ = writeln!(s, "{}", line(c.each_ref().map(String::as_str)));
        if let Some(l) = &row.liveness {
            let _ = writeln!(s, "  evidence: {}", render::evidence(l, now));
        }
        match (&row.action, render::release_command(row, &ctx.suffix)) {
            (_, Some(command)) => {
                let _ = writeln!(s, "  release:  {command}");
            }
            (Action::Withheld(w), None) => {
                let _ = writeln!(s, "  withheld: {}", render::withhold(w));
            }
            _ => {}
        }
    }
    s
}

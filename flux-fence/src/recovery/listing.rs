//! The fence listing: every fence in the scope and the Lease, judged, with the exact release
//! command of each, as a table a person reads at a glance ([`FenceListing::text`]) or as JSON
//! facts ([`FenceListing::facts`]), the commands spelled by the application. Read-only.

use std::fmt::{self, Write as _};

use serde_json::{Value, json};

use super::assess::{Action, LeaseView, Liveness, Row, assess};
use super::ends::Ending;
use super::overdue::{OverduePause, overdue, overdue_pauses};
use super::run::{Recovery, Snapshot};
use super::words::{age, duration_since, short_ref};
use crate::FenceError;
use crate::command::{Command, Spell};
use crate::discover::{Listing, Scope};
use crate::lease::decide::format_max_hold;

/// What [`Recovery::list`] found: the snapshot, every fence judged, and how to name things.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FenceListing {
    /// The look at the cluster.
    pub(crate) snapshot: Snapshot,
    /// Every fence, judged (same order as discovered).
    pub(crate) rows: Vec<Row>,
    /// The Lease, `namespace/name`.
    pub(crate) lease_name: String,
    /// Where fences were looked for.
    pub(crate) scope: Scope,
    /// How fenced objects were listed.
    pub(crate) listing: Listing,
    /// The pauses held past their max-hold ([`overdue_pauses`]): listed, never released.
    pub overdue: Vec<OverduePause>,
}

impl Recovery {
    /// Discovery and the Lease as read now, every fence judged against the Lease. Read-only.
    ///
    /// # Errors
    /// API failures, as [`Recovery::snapshot`].
    pub async fn list(&self) -> Result<FenceListing, FenceError> {
        let snapshot = self.snapshot().await?;
        let rows = assess(
            &snapshot.report,
            &self.target(),
            snapshot.lease.as_ref(),
            &self.child,
        );
        let overdue = overdue_pauses(&snapshot.report.fences, &self.child, snapshot.now);
        Ok(FenceListing {
            overdue,
            snapshot,
            rows,
            lease_name: self.target(),
            scope: self.scope.clone(),
            listing: self.listing,
        })
    }
}

impl FenceListing {
    /// The facts of `--output json`: `scope`, `lease` and `fences`, the commands spelled by
    /// `spell`.
    #[must_use]
    pub fn facts(&self, spell: Spell) -> Vec<(&'static str, Value)> {
        let now = self.snapshot.now;
        let scope = match &self.scope {
            Scope::All => json!("all namespaces"),
            Scope::Namespaces(n) => json!(n),
        };
        let name = &self.lease_name;
        let lease = match self.snapshot.lease.as_ref() {
            None => json!({ "name": name, "exists": false }),
            Some(l) => json!({
                "name": name,
                "exists": true,
                "holder": l.found.holder,
                "epoch": l.found.epoch,
                "renewed": l.found.renewed.map(|t| t.to_string()),
                "renewed_seconds_ago": l.found.renewed.map(|t| duration_since(now, t).as_secs()),
                "expires": l.expires_at().map(|t| t.to_string()),
                "expired": l.found.expired,
                "parked": l.found.parked,
                "release_command": self.release_lease(l).as_ref().map(spell),
                "record": self.snapshot.record.as_ref().map(|r| json!({
                    "owner": r.owner,
                    "members": r.members.iter().map(ToString::to_string).collect::<Vec<_>>(),
                })),
            }),
        };
        let mut lease = lease;
        if let (Some(l), Some(obj)) = (self.snapshot.lease.as_ref(), lease.as_object_mut()) {
            obj.insert("max_hold".into(), json!(l.max_hold.map(format_max_hold)));
            obj.insert("overdue".into(), json!(self.lease_overdue(l)));
        }
        let rows = self.rows.iter();
        let fences: Vec<Value> = rows.map(|r| r.to_json(now, spell)).collect();
        vec![
            ("scope", scope),
            ("lease", lease),
            ("fences", Value::Array(fences)),
            ("overdue", self.overdue_facts(spell)),
        ]
    }

    /// The fact `overdue`: each pause held past its max-hold, with the command that resumes
    /// it when its Lease is parked.
    #[must_use]
    pub(crate) fn overdue_facts(&self, spell: Spell) -> Value {
        let pauses = self.overdue.iter().map(|p| {
            let mut v = p.to_json();
            v["resume_command"] = json!(self.overdue_resume(p).as_ref().map(spell));
            v["ends"] = json!(self.ending(p).describe(&self.lease_name, spell));
            v
        });
        Value::Array(pauses.collect())
    }

    /// Whether the Lease's holder has held it (since `acquireTime`) past the max-hold it wrote.
    fn lease_overdue(&self, l: &LeaseView) -> bool {
        l.found.holder.is_some()
            && matches!((l.found.acquired, l.max_hold), (Some(a), Some(m)) if overdue(a, m, self.snapshot.now))
    }

    /// What will end an overdue pause, judged as recovery judges it.
    fn ending(&self, p: &OverduePause) -> Ending {
        let lease = self.snapshot.lease.as_ref().map(|l| &l.found);
        p.ending(&self.snapshot.report.fences, lease, &self.lease_name)
    }

    /// The command that resumes an overdue pause: only a deliberate pause of a holder
    /// `resume --holder` takes; a `run` ends with its command.
    fn overdue_resume(&self, p: &OverduePause) -> Option<Command> {
        let valid = p.holder.parse::<crate::Holder>().is_ok();
        match self.ending(p) {
            e @ Ending::Resume { .. } if valid => e.command(&self.lease_name),
            _ => None,
        }
    }

    /// The overdue pauses, each as its lines (see [`FenceListing::overdue_text`]).
    fn overdue_lines(&self, f: &mut dyn fmt::Write, spell: Spell) -> fmt::Result {
        for p in &self.overdue {
            let reason = p
                .reason
                .as_deref()
                .map(|r| format!(", reason: {}", crate::one_line::printable(r)))
                .unwrap_or_default();
            writeln!(
                f,
                "OVERDUE pause by {} (epoch {}): {}{reason}",
                crate::one_line::printable(&p.holder),
                p.epoch,
                p.held_line()
            )?;
            let objects: Vec<String> = p.objects.iter().map(short_ref).collect();
            writeln!(f, "  fenced:   {}", objects.join(", "))?;
            let ends = match (self.overdue_resume(p), self.ending(p)) {
                (Some(cmd), _) => spell(&cmd),
                // A name someone else wrote is never a command.
                (None, Ending::Resume { .. }) => format!(
                    "parked under a name `resume --holder` does not take: see `{}`",
                    spell(&Command::Fences { lease: None })
                ),
                (None, e) => e.describe(&self.lease_name, spell),
            };
            writeln!(f, "  resume:   {ends}")?;
        }
        Ok(())
    }

    /// Only the pauses held past their max-hold (`fences --overdue`), or one line saying there
    /// is none and where it looked. Nothing is resumed because of it.
    #[must_use]
    pub fn overdue_text(&self, spell: Spell) -> String {
        let mut text = String::new();
        if self.overdue.is_empty() {
            let _ = writeln!(text, "no pause held past its max-hold in {}", self.where_());
        } else {
            let _ = self.overdue_lines(&mut text, spell);
            let _ = writeln!(
                text,
                "{} pause(s) held past their max-hold; nothing is resumed automatically",
                self.overdue.len()
            );
        }
        text
    }

    /// `namespace(s) a, b` or `all namespaces`.
    fn where_(&self) -> String {
        match &self.scope {
            Scope::Namespaces(n) => format!("namespace(s) {}", n.join(", ")),
            Scope::All => "all namespaces".into(),
        }
    }

    /// The command that releases the Lease: a parked pause resumes as is; a holder that did
    /// not park it looks live, so its caller must attest that its process has exited.
    fn release_lease(&self, l: &LeaseView) -> Option<Command> {
        // Only a holder `resume --holder` takes: a name someone else wrote is never a command.
        let valid = |h: &&String| h.parse::<crate::Holder>().is_ok();
        l.found
            .holder
            .as_ref()
            .filter(valid)
            .map(|h| Command::Resume {
                holder: h.clone(),
                lease: Some(self.lease_name.clone()),
                exited: !l.found.parked,
            })
    }

    /// The Lease line (and how to release it).
    fn lease_lines(&self, f: &mut dyn fmt::Write, spell: Spell) -> fmt::Result {
        let name = &self.lease_name;
        let Some(l) = self.snapshot.lease.as_ref() else {
            return writeln!(f, "LEASE {name}: absent");
        };
        let Some(h) = &l.found.holder else {
            writeln!(f, "LEASE {name}: free (epoch {})", l.found.epoch)?;
            return self.record_line(f);
        };
        let now = self.snapshot.now;
        let renewed = l.found.renewed.map_or_else(
            || "never renewed".to_string(),
            |t| format!("renewed {} ago", age(duration_since(now, t))),
        );
        let state = match (l.found.parked, l.found.expired) {
            (true, _) => "PAUSED",
            (false, true) => "EXPIRED",
            (false, false) => "LIVE",
        };
        let epoch = l.found.epoch;
        let limit = l.max_hold.map_or_else(String::new, |m| {
            let over = if self.lease_overdue(l) {
                ", OVERDUE"
            } else {
                ""
            };
            format!(", max-hold {}{over}", format_max_hold(m))
        });
        writeln!(
            f,
            "LEASE {name}: held by {} (epoch {epoch}), {renewed}, {state}{limit}",
            crate::one_line::printable(h)
        )?;
        self.record_line(f)?;
        if let Some(cmd) = self.release_lease(l) {
            let when = if l.found.parked {
                "release once its fences are gone"
            } else {
                "once its process has exited and its fences are gone"
            };
            writeln!(f, "  {when}: {}", spell(&cmd))?;
        }
        Ok(())
    }
}

impl FenceListing {
    /// The chain record on the Lease, when there is one: whose, and every member.
    fn record_line(&self, f: &mut dyn fmt::Write) -> fmt::Result {
        let Some(r) = &self.snapshot.record else {
            return Ok(());
        };
        let members: Vec<String> = r.members.iter().map(ToString::to_string).collect();
        writeln!(f, "  records for {}: {}", r.owner, members.join(", "))
    }
}

/// The cells of one row: object, role, holder, epoch, age, state.
fn cells(r: &Row) -> [String; 6] {
    [
        short_ref(&r.object),
        if r.child { "target" } else { "parent" }.into(),
        r.holder.as_deref().map_or_else(
            || "?".into(),
            |h| crate::one_line::printable(h).into_owned(),
        ),
        r.epoch.map_or_else(|| "?".into(), |e| e.to_string()),
        r.age.map_or_else(|| "?".into(), age),
        r.liveness
            .as_ref()
            .map_or("MALFORMED", Liveness::label)
            .into(),
    ]
}

impl FenceListing {
    /// The Lease line, then a table of the fences with each one's evidence and release
    /// command (or why a release is withheld), the commands spelled by `spell`.
    #[must_use]
    pub fn text(&self, spell: Spell) -> String {
        let mut text = String::new();
        let _ = self.write_text(&mut text, spell);
        text
    }

    fn write_text(&self, f: &mut dyn fmt::Write, spell: Spell) -> fmt::Result {
        self.lease_lines(f, spell)?;
        if self.rows.is_empty() {
            let where_ = self.where_();
            let how = if self.listing == Listing::FullScan {
                ""
            } else {
                " (labelled ones; --full-scan also finds fences an older version wrote)"
            };
            return writeln!(f, "no fences in {where_}{how}");
        }
        let cells: Vec<[String; 6]> = self.rows.iter().map(cells).collect();
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
        writeln!(f, "{}", line(head))?;
        for (row, c) in self.rows.iter().zip(&cells) {
            writeln!(f, "{}", line(c.each_ref().map(String::as_str)))?;
            if let Some(l) = &row.liveness {
                writeln!(f, "  evidence: {}", l.describe(self.snapshot.now, spell))?;
            }
            match (&row.action, row.release()) {
                (_, Some(command)) => writeln!(f, "  release:  {}", spell(&command))?,
                (Action::Withheld(w), None) => writeln!(f, "  withheld: {w}")?,
                _ => {}
            }
        }
        self.overdue_lines(f, spell)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kube::api::{ApiResource, GroupVersionKind};

    use super::*;
    use crate::ObjectRef;
    use crate::command::test_spell;
    use crate::discover::{FenceReport, FoundLease};
    use crate::recovery::Orphan;

    fn listing(lease: Option<LeaseView>, rows: Vec<Row>, scope: Scope) -> FenceListing {
        let now = "2026-01-01T00:10:00Z".parse().unwrap();
        let report = FenceReport {
            lease: None,
            fences: Vec::new(),
        };
        FenceListing {
            snapshot: Snapshot {
                report,
                lease,
                now,
                record: None,
                record_unknown: Vec::new(),
            },
            rows,
            lease_name: "fs/l".into(),
            scope,
            listing: Listing::Labelled,
            overdue: Vec::new(),
        }
    }

    fn held(parked: bool) -> LeaseView {
        LeaseView {
            found: FoundLease {
                namespace: "fs".into(),
                name: "l".into(),
                holder: Some("h".into()),
                epoch: 3,
                acquired: None,
                renewed: Some("2026-01-01T00:09:50Z".parse().unwrap()),
                expired: false,
                parked,
                release_patch: None,
            },
            duration: Some(Duration::from_secs(30)),
            resource_version: Some("9".into()),
            max_hold: None,
        }
    }

    #[test]
    fn an_empty_scope_says_where_it_looked() {
        let l = listing(
            None,
            Vec::new(),
            Scope::Namespaces(vec!["a".into(), "b".into()]),
        );
        assert_eq!(
            l.text(&test_spell),
            "LEASE fs/l: absent\nno fences in namespace(s) a, b (labelled ones; --full-scan also \
             finds fences an older version wrote)\n"
        );
        assert_eq!(
            l.facts(&test_spell)[1].1,
            json!({"name": "fs/l", "exists": false})
        );
    }

    #[test]
    fn the_lease_line_says_how_to_release_it() {
        let table = [
            (
                false,
                "LEASE fs/l: held by h (epoch 3), renewed 10s ago, LIVE\n  once its process has \
                 exited and its fences are gone: app resume --holder h --holder-exited \
                 --lease fs/l\n",
            ),
            (
                true,
                "LEASE fs/l: held by h (epoch 3), renewed 10s ago, PAUSED\n  release once its \
                 fences are gone: app resume --holder h --lease fs/l\n",
            ),
        ];
        for (parked, want) in table {
            let l = listing(Some(held(parked)), Vec::new(), Scope::All);
            let text = l.text(&test_spell);
            assert_eq!(
                text.lines().take(2).collect::<Vec<_>>().join("\n") + "\n",
                want
            );
        }
    }

    #[test]
    fn a_row_shows_its_evidence_and_release_command() {
        let gvk = GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization");
        let ks = ApiResource::from_gvk_with_plural(&gvk, "kustomizations");
        let row = Row {
            object: ObjectRef::new(ks, "apps", "a"),
            holder: Some("h".into()),
            epoch: Some(3),
            age: Some(Duration::from_secs(65)),
            child: true,
            liveness: Some(Liveness::Orphaned(Orphan::LeaseFree)),
            action: Action::Release { patch: "[]".into() },
        };
        let l = listing(None, vec![row], Scope::All);
        let want = "LEASE fs/l: absent\n\
                    OBJECT     ROLE    HOLDER  EPOCH  AGE    STATE\n\
                    ks/apps/a  target  h       3      1m05s  ORPHANED-LOOKING\n  \
                    evidence: the Lease has no holder\n  \
                    release:  app fences release ks/apps/a --holder h\n";
        assert_eq!(l.text(&test_spell), want);
        assert_eq!(l.facts(&test_spell)[2].1[0]["release_patch"], json!([]));
    }

    #[test]
    fn max_hold_an_overdue_pause_is_listed_with_holder_reason_age_and_limit() {
        let gvk = GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization");
        let ks = ApiResource::from_gvk_with_plural(&gvk, "kustomizations");
        let mut lease = held(true);
        lease.max_hold = Some(Duration::from_mins(1));
        lease.found.acquired = Some("2026-01-01T00:00:00Z".parse().unwrap());
        let mut l = listing(Some(lease), Vec::new(), Scope::All);
        assert_eq!(
            l.overdue_text(&test_spell),
            "no pause held past its max-hold in all namespaces\n"
        );
        let p = super::super::overdue::OverduePause {
            holder: "h".into(),
            epoch: 3,
            reason: Some("rotate".into()),
            since: "2026-01-01T00:00:00Z".parse().unwrap(),
            age: Duration::from_mins(10),
            max_hold: Duration::from_mins(1),
            targets: vec![ObjectRef::new(ks.clone(), "apps", "a")],
            objects: vec![ObjectRef::new(ks, "apps", "a")],
        };
        l.overdue = vec![p];
        assert_eq!(
            l.overdue_text(&test_spell),
            "OVERDUE pause by h (epoch 3): held 10m00s, max-hold 1m, reason: rotate\n  \
             fenced:   ks/apps/a\n  \
             resume:   app resume --holder h --lease fs/l\n\
             1 pause(s) held past their max-hold; nothing is resumed automatically\n"
        );
        assert!(
            l.text(&test_spell).starts_with(
                "LEASE fs/l: held by h (epoch 3), renewed 10s ago, PAUSED, max-hold 1m, OVERDUE\n"
            ),
            "{l:?}"
        );
        let facts = l.facts(&test_spell);
        assert_eq!(facts[1].1["overdue"], json!(true));
        assert_eq!(facts[3].0, "overdue");
        assert_eq!(facts[3].1[0]["max_hold"], json!("1m"));
        assert_eq!(facts[3].1[0]["age_seconds"], json!(600));
    }
}

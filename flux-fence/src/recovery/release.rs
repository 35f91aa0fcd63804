//! Releasing one named fence on an operator's word (`flux-handoff fences release`): read the
//! object, check it carries a well-formed fence of the named holder with a CAS release patch,
//! refuse a parent while a child of the same holder is still held anywhere in the scope
//! ([`Recovery::prepare_release`], read-only), then adopt the recorded fence and release it
//! with ONE CAS ([`Recovery::release_prepared`]). Every refusal changes nothing.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};

use super::assess::{Withhold, held_children};
use super::run::Recovery;
use super::words::{age, short_ref};
use crate::api::error;
use crate::command::{Command, Spell};
use crate::discover::{self, FoundState, ReleasePlan};
use crate::engine::{Member, Rules, Settled, release_members};
use crate::lease::{merge_found, read_members, read_record};
use crate::mark::{MarkAt, RecordedMark};
use crate::release::{Moved, decide_release_marks};
use crate::{FenceError, Fencer, Holder, LeaseConfig, ObjectRef, OwnerValue};

/// A fence checked and ready to release: what was observed, and the CAS patch to send.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ReadyRelease {
    /// The fenced object.
    pub object: ObjectRef,
    /// Its owner annotation (`holder;epoch`).
    pub owner: OwnerValue,
    /// How long it has been fenced.
    pub age: Duration,
    /// The recorded marks and their prior values.
    pub marks: Vec<RecordedMark>,
    /// The `resourceVersion` observed.
    pub resource_version: String,
    /// The CAS release patch (compact JSON).
    pub patch: String,
    /// The Lease's holder when it could be read (evidence for notes only).
    pub lease_holder: Option<String>,
    /// `Some(pause)`: another writer set the pause back to false (a person's `flux resume`),
    /// the only moved mark; the patch keeps their value ([`crate::release::ReleaseMarks`]).
    pub kept_resume: Option<MarkAt>,
}

/// Why a fence is not released. Nothing was changed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ReleaseRefusal {
    /// The object does not exist.
    NotFound,
    /// The object carries no fence.
    NoFence,
    /// The fence annotations do not parse.
    Malformed,
    /// Another holder owns the fence.
    OtherHolder {
        /// The holder found.
        found: String,
        /// The holder named.
        named: String,
    },
    /// The release cannot be justified (a moved mark, or a parent whose children are held).
    Withheld(Withhold),
    /// The fence changed hands (or vanished) between the check and the release.
    ChangedHands,
    /// The object is gone or was recreated.
    Gone,
    /// The fence is now another holder's (or nobody's).
    NowFencedBy(Option<String>),
    /// The release kept the fence, with why (in words).
    Kept(String),
    /// `--keep-moved`, but no mark moved: a plain release is the right one.
    NothingMoved,
    /// The object changed since it was read (a tested value moved again).
    MovedSinceRead,
    /// The holder holds the Lease its fence names (`namespace/name`) without having parked it:
    /// its work may still run. Only its own cleanup, `resume` after it exited, or recovery
    /// after its full Lease duration may release it.
    HolderAtWork {
        /// The holder.
        holder: String,
        /// The Lease it holds.
        lease: String,
    },
}

/// A refused release of `object`, in words: `ks/ns/name ...; nothing changed`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Refused {
    /// The object named.
    pub object: ObjectRef,
    /// Why.
    pub reason: ReleaseRefusal,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = short_ref(&self.object);
        match &self.reason {
            ReleaseRefusal::NotFound => write!(f, "{name} not found; nothing to release"),
            ReleaseRefusal::NoFence => write!(f, "{name} carries no fence; nothing to release"),
            ReleaseRefusal::Malformed => write!(
                f,
                "{name}: malformed fence annotations; inspect it and fix by hand"
            ),
            ReleaseRefusal::OtherHolder { found, named } => {
                write!(
                    f,
                    "{name} is fenced by {found}, not {named}; nothing changed"
                )
            }
            ReleaseRefusal::Withheld(w @ Withhold::ChildrenHeld { .. }) => {
                write!(f, "{name} is {w}; nothing changed")
            }
            ReleaseRefusal::Withheld(w) => write!(f, "{name}: {w}; nothing changed"),
            ReleaseRefusal::ChangedHands => {
                write!(f, "{name} changed hands since it was read; nothing changed")
            }
            ReleaseRefusal::Gone => write!(f, "{name} is gone or was recreated; nothing changed"),
            ReleaseRefusal::NowFencedBy(h) => write!(
                f,
                "{name} is now fenced by {}; nothing changed",
                h.as_deref().unwrap_or("nobody")
            ),
            ReleaseRefusal::Kept(why) => write!(f, "{name} kept: {why}; nothing changed"),
            ReleaseRefusal::NothingMoved => write!(
                f,
                "{name}: no mark moved: `fences release` without --keep-moved releases it; \
                 nothing changed"
            ),
            ReleaseRefusal::MovedSinceRead => {
                write!(f, "{name} changed since it was read; nothing changed")
            }
            ReleaseRefusal::HolderAtWork { holder, lease } => write!(
                f,
                "{name}: its holder {holder} still holds the Lease {lease} and may still be \
                 working; nothing changed (once its process has exited add --holder-exited; if \
                 it is gone, `fences recover` releases it after its full Lease duration)"
            ),
        }
    }
}

impl ReadyRelease {
    /// What was observed, one line each: the fence, each mark, a note when the holder still
    /// holds the Lease `lease` (`ns/name`), and the patch.
    #[must_use]
    pub fn lines(&self, lease: &str, spell: Spell) -> Vec<String> {
        let (name, owner, rv) = (short_ref(&self.object), &self.owner, &self.resource_version);
        let mut lines = vec![format!(
            "observed: {name} fenced by {owner} {} ago, resourceVersion {rv}",
            age(self.age)
        )];
        for m in &self.marks {
            let prior = m.prior.as_ref();
            let prior = prior.map_or_else(|| "absent".to_string(), ToString::to_string);
            lines.push(format!("  mark {}: {} (prior {prior})", m.at, m.value));
        }
        if let Some(at) = &self.kept_resume {
            lines.push(format!(
                "  keeping {at} as another writer set it (a `flux resume` while paused); the \
                 other marks are restored"
            ));
        }
        let holder = &owner.holder;
        if self.lease_holder.as_deref() == Some(holder.as_str()) {
            let resume = spell(&Command::Resume {
                holder: holder.to_string(),
                lease: Some(lease.to_string()),
                exited: false,
            });
            lines.push(format!(
                "note: {holder} still holds the Lease {lease}; release it afterwards with \
                 `{resume}` (add --holder-exited unless it was parked by `pause`)"
            ));
        }
        lines.push(format!("patch: {}", self.patch));
        lines
    }

    /// The same as JSON facts: `object`, `owner`, `observed_resource_version`, `patch`, and
    /// `kept_resume` (the pointer) when the patch keeps a person's resume.
    #[must_use]
    pub fn facts(&self) -> Vec<(&'static str, Value)> {
        let patch = serde_json::from_str(&self.patch).unwrap_or_else(|_| json!(self.patch));
        let mut facts = vec![
            ("object", json!(short_ref(&self.object))),
            ("owner", json!(self.owner.to_string())),
            ("observed_resource_version", json!(self.resource_version)),
            ("patch", patch),
        ];
        if let Some(at) = &self.kept_resume {
            facts.push(("kept_resume", json!(at.pointer())));
        }
        facts
    }
}

impl Recovery {
    /// Checks that `obj` carries a well-formed fence of `holder` with a CAS release, and, for
    /// a parent (no child mark), that `holder` holds no child anywhere in the scope. Read-only.
    ///
    /// # Errors
    /// API failures ([`FenceError::Forbidden`] naming the verb on 403).
    pub async fn prepare_release(
        &self,
        obj: &ObjectRef,
        holder: &Holder,
    ) -> Result<Result<ReadyRelease, Refused>, FenceError> {
        let refuse = |reason| {
            Ok(Err(Refused {
                object: obj.clone(),
                reason,
            }))
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &obj.namespace, &obj.resource);
        let read = match api.get_opt(&obj.name).await {
            Ok(Some(o)) => serde_json::to_value(o).map_err(|e| FenceError::Api {
                verb: "get",
                resource: obj.resource_name(),
                target: obj.target(),
                source: Box::new(kube::Error::SerdeError(e)),
            })?,
            Ok(None) => return refuse(ReleaseRefusal::NotFound),
            Err(e) => return Err(error("get", obj.resource_name(), obj.target(), e)),
        };
        let Some(found) = discover::inspect(&read, &obj.resource, &self.keys, self.clock.now())
        else {
            return refuse(ReleaseRefusal::NoFence);
        };
        let FoundState::Fence {
            owner,
            age,
            marks,
            release,
            lease: taken_under,
            ..
        } = &found.state
        else {
            return refuse(ReleaseRefusal::Malformed);
        };
        if owner.holder != *holder {
            return refuse(ReleaseRefusal::OtherHolder {
                found: owner.holder.to_string(),
                named: holder.to_string(),
            });
        }
        if let Some(reason) = self.at_work(taken_under.as_deref(), holder).await? {
            return refuse(reason);
        }
        let patch = match release {
            ReleasePlan::Patch(p) => p.clone(),
            ReleasePlan::Withheld { at } => {
                return refuse(ReleaseRefusal::Withheld(Withhold::MarkMoved(at.clone())));
            }
        };
        if !self.child.is_child(marks) {
            let mut all = discover::discover_listed(
                &self.client,
                &self.keys,
                &self.kinds,
                &self.scope,
                None,
                &*self.clock,
                self.listing,
            )
            .await?;
            // The children recorded on the Lease the parent was fenced under, wherever they are.
            let lease = self.lease_of(taken_under.as_deref());
            if let Some(record) = read_record(&self.client, &self.keys, &lease).await?
                && record.owner_value().is_ok_and(|o| o.holder == *holder)
            {
                let now = self.clock.now();
                let members =
                    read_members(&self.client, &self.keys, &self.recorded, &record, now).await?;
                merge_found(&mut all.fences, members.found);
            }
            let children = held_children(holder.as_str(), &found, &all.fences, &self.child);
            if !children.is_empty() {
                let holder = holder.to_string();
                return refuse(ReleaseRefusal::Withheld(Withhold::ChildrenHeld {
                    holder,
                    children,
                }));
            }
        }
        let rv = read
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str);
        // What the patch does with a person's resume, from the same read it was decided on.
        let kept_resume = crate::decide::held_from_annotations(&read, &self.keys)
            .ok()
            .and_then(|(held, _)| {
                decide_release_marks(Some(&read), &self.keys, &held, Moved::Withhold).ok()
            })
            .and_then(|d| d.marks.resumed);
        Ok(Ok(ReadyRelease {
            object: obj.clone(),
            owner: owner.clone(),
            age: *age,
            marks: marks.clone(),
            resource_version: rv.unwrap_or_default().to_string(),
            patch,
            lease_holder: self.lease_holder().await,
            kept_resume,
        }))
    }

    /// Releases the fence checked by [`Recovery::prepare_release`] through the release
    /// engine ([`crate::engine::release_members`]): adopted only on exactly the owner value
    /// checked (re-read, never assumed), released with a CAS restoring every prior value.
    /// Returns the `resourceVersion` after the release, when known.
    ///
    /// # Errors
    /// API failures.
    pub async fn release_prepared(
        &self,
        ready: &ReadyRelease,
    ) -> Result<Result<Option<String>, Refused>, FenceError> {
        let refuse = |reason| {
            Ok(Err(Refused {
                object: ready.object.clone(),
                reason,
            }))
        };
        let fencer = Fencer::new(self.client.clone(), self.keys.clone(), ready.owner.clone())
            .with_clock(Arc::clone(&self.clock));
        let member = Member::judged(
            ready.object.clone(),
            ready.owner.holder.to_string(),
            Some(ready.owner.epoch.0),
            self.child.is_child(&ready.marks),
        );
        let settled = release_members(&fencer, vec![member], None, Rules::one_holder()).await;
        match settled.into_iter().next() {
            Some(Settled::Released {
                resource_version, ..
            }) => Ok(Ok(resource_version)),
            Some(Settled::Gone { .. }) => refuse(ReleaseRefusal::Gone),
            Some(Settled::NotOurs { found: None, .. }) => refuse(ReleaseRefusal::ChangedHands),
            Some(Settled::NotOurs { found, .. }) => refuse(ReleaseRefusal::NowFencedBy(found)),
            Some(Settled::Kept { guard, why }) => {
                (*guard).leave_in_place();
                refuse(ReleaseRefusal::Kept(format!("{why:?}")))
            }
            Some(Settled::Failed { error, .. }) => Err(error),
            _ => refuse(ReleaseRefusal::ChangedHands),
        }
    }

    /// The caller attests that the holder it names to [`Recovery::prepare_release`] and
    /// [`Recovery::prepare_keep_moved`] has exited (`fences release --holder-exited`): a fence
    /// of a holder that still holds its Lease is then released. Without it (the default) such a
    /// fence is refused ([`ReleaseRefusal::HolderAtWork`]), nothing changed.
    #[must_use]
    pub fn holder_exited(mut self, on: bool) -> Self {
        self.holder_exited = on;
        self
    }

    /// [`ReleaseRefusal::HolderAtWork`] when `holder` holds the Lease its fence names
    /// (`taken_under`, else this recovery's) without having parked it, and the caller did not
    /// attest that it exited. One read of the Lease.
    pub(super) async fn at_work(
        &self,
        taken_under: Option<&str>,
        holder: &Holder,
    ) -> Result<Option<ReleaseRefusal>, FenceError> {
        if self.holder_exited {
            return Ok(None);
        }
        let cfg = self.lease_of(taken_under);
        let api: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(self.client.clone(), &cfg.namespace);
        let lease = format!("{}/{}", cfg.namespace, cfg.name);
        let read = crate::api::get_retrying(&api, &cfg.name, &lease, crate::api::READ_RETRY_BUDGET)
            .await
            .map_err(|e| error("get", "leases.coordination.k8s.io".into(), lease.clone(), e))?;
        let found = read
            .as_ref()
            .map(|l| discover::inspect_lease(l, &self.keys, self.clock.now()))
            .transpose()?;
        Ok(
            decide_at_work(found.as_ref(), holder).then(|| ReleaseRefusal::HolderAtWork {
                holder: holder.to_string(),
                lease,
            }),
        )
    }

    /// The Lease named `namespace/name` by a fence (its own), else this recovery's.
    fn lease_of(&self, taken_under: Option<&str>) -> LeaseConfig {
        let mut cfg = self.lease.clone();
        if let Some((ns, name)) = taken_under.and_then(|l| l.split_once('/'))
            && crate::keys::is_dns_label(ns)
            && crate::keys::is_dns_subdomain(name)
        {
            cfg.namespace = ns.to_string();
            cfg.name = name.to_string();
        }
        cfg
    }

    /// The Lease's holder, if it can be read (evidence for notes only).
    async fn lease_holder(&self) -> Option<String> {
        let api: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(self.client.clone(), &self.lease.namespace);
        let lease = api.get_opt(&self.lease.name).await.ok().flatten()?;
        lease.spec?.holder_identity.filter(|h| !h.is_empty())
    }
}

/// Whether `holder` may still be working under `lease` as read: it is the Lease's holder and
/// did not park it (a parked pause runs no work). An expired-looking Lease still counts: only
/// recovery's watch over the holder's full duration proves it gone. Pure.
fn decide_at_work(lease: Option<&discover::FoundLease>, holder: &Holder) -> bool {
    lease.is_some_and(|l| l.holder.as_deref() == Some(holder.as_str()) && !l.parked)
}

#[cfg(test)]
mod tests {

    use super::*;

    fn ks(name: &str) -> ObjectRef {
        crate::guard::test_kustomization("ns", name)
    }

    #[test]
    fn every_refusal_names_the_object_and_says_nothing_changed() {
        let children = Withhold::ChildrenHeld {
            holder: "h".into(),
            children: vec![ks("child")],
        };
        let moved = Withhold::MarkMoved(MarkAt::Field("/spec/suspend".into()));
        let table = [
            (
                ReleaseRefusal::NotFound,
                "ks/ns/a not found; nothing to release",
            ),
            (
                ReleaseRefusal::NoFence,
                "ks/ns/a carries no fence; nothing to release",
            ),
            (
                ReleaseRefusal::OtherHolder {
                    found: "x".into(),
                    named: "h".into(),
                },
                "ks/ns/a is fenced by x, not h; nothing changed",
            ),
            (
                ReleaseRefusal::Withheld(children),
                "ks/ns/a is a parent whose child is still held by h: release ks/ns/child first; \
                 nothing changed",
            ),
            (
                ReleaseRefusal::Withheld(moved),
                "ks/ns/a: field /spec/suspend was changed by another writer since the fence; a \
                 plain release cannot restore it (`fences release --keep-moved` keeps that \
                 value, restores the other marks and removes the fence); nothing changed",
            ),
            (
                ReleaseRefusal::NowFencedBy(None),
                "ks/ns/a is now fenced by nobody; nothing changed",
            ),
            (
                ReleaseRefusal::ChangedHands,
                "ks/ns/a changed hands since it was read; nothing changed",
            ),
            (
                ReleaseRefusal::HolderAtWork {
                    holder: "h".into(),
                    lease: "fs/l".into(),
                },
                "ks/ns/a: its holder h still holds the Lease fs/l and may still be working; \
                 nothing changed (once its process has exited add --holder-exited; if it is \
                 gone, `fences recover` releases it after its full Lease duration)",
            ),
        ];
        for (reason, want) in table {
            let refused = Refused {
                object: ks("a"),
                reason,
            };
            assert_eq!(refused.to_string(), want);
        }
    }

    #[test]
    fn release_engine_a_holder_at_work_is_its_leases_unparked_holder() {
        let h: Holder = "run-1".parse().unwrap();
        let lease = |holder: Option<&str>, parked| discover::FoundLease {
            namespace: "fs".into(),
            name: "l".into(),
            holder: holder.map(ToString::to_string),
            epoch: 3,
            acquired: None,
            renewed: None,
            expired: true,
            parked,
            release_patch: None,
        };
        let table = [
            (None, false),
            (Some(lease(None, false)), false),
            (Some(lease(Some("other"), false)), false),
            (Some(lease(Some("run-1"), true)), false),
            // Expired by the reader's clock is no evidence: still at work.
            (Some(lease(Some("run-1"), false)), true),
        ];
        for (found, want) in table {
            assert_eq!(decide_at_work(found.as_ref(), &h), want, "{found:?}");
        }
    }

    #[test]
    fn release_engine_a_kept_resume_is_said_in_the_lines_and_the_facts() {
        let ready = |kept_resume| ReadyRelease {
            object: ks("a"),
            owner: "h;1".parse().unwrap(),
            age: Duration::from_secs(3),
            marks: Vec::new(),
            resource_version: "9".into(),
            patch: "[]".into(),
            lease_holder: None,
            kept_resume,
        };
        let plain = ready(None);
        assert!(
            !plain
                .lines("ns/l", &crate::command::test_spell)
                .iter()
                .any(|l| l.contains("keeping"))
        );
        assert!(!plain.facts().iter().any(|(k, _)| *k == "kept_resume"));
        let kept = ready(Some(MarkAt::Field("/spec/suspend".into())));
        assert!(
            kept.lines("ns/l", &crate::command::test_spell).contains(
                &"  keeping field /spec/suspend as another writer set it (a `flux resume` while \
                  paused); the other marks are restored"
                    .to_string()
            ),
            "{:?}",
            kept.lines("ns/l", &crate::command::test_spell)
        );
        assert!(
            kept.facts()
                .contains(&("kept_resume", json!("/spec/suspend")))
        );
    }
}

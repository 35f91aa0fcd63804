//! Server-side dry runs of the first writes of a handoff: the Lease acquisition and the fence
//! of each member, each decided exactly as the real write (same read, same CAS tests, same
//! body, same field manager) and sent with `dryRun=All`, so admission and RBAC answer for real
//! and the server persists nothing.
//!
//! kube-rs sends `?dryRun=All` when [`PatchParams::dry_run`] / [`PostParams::dry_run`] is set
//! (kube-core `params.rs`, `populate_qp`); the API server then runs authorization, mutating
//! and validating admission and validation, and answers with the object it would have stored
//! without storing it (Kubernetes API concepts, "Dry-run").
//!
//! The answer of each write is classified by the pure `answer`.

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PatchParams, PostParams};
use serde::Serialize;
use serde_json::Value;

use crate::decide::Refusal;
use crate::fence::Round;
use crate::lease::decide::{LeaseDecision, decide_lease_acquire};
use crate::lease::write::Write;
use crate::{Epoch, FenceError, Fencer, Holder, LeaseConfig, Mark, ObjectRef};

/// [`crate::api::patch_params`] with `dryRun=All`.
#[must_use]
pub fn dry_patch_params() -> PatchParams {
    PatchParams {
        dry_run: true,
        ..crate::api::patch_params()
    }
}

/// [`crate::api::post_params`] with `dryRun=All`.
#[must_use]
pub fn dry_post_params() -> PostParams {
    PostParams {
        dry_run: true,
        ..crate::api::post_params()
    }
}

/// The server's answer to one dry-run write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Answer {
    /// Authorized, admitted and valid: the real write would pass (unless something changes
    /// before it is sent).
    WouldPass,
    /// Denied by RBAC (403 from the authorizer: `... cannot VERB resource ...`).
    Denied {
        /// The server's message (names the user, verb, resource and namespace).
        message: String,
    },
    /// Refused by admission (a webhook or policy) or by validation (4xx other than an
    /// authorizer's 403).
    Refused {
        /// The HTTP status code.
        code: u16,
        /// The server's message.
        message: String,
    },
    /// No answer that says (transport error, 5xx, or the object changed on every attempt).
    Failed {
        /// What happened.
        message: String,
    },
}

impl Answer {
    /// Whether the write would pass.
    #[must_use]
    pub fn passes(&self) -> bool {
        matches!(self, Self::WouldPass)
    }
}

/// Classifies the outcome of a dry-run write (pure).
///
/// The authorizer's denial is a 403 whose message says `cannot VERB resource` (the
/// apiserver's `forbiddenMessage`); an admission webhook's denial is a 403 too, but says
/// `admission webhook ... denied the request`, so only the message tells them apart. 400, 404,
/// 409, 422 and other 4xx are refusals; 5xx and transport errors are failures.
#[must_use]
pub(crate) fn answer(result: Result<(), &kube::Error>) -> Answer {
    let Err(err) = result else {
        return Answer::WouldPass;
    };
    match err {
        kube::Error::Api(s) if s.code == 403 && s.message.contains(" cannot ") => Answer::Denied {
            message: s.message.clone(),
        },
        kube::Error::Api(s) if (400..500).contains(&s.code) => Answer::Refused {
            code: s.code,
            message: s.message.clone(),
        },
        other => Answer::Failed {
            message: crate::one_line(other),
        },
    }
}

/// What a dry-run fence found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DryFence {
    /// The fence patch was sent dry; the server answered this.
    Sent(Answer),
    /// The object already carries exactly this fence: the real run writes nothing.
    AlreadyOurs,
    /// The object does not exist.
    NotFound,
    /// The real run would not write: another owner, or an exclusive mark already set.
    Refused(Refusal),
}

impl Fencer {
    /// The dry run of [`Fencer::acquire_on`]: decides on `read` (or a fresh read) exactly as
    /// the acquire does, with the marks a fencer holding `lease` adds (its name, and its
    /// [`LeaseConfig::max_hold`] when set), and sends the patch with `dryRun=All`. A 409, or a 422 after which the
    /// object moved, reads again and decides again (at most `MAX_ATTEMPTS` rounds), as the
    /// acquire does. Writes nothing, records no Event, asserts no Lease.
    ///
    /// # Errors
    /// A failed read, invalid marks or reason.
    pub async fn dry_acquire(
        &self,
        obj: &ObjectRef,
        read: Option<Value>,
        marks: Vec<Mark>,
        reason: Option<&str>,
        lease: Option<&LeaseConfig>,
    ) -> Result<DryFence, FenceError> {
        let name = lease.map(ToString::to_string);
        let max_hold = lease.and_then(|l| l.max_hold);
        let marks = crate::fence::lease_mark(self.keys(), marks, name.as_deref(), max_hold);
        Ok(
            match self
                .rounds(obj, read, &marks, reason, &crate::fence::Dry)
                .await?
            {
                Round::Sent(answer) => DryFence::Sent(answer),
                Round::AlreadyOurs { .. } => DryFence::AlreadyOurs,
                Round::NotFound => DryFence::NotFound,
                Round::Refused(r) => DryFence::Refused(r),
                Round::Contended => DryFence::Sent(Answer::Failed {
                    message: format!("{obj} changed on every attempt"),
                }),
            },
        )
    }
}

/// A new holder's write sent dry: its verb, the server's answer, the epoch it gives.
async fn send(
    write: Write,
    api: &Api<KubeLease>,
    cfg: &LeaseConfig,
) -> Result<(&'static str, kube::Result<KubeLease>, Epoch), FenceError> {
    let epoch = write.epoch()?;
    let sent = write.send(api, &cfg.name, &dry_post_params()).await;
    Ok((write.verb(), sent, epoch))
}

/// What a dry-run Lease acquisition found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DryLease {
    /// The write the acquisition would send (`create` of a new Lease, `update` taking a free
    /// one, or `update` renewing one that already names the holder) was sent dry.
    Sent {
        /// `create` or `update`.
        verb: &'static str,
        /// The server's answer.
        answer: Answer,
        /// The epoch the holder would hold it at.
        epoch: Epoch,
    },
    /// Someone else holds it: the real acquisition refuses without writing.
    Held {
        /// The holder found.
        holder: String,
        /// Whether it looks expired by our clock (never a reason to take it).
        expired: bool,
    },
}

/// The dry run of [`crate::Lease::acquire`]: reads the Lease, decides as the acquisition does
/// ([`decide_lease_acquire`]) and sends its create or update with `dryRun=All`. A Lease that
/// already names `holder` is renewed by the real acquisition: here the read Lease is sent back
/// unchanged as a dry update (same verb, same authorization and admission). Writes nothing.
///
/// # Errors
/// A failed read; a malformed Lease.
pub async fn dry_acquire_lease(
    client: &Client,
    cfg: &LeaseConfig,
    holder: &Holder,
) -> Result<DryLease, FenceError> {
    let api: Api<KubeLease> = Api::namespaced(client.clone(), &cfg.namespace);
    let target = format!("{}/{}", cfg.namespace, cfg.name);
    let read =
        crate::lease::handle::read_lease(&api, &cfg.name, &target, crate::api::READ_RETRY_BUDGET)
            .await?;
    let (verb, sent, epoch) =
        match decide_lease_acquire(read.as_ref(), cfg, holder, Timestamp::now())? {
            LeaseDecision::Held { holder, expired } => {
                return Ok(DryLease::Held { holder, expired });
            }
            LeaseDecision::Ours { epoch } => {
                let lease = read.unwrap_or_default();
                let sent = api.replace(&cfg.name, &dry_post_params(), &lease).await;
                ("update", sent, epoch)
            }
            LeaseDecision::Create(lease) => send(Write::Create(lease), &api, cfg).await?,
            LeaseDecision::Take(lease) => send(Write::Update(lease), &api, cfg).await?,
        };
    Ok(DryLease::Sent {
        verb,
        answer: answer(sent.as_ref().map(|_| ())),
        epoch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, "x")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn dry_run_answers_tell_rbac_from_admission_from_failures() {
        let rbac = "kustomizations.kustomize.toolkit.fluxcd.io \"apps\" is forbidden: User \
                    \"system:serviceaccount:ns:sa\" cannot patch resource \"kustomizations\" in \
                    API group \"kustomize.toolkit.fluxcd.io\" in the namespace \"ns\"";
        let webhook = "admission webhook \"policy.example\" denied the request: no suspends";
        let cases: Vec<(Result<(), kube::Error>, Answer)> = vec![
            (Ok(()), Answer::WouldPass),
            (
                Err(status(403, rbac)),
                Answer::Denied {
                    message: rbac.into(),
                },
            ),
            (
                Err(status(403, webhook)),
                Answer::Refused {
                    code: 403,
                    message: webhook.into(),
                },
            ),
            (
                Err(status(422, "spec.suspend: Invalid value")),
                Answer::Refused {
                    code: 422,
                    message: "spec.suspend: Invalid value".into(),
                },
            ),
            (
                Err(status(409, "the object has been modified")),
                Answer::Refused {
                    code: 409,
                    message: "the object has been modified".into(),
                },
            ),
            (
                Err(status(500, "etcd down")),
                Answer::Failed {
                    message: "any".into(),
                },
            ),
        ];
        for (result, want) in cases {
            let got = answer(result.as_ref().copied());
            match (&got, &want) {
                // The transport text is kube's; only the class matters.
                (Answer::Failed { .. }, Answer::Failed { .. }) => {}
                _ => assert_eq!(got, want, "{result:?}"),
            }
            assert_eq!(got.passes(), matches!(want, Answer::WouldPass));
        }
    }

    #[test]
    fn dry_run_params_name_the_field_manager_and_ask_for_dry_run() {
        let p = dry_patch_params();
        assert!(p.dry_run);
        assert_eq!(p.field_manager.as_deref(), Some(crate::api::FIELD_MANAGER));
        let p = dry_post_params();
        assert!(p.dry_run);
        assert_eq!(p.field_manager.as_deref(), Some(crate::api::FIELD_MANAGER));
    }

    #[test]
    fn dry_run_answers_serialize_with_a_tag() {
        let v = serde_json::to_value(Answer::Denied {
            message: "m".into(),
        })
        .unwrap();
        assert_eq!(v, serde_json::json!({"answer": "denied", "message": "m"}));
        let v = serde_json::to_value(Answer::WouldPass).unwrap();
        assert_eq!(v, serde_json::json!({"answer": "would_pass"}));
    }

    #[test]
    fn max_hold_a_fence_under_a_lease_marks_its_name_and_limit_restored_if_unchanged() {
        use crate::mark::MarkAt;
        let keys = crate::AnnotationKeys::default();
        let hour = Some(std::time::Duration::from_hours(1));
        let marks = crate::fence::lease_mark(&keys, Vec::new(), Some("fs/l"), hour);
        let got: Vec<(MarkAt, serde_json::Value, crate::mark::Restore)> = marks
            .into_iter()
            .map(|m| (m.at, m.value, m.restore))
            .collect();
        let if_unchanged = crate::mark::Restore::IfUnchanged;
        assert_eq!(
            got,
            [
                (
                    MarkAt::Annotation(keys.lease.clone()),
                    "fs/l".into(),
                    if_unchanged
                ),
                (
                    MarkAt::Annotation(keys.max_hold.clone()),
                    "1h".into(),
                    if_unchanged
                ),
            ]
        );
        // No limit given: no max-hold mark, as before.
        let marks = crate::fence::lease_mark(&keys, Vec::new(), Some("fs/l"), None);
        assert_eq!(marks.len(), 1);
    }
}

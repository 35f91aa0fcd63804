//! Tier 2: another writer during the proof window resets the proof; one that never stops makes
//! it time out, and the timeout line names the right predicate — with counts only. A change
//! no later pass can mend (the pause resumed, the fence taken) ends the proof at once.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use flux_suspend::handoff::SuspendError;
use flux_suspend::io::Timing;
use flux_suspend::judge::Broken;
use flux_suspend::report::Counter;
use flux_suspend::retire::Strategy;
use flux_suspend::steps::Step;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

/// The other writer's field manager.
const WRITER: &str = "someone-annotating";

/// Runs a pause whose proof window is disturbed by `touch` on object `name` every 30 ms, from
/// the moment the targets are acknowledged until the pause returns. Returns the error.
async fn pause_with_writer(w: &World, name: &'static str, touch: Value) -> SuspendError {
    let mut opts = w.opts(Strategy::Ack);
    opts.timing = Timing::new(Duration::from_millis(150), Duration::from_secs(3));
    let api = flux_suspend::object::api(
        &w.ns.client,
        &flux_suspend::object::kustomization(&w.ns.name, name),
    );
    let go = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (go, stop) = (go.clone(), stop.clone());
        tokio::spawn(async move {
            let mut i = 0u32;
            while !stop.load(Ordering::SeqCst) {
                if go.load(Ordering::SeqCst) {
                    i += 1;
                    let mut patch = touch.clone();
                    // Make every write a real change, so each one moves the resourceVersion.
                    patch["metadata"]["labels"] = json!({ "writer-round": i.to_string() });
                    let _ = api
                        .patch(name, &PatchParams::apply(WRITER), &Patch::Merge(patch))
                        .await;
                }
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        })
    };
    let mut h = w.handoff();
    let started = go.clone();
    let err = h
        .pause(&w.chain(), &opts, &mut |s| {
            if s == Step::AwaitTargetAcks {
                started.store(true, Ordering::SeqCst);
            }
        })
        .await
        .unwrap_err();
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    // Cleanup still releases whatever is provably ours.
    let _ = h.resume(None).await;
    err
}

fn counters(err: &SuspendError) -> flux_suspend::report::Counters {
    match err {
        SuspendError::ProofTimeout { counters, .. } => *counters,
        other => panic!("expected a proof timeout, got {other}"),
    }
}

/// The timeout names the other writer of `name` by its field manager (outside the line).
fn assert_writer_named(err: &SuspendError, name: &str) {
    let SuspendError::ProofTimeout { writers, .. } = err else {
        panic!("expected a proof timeout, got {err}");
    };
    assert!(
        writers
            .iter()
            .any(|w| w.manager == WRITER && w.object.name == name && w.changes > 0),
        "{writers:?}"
    );
    assert!(!err.to_string().contains(WRITER), "{err}");
}

fn assert_fixed_line(err: &SuspendError) {
    let line = err.to_string();
    let (head, tail) = line.split_once(": ").unwrap();
    // The proof gets what is left of the pause's 3 s budget: a fixed form with a count.
    let secs = head
        .strip_prefix("stable pause not proven within ")
        .and_then(|n| n.strip_suffix('s'))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(secs.is_some_and(|n| n <= 3), "{head}");
    let names: Vec<&str> = tail
        .split(' ')
        .map(|kv| kv.split('=').next().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "observations",
            "unreadable",
            "child_not_owned",
            "parent_not_owned",
            "parent_changed",
            "version_changes"
        ]
    );
    assert!(tail.split(' ').all(|kv| {
        kv.split('=')
            .nth(1)
            .unwrap()
            .bytes()
            .all(|b| b.is_ascii_digit())
    }));
}

#[tokio::test]
async fn other_writer_bumping_the_child_times_out_with_version_changes() {
    let w = World::new("sus-ow-cv").await;
    let err = pause_with_writer(&w, TARGET, json!({ "metadata": {} })).await;
    let c = counters(&err);
    assert!(c.get(Counter::VersionChanges) > 0, "{err}");
    assert_eq!(c.get(Counter::ChildNotOwned), 0, "{err}");
    assert_eq!(c.get(Counter::ParentChanged), 0, "{err}");
    assert_fixed_line(&err);
    assert_writer_named(&err, TARGET);
    // The object names, uids and versions never reach the line.
    let line = err.to_string();
    assert!(!line.contains(TARGET) && !line.contains(&w.ns.name) && !line.contains(&w.owner()));
}

#[tokio::test]
async fn other_writer_bumping_the_parent_times_out_with_parent_changed() {
    let w = World::new("sus-ow-pc").await;
    let err = pause_with_writer(&w, PARENT, json!({ "metadata": {} })).await;
    let c = counters(&err);
    assert!(c.get(Counter::ParentChanged) > 0, "{err}");
    assert_eq!(c.get(Counter::VersionChanges), 0, "{err}");
    assert_fixed_line(&err);
    assert_writer_named(&err, PARENT);
}

/// A change no later pass can mend ends the proof at once, naming the member and the change.
fn assert_broken(err: &SuspendError, name: &str, why: Broken) {
    match err {
        SuspendError::BrokenDuringProof { object, why: w, .. } => {
            assert_eq!((object.name.as_str(), *w), (name, why), "{err}");
        }
        other => panic!("expected a pause broken during the proof, got {other}"),
    }
    assert_eq!(err.class(), flux_fence::ErrorClass::PauseBroken);
}

#[tokio::test]
async fn other_writer_taking_the_parent_owner_breaks_the_proof_at_once() {
    let w = World::new("sus-ow-po").await;
    let err = pause_with_writer(
        &w,
        PARENT,
        json!({ "metadata": { "annotations": { OWNER_KEY: "someone-else;9" } } }),
    )
    .await;
    assert_broken(&err, PARENT, Broken::NotOurs);
    // Cleanup did not touch the foreign owner's parent.
    assert_eq!(
        annotation(&w.get(PARENT).await, OWNER_KEY),
        Some("someone-else;9")
    );
}

#[tokio::test]
async fn other_writer_unsuspending_the_child_breaks_the_proof_at_once() {
    let w = World::new("sus-ow-cs").await;
    let err = pause_with_writer(&w, TARGET, json!({ "spec": { "suspend": false } })).await;
    assert_broken(&err, TARGET, Broken::Unsuspended);
}

#[tokio::test]
async fn other_writer_unsuspending_the_parent_breaks_the_proof_at_once() {
    let w = World::new("sus-ow-ps").await;
    let err = pause_with_writer(&w, PARENT, json!({ "spec": { "suspend": false } })).await;
    assert_broken(&err, PARENT, Broken::Unsuspended);
}

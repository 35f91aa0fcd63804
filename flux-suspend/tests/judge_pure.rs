//! Tier 1: the stable-pause judge over hand-made passes.

use flux_suspend::judge::{Judge, Member, REQUIRED_PASSES, Read, Role, Seen, Verdict};
use flux_suspend::report::Counter;

const OWNER: &str = "gh1.1-abcdef;7";

fn members() -> Vec<Member> {
    vec![
        Member::new(Role::Parent, "p-uid", OWNER, false),
        Member::new(Role::Target, "c-uid", OWNER, true),
    ]
}

fn parent(rv: &str) -> Seen {
    Seen::new("p-uid", rv)
        .with_owner(Some(OWNER.into()))
        .with_suspended(true)
}

fn child(rv: &str) -> Seen {
    Seen::new("c-uid", rv)
        .with_owner(Some(OWNER.into()))
        .with_suspended(true)
        .with_reconcile_disabled(true)
}

fn pass(p: Seen, c: Seen) -> Vec<Read> {
    vec![Read::Seen(p), Read::Seen(c)]
}

fn run(judge: &mut Judge, passes: &[Vec<Read>]) -> Option<usize> {
    passes
        .iter()
        .position(|p| matches!(judge.observe(p), Verdict::Proven(_)))
}

#[test]
fn stable_chain_is_proven_after_baseline_and_two_counted_passes() {
    let mut j = Judge::new(members());
    let p = pass(parent("10"), child("20"));
    assert_eq!(run(&mut j, &[p.clone(), p.clone(), p]), Some(2));
    assert_eq!(j.counters().get(Counter::Observations), 3);
}

#[test]
fn stable_chain_with_baseline_is_proven_in_required_passes() {
    let mut j = Judge::new(members()).with_baseline(vec!["10".into(), "20".into()]);
    let p = pass(parent("10"), child("20"));
    assert_eq!(
        run(&mut j, &[p.clone(), p]),
        Some(REQUIRED_PASSES as usize - 1)
    );
}

#[test]
fn proof_carries_passes_and_counters() {
    let mut j = Judge::new(members());
    let p = pass(parent("1"), child("2"));
    j.observe(&p);
    j.observe(&p);
    let Verdict::Proven(proof) = j.observe(&p) else {
        panic!("not proven")
    };
    assert_eq!(proof.passes(), 2);
    assert_eq!(proof.counters().get(Counter::Observations), 3);
}

// --- frozen_reconciling: the incident. Status is never read by the judge; the old rule read it.

/// One read as the shell tool saw it: the fence fields plus the Reconciling condition.
struct OldRead {
    seen: Seen,
    reconciling_true: bool,
}

/// The shell tool's rule (scripts/refresh-flux-ghcr-auth.sh, written here, never in production
/// code): owned, no `Reconciling=True` on the parent, unchanged resourceVersion on two
/// consecutive reads.
fn old_rule_proves(reads: &[(OldRead, OldRead)]) -> bool {
    reads.windows(2).any(|w| {
        let ((p0, c0), (p1, c1)) = (&w[0], &w[1]);
        let owned = |s: &Seen| s.owner.as_deref() == Some(OWNER) && s.suspended;
        owned(&p1.seen)
            && owned(&c1.seen)
            && !p0.reconciling_true
            && !p1.reconciling_true
            && p0.seen.resource_version == p1.seen.resource_version
            && c0.seen.resource_version == c1.seen.resource_version
    })
}

fn frozen_passes(n: usize, frozen_parent: bool, frozen_child: bool) -> Vec<(OldRead, OldRead)> {
    (0..n)
        .map(|_| {
            (
                OldRead {
                    seen: parent("10"),
                    reconciling_true: frozen_parent,
                },
                OldRead {
                    seen: child("20"),
                    reconciling_true: frozen_child,
                },
            )
        })
        .collect()
}

#[test]
fn frozen_reconciling_on_suspended_parent_blocks_the_old_status_rule_forever() {
    // The failing baseline the incident report asked for: 500 quiet passes, never proven.
    assert!(!old_rule_proves(&frozen_passes(500, true, false)));
}

#[test]
fn frozen_reconciling_on_suspended_parent_does_not_block_the_proof() {
    let mut j = Judge::new(members());
    let passes: Vec<Vec<Read>> = frozen_passes(3, true, false)
        .into_iter()
        .map(|(p, c)| pass(p.seen, c.seen))
        .collect();
    assert_eq!(run(&mut j, &passes), Some(2));
}

#[test]
fn frozen_reconciling_on_suspended_child_does_not_block_the_proof() {
    let mut j = Judge::new(members());
    let passes: Vec<Vec<Read>> = frozen_passes(3, false, true)
        .into_iter()
        .map(|(p, c)| pass(p.seen, c.seen))
        .collect();
    assert_eq!(run(&mut j, &passes), Some(2));
}

// --- other_writer: every foreign change resets the proof and names its predicate.

fn judged_counts(passes: &[Vec<Read>]) -> (Option<usize>, Judge) {
    let mut j = Judge::new(members());
    let at = run(&mut j, passes);
    (at, j)
}

#[test]
fn other_writer_moving_parent_owner_resets_and_counts_parent_not_owned() {
    let ok = pass(parent("1"), child("2"));
    let mut foreign = parent("1");
    foreign.owner = Some("someone-else;1".into());
    let (at, j) = judged_counts(&[
        ok.clone(),
        ok.clone(),
        pass(foreign, child("2")),
        ok.clone(),
        ok,
    ]);
    // Pass 3 is not ours; passes 4 and 5 count again (rv unchanged), so proven at index 4.
    assert_eq!(at, Some(4));
    assert_eq!(j.counters().get(Counter::ParentNotOwned), 1);
    assert_eq!(j.counters().get(Counter::ChildNotOwned), 0);
}

#[test]
fn other_writer_unsuspending_parent_resets_and_counts_parent_not_owned() {
    let mut unsuspended = parent("1");
    unsuspended.suspended = false;
    let ok = pass(parent("1"), child("2"));
    let (at, j) = judged_counts(&[ok.clone(), ok.clone(), pass(unsuspended, child("2")), ok]);
    assert_eq!(at, None);
    assert_eq!(j.counters().get(Counter::ParentNotOwned), 1);
}

#[test]
fn other_writer_bumping_parent_version_counts_parent_changed() {
    let (at, j) = judged_counts(&[
        pass(parent("1"), child("2")),
        pass(parent("3"), child("2")),
        pass(parent("3"), child("2")),
        pass(parent("3"), child("2")),
    ]);
    assert_eq!(at, Some(3));
    assert_eq!(j.counters().get(Counter::ParentChanged), 1);
    assert_eq!(j.counters().get(Counter::VersionChanges), 0);
}

#[test]
fn other_writer_removing_child_reconcile_disabled_counts_child_not_owned() {
    let mut enabled = child("2");
    enabled.reconcile_disabled = false;
    let (at, j) = judged_counts(&[pass(parent("1"), child("2")), pass(parent("1"), enabled)]);
    assert_eq!(at, None);
    assert_eq!(j.counters().get(Counter::ChildNotOwned), 1);
}

#[test]
fn other_writer_recreating_child_with_new_uid_counts_child_not_owned() {
    let mut recreated = child("2");
    recreated.uid = "new-uid".into();
    let (at, j) = judged_counts(&[
        pass(parent("1"), child("2")),
        pass(parent("1"), recreated.clone()),
        pass(parent("1"), recreated),
    ]);
    assert_eq!(at, None);
    assert_eq!(j.counters().get(Counter::ChildNotOwned), 2);
}

#[test]
fn other_writer_that_never_stops_keeps_the_proof_pending_with_version_changes() {
    let passes: Vec<Vec<Read>> = (0..148)
        .map(|i| pass(parent("1"), child(&i.to_string())))
        .collect();
    let (at, j) = judged_counts(&passes);
    assert_eq!(at, None);
    assert_eq!(
        j.counters().to_string(),
        "observations=148 unreadable=0 child_not_owned=0 parent_not_owned=0 parent_changed=0 \
         version_changes=147"
    );
}

#[test]
fn unreadable_pass_resets_the_streak_and_the_baseline() {
    let ok = pass(parent("1"), child("2"));
    let broken = vec![Read::Seen(parent("1")), Read::Unreadable];
    let (at, j) = judged_counts(&[ok.clone(), ok.clone(), broken, ok.clone(), ok.clone(), ok]);
    // After the unreadable pass a new baseline is needed: proven at the third pass after it.
    assert_eq!(at, Some(5));
    assert_eq!(j.counters().get(Counter::Unreadable), 1);
}

#[test]
fn wrong_number_of_reads_counts_as_unreadable() {
    let (at, j) = judged_counts(&[vec![Read::Seen(parent("1"))]]);
    assert_eq!(at, None);
    assert_eq!(j.counters().get(Counter::Unreadable), 1);
}

#[test]
fn single_member_chain_without_parent_is_proven() {
    let mut j = Judge::new(vec![Member::new(Role::Target, "c-uid", OWNER, false)]);
    let mut c = child("5");
    c.reconcile_disabled = false;
    let p = vec![Read::Seen(c)];
    assert_eq!(run(&mut j, &[p.clone(), p.clone(), p]), Some(2));
}

#[test]
fn a_recheck_names_the_first_member_that_no_longer_holds_the_pause() {
    use flux_suspend::judge::{Broken, first_broken};
    type Row = (Vec<Read>, Option<(usize, Broken)>);
    let ok = || vec![Read::Seen(parent("1")), Read::Seen(child("2"))];
    // A status write after the proof moves resourceVersions: that does not break a pause.
    let moved = vec![Read::Seen(parent("9")), Read::Seen(child("9"))];
    let with_child = |f: fn(&mut Seen)| {
        let mut c = child("2");
        f(&mut c);
        vec![Read::Seen(parent("1")), Read::Seen(c)]
    };
    let table: Vec<Row> = vec![
        (ok(), None),
        (moved, None),
        (
            with_child(|c| c.suspended = false),
            Some((1, Broken::Unsuspended)),
        ),
        (
            with_child(|c| c.reconcile_disabled = false),
            Some((1, Broken::ReconcileEnabled)),
        ),
        (
            with_child(|c| c.owner = Some("gh9.1-zzzzzz;1".into())),
            Some((1, Broken::NotOurs)),
        ),
        (with_child(|c| c.owner = None), Some((1, Broken::NotOurs))),
        (
            with_child(|c| c.uid = "other".into()),
            Some((1, Broken::Recreated)),
        ),
        (
            vec![Read::Unreadable, Read::Seen(child("2"))],
            Some((0, Broken::Unreadable)),
        ),
        // The parent comes first in chain order; a missing read is unreadable.
        (
            vec![
                Read::Seen(parent("1").with_suspended(false)),
                Read::Unreadable,
            ],
            Some((0, Broken::Unsuspended)),
        ),
        (vec![Read::Seen(parent("1"))], Some((1, Broken::Unreadable))),
    ];
    for (reads, want) in table {
        assert_eq!(first_broken(&members(), &reads), want, "{reads:?}");
    }
    assert_eq!(
        Broken::Unsuspended.to_string(),
        "spec.suspend is not true any more"
    );
}

#[test]
fn judge_names_who_changed_a_member_and_how_often_never_a_status_write() {
    let mut j = Judge::new(members());
    let by = |s: Seen, m: &str| s.with_last_writer(Some(m.into()));
    let passes = [
        pass(parent("1"), child("2")),
        // A person annotates the target twice, then the parent once.
        pass(parent("1"), by(child("3"), "kubectl-annotate")),
        pass(parent("1"), by(child("4"), "kubectl-annotate")),
        pass(by(parent("5"), "kubectl-edit"), child("4")),
        // A status write (no other writer named) moves the target: counted, nobody named.
        pass(parent("5"), child("6")),
        // A writer seen on a read whose version did not move changed nothing this pass.
        pass(parent("5"), by(child("6"), "kubectl-annotate")),
    ];
    for p in &passes {
        assert_eq!(j.observe(p), Verdict::Pending);
    }
    assert_eq!(
        j.writers(),
        [
            (1, "kubectl-annotate".to_string(), 2),
            (0, "kubectl-edit".to_string(), 1)
        ]
    );
    assert_eq!(j.counters().get(Counter::VersionChanges), 3);
    assert_eq!(j.counters().get(Counter::ParentChanged), 1);
}

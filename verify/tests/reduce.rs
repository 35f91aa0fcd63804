//! The reductions keep the model's behaviours: on a bound small enough to explore without
//! them, the reduced model reaches exactly the representatives of the states the unreduced
//! model reaches, and every property gives the same verdict on a state and its representative.

use std::collections::{HashSet, VecDeque};

use stateright::Model;
use verify::{Bounds, Handoff, State};

fn reachable(m: &Handoff) -> HashSet<State> {
    let mut seen: HashSet<State> = m.init_states().into_iter().collect();
    let mut queue: VecDeque<State> = seen.iter().cloned().collect();
    let mut actions = Vec::new();
    while let Some(s) = queue.pop_front() {
        m.actions(&s, &mut actions);
        for a in actions.drain(..) {
            if let Some(n) = m.next_state(&s, a)
                && seen.insert(n.clone())
            {
                queue.push_back(n);
            }
        }
    }
    seen
}

#[test]
fn reduced_model_reaches_exactly_the_representatives() {
    same_behaviours(Bounds::tiny());
}

/// A crash leaves a finished run whose dead variables the reduction resets, and a lost
/// response leaves an unconfirmed guard and a re-read.
#[test]
fn reductions_keep_crashes_and_lost_responses() {
    same_behaviours(Bounds {
        crashes: 1,
        lost: 1,
        faults: 1,
        ..Bounds::tiny()
    });
}

fn same_behaviours(bounds: Bounds) {
    let full = Handoff::unreduced(bounds, None);
    let reduced = Handoff::new(bounds, None);
    let all = reachable(&full);
    let kept = reachable(&reduced);
    let images: HashSet<State> = all
        .iter()
        .map(|s| reduced.representative(s.clone()))
        .collect();
    assert!(
        kept.len() * 2 < all.len(),
        "reduced {} of {}",
        kept.len(),
        all.len()
    );
    assert_eq!(images.len(), kept.len(), "the quotients differ in size");
    assert!(images == kept, "the reduced model reaches other states");
    let props = full.properties();
    for s in &all {
        let rep = reduced.representative(s.clone());
        for p in &props {
            assert_eq!(
                (p.condition)(&full, s),
                (p.condition)(&full, &rep),
                "{} differs on a state and its representative",
                p.name
            );
        }
    }
}

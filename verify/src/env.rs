//! The environment: one kustomize-controller (serial executions per object, stale reads, the
//! parent applying the child unless `reconcile: disabled`, acknowledgement by the next
//! execution, restarts that kill executions) and a person writing at any time.

use flux_suspend::flux::{RECONCILE_ANNOTATION, RECONCILE_DISABLED, REQUESTED_AT_ANNOTATION};

use crate::spec::{Action, Handoff};
use crate::state::{Exec, P, State, T};
use crate::world::{Obj, sym};

/// The `requestedAt` a person's `flux reconcile` writes (later than every run's nonce).
pub const PERSON_NONCE: &str = "2026-12-01T00:01:30Z";
const NOTE: &str = "example.com/note";

impl Handoff {
    pub(crate) fn env_actions(s: &State, out: &mut Vec<Action>) {
        for o in [P, T] {
            let c = &s.ctl[o];
            match c.exec {
                None if c.dirty => {
                    out.push(Action::CtlStart(o, false));
                    if s.prev[o].is_some() {
                        out.push(Action::CtlStart(o, true));
                    }
                }
                None => {
                    if s.budget.intervals > 0 {
                        out.push(Action::CtlInterval(o));
                    }
                }
                Some(e) => {
                    if o == P && !e.suspended && !e.applied {
                        out.push(Action::CtlApply);
                    } else {
                        out.push(Action::CtlFinish(o));
                    }
                }
            }
        }
        if s.budget.restarts > 0 && s.ctl.iter().any(|c| c.exec.is_some()) {
            out.push(Action::CtlRestart);
        }
        if s.budget.person > 0 {
            for o in [P, T] {
                if s.objs[o].get(REQUESTED_AT_ANNOTATION) != Some(PERSON_NONCE) {
                    out.push(Action::PersonReconcile(o));
                }
            }
            out.push(Action::PersonNote);
            if s.objs[T].suspend == Some(true) {
                out.push(Action::PersonUnsuspend);
            }
        }
    }

    pub(crate) fn env_step(&self, s: &mut State, action: Action) {
        match action {
            Action::CtlStart(o, stale) => {
                // A stale read sees the version before the last write (an informer lag).
                let read = if stale {
                    s.prev[o]
                        .clone()
                        .expect("offered only with a previous version")
                } else {
                    s.objs[o].clone()
                };
                let child_disabled =
                    s.objs[T].get(RECONCILE_ANNOTATION) == Some(RECONCILE_DISABLED);
                let suspended = read.suspend == Some(true);
                s.ctl[o].dirty = false;
                s.ctl[o].exec = Some(Exec {
                    seq: s.fences[o],
                    nonce: read.get(REQUESTED_AT_ANNOTATION).map(sym),
                    suspended,
                    child_disabled: o == P && child_disabled,
                    applied: false,
                });
                if !suspended {
                    // Working path: Reconciling=True at once (status patch).
                    Self::status(s, o, |obj| obj.reconciling = true);
                }
            }
            Action::CtlApply => {
                let e = s.ctl[P].exec.as_mut().expect("a running parent execution");
                e.applied = true;
                if !e.child_disabled {
                    // Server-side apply of the child's Git state (`suspend: false`).
                    Self::write(s, T, |obj| obj.suspend = Some(false));
                }
            }
            Action::CtlFinish(o) => {
                let e = s.ctl[o].exec.take().expect("a running execution");
                let working = !e.suspended;
                // finalizeStatus: record the nonce it read; Ready=True clears Reconciling.
                Self::status(s, o, |obj| {
                    obj.handled = e.nonce.or(obj.handled);
                    if working {
                        obj.reconciling = false;
                    }
                });
            }
            Action::CtlRestart => {
                s.budget.restarts -= 1;
                for c in &mut s.ctl {
                    c.exec = None;
                    c.dirty = true;
                }
            }
            Action::CtlInterval(o) => {
                s.budget.intervals -= 1;
                s.ctl[o].dirty = true;
            }
            Action::PersonReconcile(o) => {
                s.budget.person -= 1;
                self.person(
                    s,
                    o,
                    "/metadata/annotations/reconcile.fluxcd.io~1requestedAt",
                    |obj| {
                        obj.set(REQUESTED_AT_ANNOTATION, Some(PERSON_NONCE));
                    },
                );
            }
            Action::PersonNote => {
                s.budget.person -= 1;
                self.person(s, T, "/metadata/annotations/example.com~1note", |obj| {
                    obj.set(NOTE, Some("by hand"));
                });
            }
            Action::PersonUnsuspend => {
                s.budget.person -= 1;
                if s.objs[T].get(&self.keys.owner).is_some() {
                    s.person_moved_exact = true;
                }
                self.person(s, T, "/spec/suspend", |obj| obj.suspend = Some(false));
                s.flips += 1;
            }
            _ => unreachable!("not an environment action: {action:?}"),
        }
    }

    /// A write that queues a reconcile when it changes spec or `requestedAt`.
    fn write(s: &mut State, o: usize, f: impl FnOnce(&mut Obj)) {
        let before = s.objs[o].clone();
        let mut next = before.clone();
        f(&mut next);
        let next = next.bumped_from(&before);
        if next != before {
            s.prev[o] = Some(before.clone());
            s.objs[o] = next;
            Self::touched(s, o, &before);
        }
    }

    /// A status write: moves the resourceVersion, queues nothing.
    fn status(s: &mut State, o: usize, f: impl FnOnce(&mut Obj)) {
        let before = s.objs[o].clone();
        let mut next = before.clone();
        f(&mut next);
        let next = next.bumped_from(&before);
        if next != before {
            s.prev[o] = Some(before);
            s.objs[o] = next;
        }
    }

    /// A person's write (no precondition). Remembered while the object is fenced, so a later
    /// release can be checked not to overwrite it.
    fn person(&self, s: &mut State, o: usize, field: &str, f: impl FnOnce(&mut Obj)) {
        if s.objs[o].get(&self.keys.owner).is_some() {
            s.person_wrote[o] = Some(sym(field));
        }
        Self::write(s, o, f);
    }
}

//! Exit codes of `flux-handoff`, documented in `--help` and the README.

/// The handoff (or the command) succeeded.
pub const SUCCESS: u8 = 0;
/// An internal error: a bug, or something this tool did not expect.
pub const INTERNAL: u8 = 1;
/// Bad flags or configuration; nothing in the cluster was touched.
pub const USAGE: u8 = 2;
/// Someone else holds the Lease or a fence (or the object is suspended by someone else);
/// nothing was changed.
pub const REFUSED: u8 = 3;
/// The stable-pause proof (or another bounded wait) did not settle in time.
pub const TIMEOUT: u8 = 4;
/// The registry rejected the credential (401, 403, 404) or could not be reached.
pub const REGISTRY: u8 = 5;
/// A Kubernetes API call failed (unreachable, forbidden, missing CRD, ...), the Lease was
/// lost while the command ran, another holder refused us only after this run had written
/// (what it wrote was released), or a `--dry-run=server` write would be denied or refused.
pub const KUBE_API: u8 = 6;
/// The work succeeded but something held could not be released; `flux-handoff fences` lists it.
pub const CLEANUP: u8 = 7;
/// The pause was broken while the command ran (a fence removed, an owner changed, a paused
/// object deleted or recreated, `spec.suspend` set to false by someone else): the command was
/// stopped, what was still ours released, what is not ours any more left untouched.
pub const PAUSE_BROKEN: u8 = 8;
/// `fences --overdue`: at least one pause is held past its max-hold (listed, and alerted with
/// `--events-addr`); nothing was changed or resumed.
pub const OVERDUE: u8 = 9;
/// `resume`: everything was handed back (fences, Lease, chain record), but a released object
/// was not Ready within `--timeout`; the line names each with its last condition.
pub const NOT_READY: u8 = 10;
/// Stopped by SIGINT or SIGTERM after releasing what it held (128 + SIGINT); `resume`: during
/// its Ready wait, after everything was released, or before anything was written. `run` exits
/// 128+N of its own when signal N ended the command.
pub const INTERRUPTED: u8 = 130;

/// The exit code of each kind of library failure.
pub fn code(class: flux_fence::ErrorClass) -> u8 {
    use flux_fence::ErrorClass as C;
    match class {
        C::BadInput => USAGE,
        C::Registry => REGISTRY,
        C::Refused => REFUSED,
        C::Timeout => TIMEOUT,
        C::KubeApi => KUBE_API,
        C::Cleanup => CLEANUP,
        C::PauseBroken => PAUSE_BROKEN,
        C::Cancelled => INTERRUPTED,
        C::NotReady => NOT_READY,
        _ => INTERNAL,
    }
}

/// The table printed by `--help` and kept in the README.
pub const TABLE: &str = "\
Exit codes:
  0    success
  1    internal error
  2    usage or configuration error: flags, config file, kubeconfig (nothing was touched)
  3    refused: another holder has the Lease or a fence, or the credential's fan-out is
       incomplete (nothing was changed)
  4    timeout: the stable-pause proof or another bounded wait did not settle (also: an
       External Secrets consumer did not converge; the root Secret is unchanged)
  5    registry rejected the credential (401/403/404) or was unreachable
  6    Kubernetes API error (unreachable, forbidden, missing CRD, ...), the Lease was lost
       while the command ran (also by the holder's own deadline when its renewals stopped
       succeeding: the line names what may still be held), a refusal found only after
       this run had written (undone), or a --dry-run=server write the server would deny
       (RBAC) or refuse (admission, validation): nothing was changed
  7    cleanup failed: something is still held or unsettled (see `flux-handoff fences`)
  8    pause broken while the command ran: someone removed or changed a fence, deleted or
       recreated a paused object, or unsuspended it; the command was stopped (the line names
       the object, the change and the field manager); during the proof, such a change ends
       it at its next pass, not at --timeout
  9    fences --overdue: a pause is held past its --max-hold (listed, alerted with
       --events-addr; nothing was changed or resumed)
  10   resume: everything was handed back (fences and Lease released), but a released
       object was not Ready within --timeout (the line names each, with its last condition)
  130  interrupted by SIGINT/SIGTERM (held fences were released first; a second signal
       kills the command at once and still releases)
  run exits with its command's code, or 128+N when signal N ended the command";

//! The signal handlers against real signals sent to this test's own process. One test only:
//! every handler installed in a process sees every signal sent to it, so a second test in the
//! same binary (`cargo test` runs them as threads of one process) would see this one's.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use flux_suspend::Cancel;
use flux_suspend::signals::{Received, SignalOptions, install_with};

/// `install_with`'s notice runs before its signal drives the cancel, so a program's line
/// about the signal comes before anything the stop leads to; and a notice that panics (an
/// `eprintln!` on a closed pipe) still lets every signal drive its cancel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_the_notice_comes_first_and_a_panicking_one_loses_no_signal() {
    let cancel = Cancel::new();
    // What each notice saw of the cancel when it ran.
    let seen: Arc<Mutex<Vec<(Received, bool, bool)>>> = Arc::default();
    let (probe, record) = (cancel.clone(), Arc::clone(&seen));
    install_with(&cancel, SignalOptions::default(), move |what| {
        let state = (what, probe.is_stopped(), probe.is_hurried());
        record.lock().unwrap().push(state);
    })
    .unwrap();
    let other = Cancel::new();
    install_with(&other, SignalOptions::default(), |_| {
        panic!("a notice that cannot print")
    })
    .unwrap();

    let me = std::process::id();
    // A bound only so that a lost signal fails the test instead of hanging it.
    let bound = Duration::from_mins(1);
    testkit::signal::to_process(me, "TERM").unwrap();
    for c in [&cancel, &other] {
        let stopped = tokio::time::timeout(bound, c.stopped()).await;
        assert!(stopped.is_ok(), "the first signal never stopped a cancel");
    }
    testkit::signal::to_process(me, "INT").unwrap();
    for c in [&cancel, &other] {
        let hurried = tokio::time::timeout(bound, c.hurried()).await;
        assert!(hurried.is_ok(), "the second signal never hurried a cancel");
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            (Received::Stopped, false, false),
            (Received::Hurried, true, false)
        ],
        "each notice must run before its signal drives the cancel"
    );
}

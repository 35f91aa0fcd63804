//! The signal handlers against real signals sent to this test's own process (nextest runs
//! each test in a process of its own): `install_with`'s notice runs before the session is
//! stopped or hurried, so a program's line about the signal comes before anything the stop
//! leads to.

use std::sync::{Arc, Mutex};

use flux_suspend::Cancel;
use flux_suspend::signals::{Received, SignalOptions, install_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_the_notice_comes_before_the_stop_and_before_the_hurry() {
    let cancel = Cancel::new();
    // What each notice saw of the cancel when it ran.
    let seen: Arc<Mutex<Vec<(Received, bool, bool)>>> = Arc::default();
    let (probe, record) = (cancel.clone(), Arc::clone(&seen));
    install_with(&cancel, SignalOptions::default(), move |what| {
        let state = (what, probe.is_stopped(), probe.is_hurried());
        record.lock().unwrap().push(state);
    })
    .unwrap();
    let me = std::process::id();
    testkit::signal::to_process(me, "TERM").unwrap();
    cancel.stopped().await;
    testkit::signal::to_process(me, "INT").unwrap();
    cancel.hurried().await;
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

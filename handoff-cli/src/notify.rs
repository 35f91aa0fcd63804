//! Alerts through Flux: `--events-addr URL` (or `events_addr` in the config file; default
//! off) configures [`handoff_app::notify::Notifier`], the sink of the session's events, which
//! `Output` keeps for the run. What is sent, and the bounds, are said there.

use clap::Args;
use flux_suspend::{CleanupError, Event, Members, SessionError};
use handoff_app::notify::{Notifier, parse_addr};

use crate::failure::Failure;
use crate::output::Output;

/// `--events-addr` (pause, run, resume, ghcr reassert).
#[derive(Debug, Args, Clone, Default)]
pub struct EventsArg {
    /// Post Flux-format events (paused, resumed, pause broken, cleanup failed) to
    /// notification-controller's event server at this URL, as the Flux controllers do, e.g.
    /// `http://notification-controller.flux-system.svc.cluster.local./` — an `Alert` selecting
    /// the object forwards them. One POST per event, 2 s bound, no retry; a failure is logged
    /// and never fails the handoff. Config: `events_addr`. Default: off.
    #[arg(long, value_name = "URL")]
    pub events_addr: Option<String>,
}

/// `--events-addr`, else the config file's `events_addr`: `out` sends from now on. A bad URL
/// is one line (exit 2), before any request.
pub fn configure(out: &mut Output, arg: &EventsArg, file: Option<&str>) -> Result<(), Failure> {
    let (text, name) = match (arg.events_addr.as_deref(), file) {
        (Some(t), _) => (t, "--events-addr"),
        (None, Some(t)) => (t, "config: events_addr"),
        (None, None) => return Ok(()),
    };
    let url = parse_addr(text).map_err(|e| Failure::usage(format!("{name}: {e}")))?;
    out.set_events(Notifier::new(url).map_err(Failure::usage)?);
    Ok(())
}

/// The session's holder and reason, for the events that follow.
pub fn session(out: &mut Output, holder: &str, reason: Option<&str>) {
    if let Some(n) = out.events() {
        n.session(holder, reason);
    }
}

/// A session event, to the sink when there is one.
pub fn on_event(out: &mut Output, event: &Event, members: &Members) {
    if let Some(n) = out.events() {
        n.on_event(event, members);
    }
}

/// How a session ended, to the sink when there is one.
pub fn ended<T>(
    out: &mut Output,
    result: &Result<T, SessionError>,
    cleanup: &Result<(), CleanupError>,
) {
    if let Some(n) = out.events() {
        n.ended(result, cleanup);
    }
}

/// `fences --overdue`: one event per pause held past its max-hold.
pub fn overdue(out: &mut Output, pause: &flux_fence::recovery::overdue::OverduePause) {
    if let Some(n) = out.events() {
        n.overdue(pause);
    }
}

/// Waits for the events still in flight (bounded) and records the `events` fact.
pub async fn flush(out: &mut Output) {
    if let Some(n) = out.take_events() {
        let (sent, failed) = n.flush().await;
        out.fact(
            "events",
            serde_json::json!({ "sent": sent, "failed": failed }),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flux_events_a_bad_address_is_exit_2_and_names_its_source() {
        let mut out = Output::new(crate::output::Format::Text, false, true);
        let flag = EventsArg {
            events_addr: Some("http://u:p@nc/".into()),
        };
        let e = configure(&mut out, &flag, Some("http://nc/")).unwrap_err();
        assert_eq!(e.code, crate::exit::USAGE);
        assert_eq!(
            e.message,
            "--events-addr: credentials in the URL are not accepted"
        );
        let e = configure(&mut out, &EventsArg::default(), Some("nc:9090")).unwrap_err();
        assert_eq!(
            e.message,
            "config: events_addr: scheme \"nc\": http or https only"
        );
        configure(&mut out, &EventsArg::default(), None).unwrap();
        assert!(out.take_events().is_none(), "off by default");
    }
}

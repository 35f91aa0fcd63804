//! Alerts through Flux: with `--events-addr URL` (or `events_addr` in the config file; default
//! off) a handoff posts Flux-format events ([`event`]) to notification-controller's event
//! server, the address the Flux controllers' own `--events-addr` names, so every `Alert` that
//! selects a paused object forwards them to its `Provider` (Slack, Teams, a webhook):
//!
//! - `paused by H for REASON` (info) for each target, once the pause is proven;
//! - `resumed by H` (info) for each object released;
//! - `pause by H broken: WHAT` (error) when someone broke the pause while the work ran;
//! - `cleanup by H failed: WHY` (error) for each object the cleanup could not release;
//! - `pause by H for REASON overdue: held D, max-hold M; fenced: ...` (error), one per pause
//!   held past its max-hold, from `fences --overdue` (a scheduled job; nothing is resumed).
//!
//! Delivery never fails or slows a handoff: each event is one POST, sent in the background as
//! it happens, with [`sender::BOUND`] to connect and to finish, and no retry. A failure is one `warn`
//! log line (`flux event not delivered ...`), never an error of the command. When the command
//! ends it waits for the POSTs still in flight, each within its own bound (all at once, so at
//! most [`sender::BOUND`] after the last event, and only after everything was released). One HTTP
//! client serves the whole run. Nothing secret reaches an event: the holder, the object, the
//! user's `--reason`, and the one-line descriptions of what broke. The URL may not carry
//! credentials, and a failure is logged without the URL.

mod event;
pub mod sender;

use clap::Args;
use flux_suspend::steps::Step;
use flux_suspend::{CleanupError, Event, Members, SessionError};

pub use event::Kind;
pub use sender::Notifier;

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

/// `text` as an events address: `http` or `https`, with a host, without credentials or a
/// fragment. One line for exit 2 otherwise.
pub fn parse_addr(text: &str) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(text.trim()).map_err(|e| format!("not a URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("scheme {:?}: http or https only", url.scheme()));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("no host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("credentials in the URL are not accepted".into());
    }
    if url.fragment().is_some() {
        return Err("a fragment (#...) is not sent; remove it".into());
    }
    Ok(url)
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

/// A session event: `paused` for each target once proven, `resumed` for each release.
pub fn on_event(out: &mut Output, event: &Event, members: &Members) {
    let Some(n) = out.events() else { return };
    match event {
        Event::Step(Step::Prove) => {
            for t in &members.targets {
                n.send(Kind::Paused, t, None);
            }
        }
        Event::Released(o) | Event::ReleasedKeepingResume(o) => n.send(Kind::Resumed, o, None),
        _ => {}
    }
}

/// How a session ended: `pause broken` for the object someone broke, `cleanup failed` for
/// each object still held.
pub fn ended<T>(
    out: &mut Output,
    result: &Result<T, SessionError>,
    cleanup: &Result<(), CleanupError>,
) {
    let Some(n) = out.events() else { return };
    if let Err(SessionError::PauseBroken(b)) = result {
        let by =
            b.by.as_ref()
                .map(|m| format!(" by field manager {m:?}"))
                .unwrap_or_default();
        n.send(
            Kind::PauseBroken,
            &b.object,
            Some(&format!("{}{by}", b.change)),
        );
    }
    if let Err(c) = cleanup {
        for o in &c.held {
            let why = format!("{}; the fence is still held", c.why);
            n.send(Kind::CleanupFailed, o, Some(&why));
        }
    }
}

/// `fences --overdue`: one `overdue` event (error) per pause held past its max-hold, about
/// its first target, naming its holder and reason. Another run's pause: nothing is resumed.
pub fn overdue(out: &mut Output, pause: &flux_fence::recovery::overdue::OverduePause) {
    let Some(n) = out.events() else { return };
    let Some(subject) = pause.subject() else {
        return;
    };
    let fenced: Vec<String> = pause
        .objects
        .iter()
        .map(flux_fence::recovery::short_ref)
        .collect();
    let detail = format!("{}; fenced: {}", pause.held_line(), fenced.join(", "));
    n.send_for(
        Kind::Overdue,
        &subject.to_string(),
        &pause.holder,
        pause.reason.as_deref(),
        Some(&detail),
    );
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
    fn flux_events_the_address_must_be_plain_http_or_https() {
        let table: [(&str, Result<&str, &str>); 8] = [
            (
                "http://notification-controller.flux-system.svc.cluster.local./",
                Ok("http://notification-controller.flux-system.svc.cluster.local./"),
            ),
            ("https://127.0.0.1:9090", Ok("https://127.0.0.1:9090/")),
            (" http://[::1]:9090/x ", Ok("http://[::1]:9090/x")),
            (
                "127.0.0.1:9090",
                Err("not a URL (relative URL without a base)"),
            ),
            ("ftp://nc/", Err("scheme \"ftp\": http or https only")),
            (
                "http://user:secret@nc/",
                Err("credentials in the URL are not accepted"),
            ),
            (
                "http://nc/#x",
                Err("a fragment (#...) is not sent; remove it"),
            ),
            ("nc:9090", Err("scheme \"nc\": http or https only")),
        ];
        for (text, want) in table {
            let got = parse_addr(text);
            assert_eq!(
                got.as_ref()
                    .map(reqwest::Url::as_str)
                    .map_err(String::as_str),
                want,
                "{text}"
            );
        }
    }

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

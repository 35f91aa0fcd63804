//! Alerts through Flux: a handoff configured with an events address (flux-handoff's
//! `--events-addr`, or `events_addr` in its config file; default off) posts Flux-format events
//! (the JSON of `event.rs`) to notification-controller's event
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
mod sender;

use flux_suspend::steps::Step;
use flux_suspend::{CleanupError, Event, Members, SessionError};

pub use event::{Kind, MAX_MESSAGE, REPORTING_CONTROLLER};
pub use sender::{BOUND, Notifier};

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

impl Notifier {
    /// A session event: `paused` for each target once proven, `resumed` for each release.
    pub fn on_event(&mut self, event: &Event, members: &Members) {
        match event {
            Event::Step(Step::Prove) => {
                for t in &members.targets {
                    self.send(Kind::Paused, t, None);
                }
            }
            Event::Released(o) | Event::ReleasedKeepingResume(o) => {
                self.send(Kind::Resumed, o, None);
            }
            _ => {}
        }
    }

    /// How a session ended: `pause broken` for the object someone broke, `cleanup failed` for
    /// each object still held.
    pub fn ended<T>(
        &mut self,
        result: &Result<T, SessionError>,
        cleanup: &Result<(), CleanupError>,
    ) {
        if let Err(SessionError::PauseBroken(b)) = result {
            let by =
                b.by.as_ref()
                    .map(|m| format!(" by field manager {m:?}"))
                    .unwrap_or_default();
            let what = format!("{}{by}", b.change);
            self.send(Kind::PauseBroken, &b.object, Some(&what));
        }
        if let Err(c) = cleanup {
            for o in &c.held {
                let why = format!("{}; the fence is still held", c.why);
                self.send(Kind::CleanupFailed, o, Some(&why));
            }
        }
    }

    /// One `overdue` event (error) for a pause held past its max-hold, about its first
    /// target, naming its holder and reason. Another run's pause: nothing is resumed.
    pub fn overdue(&mut self, pause: &flux_fence::recovery::overdue::OverduePause) {
        let Some(subject) = pause.subject() else {
            return;
        };
        let fenced: Vec<String> = pause
            .objects
            .iter()
            .map(flux_fence::recovery::short_ref)
            .collect();
        let detail = format!("{}; fenced: {}", pause.held_line(), fenced.join(", "));
        self.send_for(
            Kind::Overdue,
            subject,
            &pause.holder,
            pause.reason.as_deref(),
            Some(&detail),
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
}

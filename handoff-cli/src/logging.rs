//! The log: tracing's events on stderr, filtered by `-q`/`-v` or `FLUX_HANDOFF_LOG`, as text
//! or JSON (`--log-format`). Values in an event are often someone else's text — a Lease
//! holder, a fence's owner, an API server's message — so nothing reaches stderr unescaped
//! ([`handoff_app::render::plain`], the one escaper of every sink):
//!
//! - in text, every field and the message go through [`plain::line`] as they are formatted
//!   ([`Fields`]): a newline in a holder's name is shown as `\n` inside its value;
//! - in either format, each record as formatted goes through [`plain::event`] on its way out
//!   ([`Sink`]): whatever a formatter let through, the record is one line that the runner
//!   cannot read as a workflow command (no leading `::`, no `##[`).

use std::fmt::{self, Write as _};
use std::io::Write as _;

use handoff_app::render::plain;
use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::Writer;

use crate::args::LogFormat;
use crate::cli::Cli;

/// Installs the process's tracing subscriber (once; a second call changes nothing).
pub fn init(cli: &Cli) {
    // kube-client logs every failed request (a refused connection, a 503 that is then retried)
    // as an ERROR line of its own; the command's one `error:` line says what failed, so those
    // lines appear only from -vv on.
    let level = match (cli.global.quiet, cli.global.verbose) {
        (true, _) => "error,kube_client::client::builder=off",
        (false, 0) => "warn,kube_client::client::builder=off",
        (false, 1) => "info,kube=warn,kube_client::client::builder=off",
        (false, 2) => "debug,kube=info,hyper=info",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("FLUX_HANDOFF_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let json = cli.global.log_format == LogFormat::Json;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(Sink { ansi, json })
        .with_ansi(ansi)
        .with_target(false);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.fmt_fields(Fields).try_init()
    };
}

/// The text format's fields: `name=value`, the message bare, each value through
/// [`plain::line`] (so a value shows its control characters as escapes and holds no
/// workflow command).
#[derive(Debug, Clone, Copy, Default)]
pub struct Fields;

impl<'w> FormatFields<'w> for Fields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut each = Each::default();
        fields.record(&mut each);
        writer.write_str(&each.out)
    }
}

/// Collects one event's (or span's) fields as text.
#[derive(Debug, Default)]
struct Each {
    out: String,
}

impl Each {
    fn push(&mut self, field: &Field, value: &str) {
        let name = field.name();
        // The `log` crate's records carry where they came from as fields: not shown.
        if name.starts_with("log.") {
            return;
        }
        if !self.out.is_empty() {
            self.out.push(' ');
        }
        if name != "message" {
            let _ = write!(self.out, "{}=", name.trim_start_matches("r#"));
        }
        self.out.push_str(&plain::line(value));
    }
}

impl Visit for Each {
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let mut text = value.to_string();
        let mut source = value.source();
        while let Some(e) = source {
            let _ = write!(text, ": {e}");
            source = e.source();
        }
        self.push(field, &text);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // A message's Debug is its Display (`format_args!`); a `%value` field's too.
        self.push(field, &format!("{value:?}"));
    }
}

/// Where records go: stderr, each through [`plain::event`] as one write.
#[derive(Debug, Clone, Copy)]
pub struct Sink {
    /// The formatter writes ANSI colours (stderr is a terminal).
    pub ansi: bool,
    /// The records are JSON objects.
    pub json: bool,
}

impl<'a> MakeWriter<'a> for Sink {
    type Writer = Record;

    fn make_writer(&'a self) -> Record {
        Record {
            sink: *self,
            buf: Vec::new(),
        }
    }
}

/// One record on its way out: collected, then escaped and written whole when dropped (the
/// formatter writes a record and drops its writer).
#[derive(Debug)]
pub struct Record {
    sink: Sink,
    buf: Vec<u8>,
}

impl std::io::Write for Record {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.buf);
        let line = plain::event(&text, self.sink.ansi, self.sink.json);
        // A closed stderr (a cancelled CI step's pipe) is no reason to fail.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    /// A writer into a shared buffer, for a subscriber under test.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Self;
        fn make_writer(&'a self) -> Self {
            self.clone()
        }
    }

    #[test]
    fn log_escape_fields_and_messages_are_escaped_as_they_are_formatted() {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(captured.clone())
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .fmt_fields(Fields)
            .finish();
        let evil = "evil\n::error::x\r\n##[add-mask]y";
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!(holder = %evil, quoted = evil, "lease lost");
            tracing::warn!("held by {evil}");
            let e = std::io::Error::other(evil.to_string());
            tracing::warn!(error = &e as &(dyn std::error::Error + 'static), "failed");
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        for l in text.lines() {
            assert!(!l.trim_start().starts_with("::"), "{l}");
            assert!(!l.contains("##["), "{l}");
            assert!(l.contains("evil") || l.contains("failed"), "{l}");
        }
        assert!(
            text.contains(r"holder=evil\n::error::x\r\n##\[add-mask]y"),
            "{text}"
        );
    }
}

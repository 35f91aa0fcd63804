//! Issue 26: a session's `tracing` spans. One `handoff_session` span carries the holder, the
//! Lease and the targets; each phase (`start`, `pause`, `work`, `cleanup`) is its child, and
//! each member's step (`fence`, `ack`, `release`) a `member` span under its phase.
//! Recorded by a subscriber layer of the test's own, around a real session (API server and
//! controller model).

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flux_model::model::start_seeded;
use flux_suspend::object::kustomization;
use flux_suspend::{Cancel, Session, SessionOptions, TargetSpec};
use testkit::TestNs;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

const PARENT: &str = "flux-system";
const TARGET: &str = "infrastructure";

/// A span as seen: its name, its parent's name, its fields as `name=value ` text.
#[derive(Debug, Clone)]
struct Seen {
    id: u64,
    name: String,
    parent: Option<String>,
    fields: String,
}

#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<Seen>>>);

struct Text<'a>(&'a mut String);

impl Visit for Text<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={value:?} ", field.name());
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = String::new();
        attrs.record(&mut Text(&mut fields));
        let parent = ctx
            .span(id)
            .and_then(|s| s.parent().map(|p| p.name().to_string()));
        self.0.lock().unwrap().push(Seen {
            id: id.into_u64(),
            name: attrs.metadata().name().to_string(),
            parent,
            fields,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut spans = self.0.lock().unwrap();
        if let Some(s) = spans.iter_mut().rev().find(|s| s.id == id.into_u64()) {
            values.record(&mut Text(&mut s.fields));
        }
    }
}

#[tokio::test]
async fn session_spans_one_per_session_a_child_per_phase_and_one_per_member_step() {
    let ns = TestNs::new("session-spans").await.unwrap();
    let _model = start_seeded(&ns.client, &ns.name, |c| c).await.unwrap();
    let mut opts = SessionOptions::new(vec![TargetSpec::new(kustomization(&ns.name, TARGET))]);
    opts.lease.namespace.clone_from(&ns.name);
    opts.interval = Duration::from_millis(100);
    opts.timeout = Duration::from_secs(30);

    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    // This thread only: the current-thread runtime runs the session and its heartbeat here.
    let _default = tracing::subscriber::set_default(subscriber);
    let session = Session::start(ns.client.clone(), opts, Cancel::new())
        .await
        .unwrap();
    let holder = session.holder().to_string();
    let outcome = session
        .run_paused(|_| {}, |_paused| async { Ok::<_, std::io::Error>(()) })
        .await;
    outcome.into_result().unwrap();

    let seen = spans.0.lock().unwrap().clone();
    let sessions: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.name == "handoff_session")
        .collect();
    assert_eq!(sessions.len(), 1, "{seen:#?}");
    let fields = &sessions[0].fields;
    assert!(fields.contains(&format!("holder={holder}")), "{fields}");
    assert!(
        fields.contains(&format!("lease={}/flux-handoff", ns.name)),
        "{fields}"
    );
    assert!(
        fields.contains("targets=") && fields.contains(TARGET),
        "{fields}"
    );
    for phase in ["start", "pause", "work", "cleanup"] {
        assert!(
            seen.iter()
                .any(|s| s.name == phase && s.parent.as_deref() == Some("handoff_session")),
            "no `{phase}` span under the session: {seen:#?}"
        );
    }
    // One span per member and step, under its phase, naming the object and its role.
    for (object, role) in [(PARENT, "parent"), (TARGET, "target")] {
        let object = format!("object=Kustomization {}/{object} ", ns.name);
        for (step, phase) in [("fence", "pause"), ("ack", "pause"), ("release", "cleanup")] {
            assert!(
                seen.iter().any(|s| s.name == "member"
                    && s.parent.as_deref() == Some(phase)
                    && s.fields.contains(&format!("step=\"{step}\" "))
                    && s.fields.contains(&object)
                    && s.fields.contains(&format!("role=\"{role}\""))),
                "no `{step}` span of the {role} under `{phase}`: {seen:#?}"
            );
        }
    }
}

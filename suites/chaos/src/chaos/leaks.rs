//! The secret-leak scan: every registered secret, raw and in each base64 alphabet, looked for
//! in everything the runs printed and in the annotations and Events on the server afterwards.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, Resource};

use super::{Finding, Kind, Tally, secrets, transcript};

/// The forms of `secret` that must appear nowhere: itself and its base64 encodings.
#[must_use]
pub fn forms(secret: &str) -> Vec<String> {
    let mut f = vec![secret.to_string()];
    for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
        let e = engine.encode(secret);
        if !f.contains(&e) {
            f.push(e);
        }
    }
    f
}

/// Where a secret (by its index in the registry) was found in `(label, text)` pairs.
#[must_use]
pub fn hits(secrets: &[String], texts: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (i, s) in secrets.iter().enumerate() {
        let forms = forms(s);
        for (label, text) in texts {
            if forms.iter().any(|f| text.contains(f.as_str())) {
                // Never print the secret itself: name it by its number.
                found.push(format!("secret #{} in {label}", i + 1));
            }
        }
    }
    found
}

/// Scans the transcript and the cluster: annotations of Flux objects, Leases and Secrets in
/// every namespace, and every Event.
///
/// # Errors
/// A list call failed.
pub async fn scan(client: &Client) -> anyhow::Result<Tally> {
    let mut texts = transcript();
    let printed = texts.len();
    for ar in [
        testkit::fixtures::kustomization_resource(),
        testkit::fixtures::helmrelease_resource(),
        testkit::fixtures::ocirepository_resource(),
    ] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        for o in api.list(&ListParams::default()).await? {
            texts.push(annotations_of(&ar.kind, o.meta()));
        }
    }
    for l in Api::<Lease>::all(client.clone())
        .list(&ListParams::default())
        .await?
    {
        texts.push(annotations_of("Lease", l.meta()));
    }
    for s in Api::<Secret>::all(client.clone())
        .list(&ListParams::default())
        .await?
    {
        texts.push(annotations_of("Secret", s.meta()));
    }
    let events = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let n_events = events.items.len();
    for e in events {
        texts.push((
            format!("Event {}", e.meta().name.clone().unwrap_or_default()),
            serde_json::to_string(&e)?,
        ));
    }
    let secrets = secrets();
    let findings: Vec<Finding> = hits(&secrets, &texts)
        .into_iter()
        .map(|h| Finding::new(Kind::SecretLeak, h))
        .collect();
    Ok(Tally {
        scenario: "leaks",
        count: texts.len(),
        line: format!(
            "chaos: leaks secrets={} outputs={printed} events={n_events} objects={} found={}",
            secrets.len(),
            texts.len() - printed - n_events,
            findings.len()
        ),
        findings,
    })
}

fn annotations_of(
    kind: &str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> (String, String) {
    let label = format!(
        "{kind} {}/{} annotations",
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default()
    );
    let text = meta
        .annotations
        .as_ref()
        .map(|a| {
            a.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    (label, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_found_raw_and_base64_encoded_and_named_by_number_only() {
        let secrets = vec!["ghp_canary123".to_string(), "other-token".to_string()];
        let b64 = STANDARD.encode("other-token");
        let texts = vec![
            ("stdout".to_string(), "all fine".to_string()),
            (
                "stderr".to_string(),
                "token ghp_canary123 leaked".to_string(),
            ),
            ("Event e".to_string(), format!("x{b64}x")),
        ];
        let h = hits(&secrets, &texts);
        assert_eq!(h, ["secret #1 in stderr", "secret #2 in Event e"]);
        assert!(h.iter().all(|l| !l.contains("canary")));
        assert!(hits(&secrets, &texts[..1]).is_empty());
    }
}

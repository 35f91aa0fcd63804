//! Tier 1 with a local HTTP stub: the GitHub liveness source never lets its token out — not in
//! `Debug`, verdicts, errors — and refuses configurations that would send it in clear.

use std::sync::Arc;
use std::time::Duration;

use flux_fence::liveness::{GithubConfig, GithubRuns, LivenessSource, Verdict};
use testkit::github_stub::{Answer, GithubStub};

const REPO: &str = "acme/deploy";
const TOKEN: &str = "ghs_stubTokenNeverPrinted0123456789";

fn source(stub: &GithubStub, timeout: Duration) -> Arc<dyn LivenessSource> {
    testkit::install_crypto();
    let cfg = GithubConfig::new(&stub.url, REPO, TOKEN.to_string().into())
        .unwrap()
        .timeout(timeout);
    Arc::new(GithubRuns::new(cfg).unwrap())
}

#[tokio::test]
async fn ci_liveness_the_token_is_never_in_debug_verdicts_or_errors() {
    let stub = GithubStub::start().await.unwrap();
    stub.script(REPO, 5, 1, vec![Answer::error(500)]);
    let src = source(&stub, Duration::from_secs(5));
    let cfg = GithubConfig::new(&stub.url, REPO, TOKEN.to_string().into()).unwrap();
    let verdicts = [
        src.check("gh5.1-abcdef").await,
        src.check("gh6.1-abcdef").await,
        src.check("local-x-1-abcdef").await,
    ];
    let unreachable = GithubRuns::new(
        GithubConfig::new("http://127.0.0.1:9", REPO, TOKEN.to_string().into()).unwrap(),
    )
    .unwrap()
    .check("gh5.1-abcdef")
    .await;
    let texts = [
        format!("{src:?}"),
        format!("{cfg:?}"),
        format!("{verdicts:?}"),
        format!("{unreachable:?} {unreachable}"),
    ];
    for t in &texts {
        assert!(!t.contains(TOKEN), "{t}");
    }
    assert!(verdicts.iter().all(|v| matches!(
        v,
        Verdict::NotProved {
            may_change: false,
            ..
        }
    )));
    for bad in [
        ("ftp://x", REPO),
        ("http://api.github.example", REPO),
        ("http://127.0.0.1.evil.example/api", REPO),
        ("https://x", "no-slash"),
        ("https://x", "a/b/c"),
    ] {
        let e = GithubConfig::new(bad.0, bad.1, TOKEN.to_string().into()).unwrap_err();
        assert!(!e.contains(TOKEN), "{e}");
    }
}

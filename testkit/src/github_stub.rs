//! A local stub of the GitHub REST API's "Get a workflow run attempt"
//! (`GET /repos/{owner}/{repo}/actions/runs/{run_id}/attempts/{attempt_number}`), answering
//! with the documented workflow-run shape
//! (<https://docs.github.com/en/rest/actions/workflow-runs#get-a-workflow-run-attempt>).
//! Tests script it per attempt: a status, slowness, a failure, an answer that changes between
//! calls, a run of another repository. Plain HTTP on loopback, one request per connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Body (JSON or anything).
    pub body: String,
    /// Wait this long before answering.
    pub delay: Duration,
}

impl Answer {
    /// 200 with a workflow run attempt of `repo` (`owner/name`) in `status` (`None`: the field
    /// is left out). `conclusion` is `success` for `completed`, else `null`, as GitHub does.
    #[must_use]
    pub fn run(repo: &str, run_id: u64, attempt: u64, status: Option<&str>) -> Self {
        let (owner, name) = repo.split_once('/').unwrap_or((repo, repo));
        let mut v = json!({
            "id": run_id,
            "name": "deploy",
            "node_id": "WFR_kwLOstub",
            "head_branch": "main",
            "head_sha": "acb5820ced9479c074f688cc328bf03f341a511d",
            "path": ".github/workflows/deploy.yml",
            "run_number": 562,
            "run_attempt": attempt,
            "event": "merge_group",
            "conclusion": if status == Some("completed") { json!("success") } else { Value::Null },
            "workflow_id": 159_038,
            "url": format!("https://api.github.com/repos/{repo}/actions/runs/{run_id}"),
            "html_url": format!("https://github.com/{repo}/actions/runs/{run_id}"),
            "created_at": "2026-12-01T10:00:00Z",
            "updated_at": "2026-12-01T10:05:00Z",
            "run_started_at": "2026-12-01T10:00:00Z",
            "repository": {
                "id": 1_296_269,
                "name": name,
                "full_name": repo,
                "private": true,
                "owner": { "login": owner },
            },
        });
        if let Some(s) = status {
            v["status"] = json!(s);
        }
        Self {
            status: 200,
            body: v.to_string(),
            delay: Duration::ZERO,
        }
    }

    /// A bare status with a GitHub-style error body.
    #[must_use]
    pub fn error(status: u16) -> Self {
        Self {
            status,
            body: json!({
                "message": if status == 404 { "Not Found" } else { "Server Error" },
                "documentation_url": "https://docs.github.com/rest/actions/workflow-runs#get-a-workflow-run-attempt",
                "status": status.to_string(),
            })
            .to_string(),
            delay: Duration::ZERO,
        }
    }

    /// This answer, after `delay`.
    #[must_use]
    pub fn slow(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// One request as the stub saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The request line's path.
    pub path: String,
    /// The `Authorization` header value, as sent.
    pub authorization: Option<String>,
    /// The `Accept` header value.
    pub accept: Option<String>,
}

/// A running stub: answers for a path are served in order, the last one repeated; an unknown
/// path gets 404.
#[derive(Debug)]
pub struct GithubStub {
    /// `http://127.0.0.1:PORT`: the `GITHUB_API_URL` to give.
    pub url: String,
    seen: Arc<Mutex<Vec<Received>>>,
    script: Arc<Mutex<HashMap<String, Vec<Answer>>>>,
    task: JoinHandle<()>,
}

impl Drop for GithubStub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GithubStub {
    /// Starts the stub on a free loopback port.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Mutex<HashMap<String, Vec<Answer>>>> = Arc::default();
        let (s, sc) = (Arc::clone(&seen), Arc::clone(&script));
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (seen, script) = (Arc::clone(&s), Arc::clone(&sc));
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&buf).to_string();
                    let request = parse(&head);
                    let answer = {
                        let mut script = script.lock().unwrap();
                        match script.get_mut(&request.path) {
                            Some(list) if list.len() > 1 => list.remove(0),
                            Some(list) if !list.is_empty() => list[0].clone(),
                            _ => Answer::error(404),
                        }
                    };
                    seen.lock().unwrap().push(request);
                    tokio::time::sleep(answer.delay).await;
                    let response = format!(
                        "HTTP/1.1 {} Stub\r\ncontent-type: application/json; charset=utf-8\r\n\
                         x-github-api-version-selected: 2022-11-28\r\ncontent-length: {}\r\n\
                         connection: close\r\n\r\n{}",
                        answer.status,
                        answer.body.len(),
                        answer.body
                    );
                    let _ = conn.write_all(response.as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        Ok(Self {
            url,
            seen,
            script,
            task,
        })
    }

    /// Scripts the answers for run `run_id` attempt `attempt` of `repo`: served in order, the
    /// last one repeated.
    pub fn script(&self, repo: &str, run_id: u64, attempt: u64, answers: Vec<Answer>) {
        self.script.lock().unwrap().insert(
            format!("/repos/{repo}/actions/runs/{run_id}/attempts/{attempt}"),
            answers,
        );
    }

    /// Every request seen so far.
    #[must_use]
    pub fn seen(&self) -> Vec<Received> {
        self.seen.lock().unwrap().clone()
    }
}

fn parse(head: &str) -> Received {
    let mut lines = head.lines();
    let path = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("")
        .to_string();
    let header = |name: &str| {
        head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    Received {
        path,
        authorization: header("authorization"),
        accept: header("accept"),
    }
}

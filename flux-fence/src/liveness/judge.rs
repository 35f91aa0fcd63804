//! The pure half of the GitHub liveness source: which run a holder names, and what an answer
//! of `GET /repos/{owner}/{repo}/actions/runs/{run_id}/attempts/{attempt_number}` proves.
//!
//! The answer is a workflow-run object ("Get a workflow run attempt",
//! <https://docs.github.com/en/rest/actions/workflow-runs#get-a-workflow-run-attempt>, API
//! version 2022-11-28). Of it we read `id`, `run_attempt`, `status` (`queued`,
//! `in_progress`, `completed`, `waiting`, `requested`, `pending`), `conclusion` and
//! `repository.full_name`. Only `status: completed` is terminal.

use serde_json::Value;

use super::Verdict;

/// The CI run and attempt a holder identity names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) struct CiRun {
    /// `GITHUB_RUN_ID` of the holder.
    pub run_id: u64,
    /// `GITHUB_RUN_ATTEMPT` of the holder.
    pub attempt: u64,
}

impl CiRun {
    /// Reads `gh<run>.<attempt>-<suffix>` (the form of [`crate::Holder::for_ci_run`]); `None`
    /// for any other holder.
    #[must_use]
    pub fn from_holder(holder: &str) -> Option<Self> {
        let rest = holder.strip_prefix("gh")?;
        let (run, rest) = rest.split_once('.')?;
        let (attempt, suffix) = rest.split_once('-')?;
        let digits =
            |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(run) || !digits(attempt) || suffix.is_empty() {
            return None;
        }
        Some(Self {
            run_id: run.parse().ok()?,
            attempt: attempt.parse().ok()?,
        })
    }
}

/// Judges one answer about `run` in repository `repo` (`owner/name`): HTTP `status` and
/// `body`. Pure.
#[must_use]
pub(crate) fn judge_attempt(run: CiRun, repo: &str, status: u16, body: &[u8]) -> Verdict {
    let which = format!(
        "GitHub run {} attempt {} in {repo}",
        run.run_id, run.attempt
    );
    match status {
        200 => {}
        404 => {
            return Verdict::refused(format!(
                "{which} was not found (404: another repository's run, a deleted run, or a \
                 token that cannot see it); check the run, then recover by hand"
            ));
        }
        401 | 403 => {
            return Verdict::refused(format!(
                "{which} could not be read ({status}): the token needs `actions: read` on {repo}"
            ));
        }
        500..=599 => {
            return Verdict::refused(format!(
                "{which} could not be read: GitHub answered {status}; try again later"
            ));
        }
        other => {
            return Verdict::refused(format!(
                "{which} could not be read: unexpected HTTP {other}; recover by hand"
            ));
        }
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Verdict::refused(format!("{which}: the answer is not JSON; recover by hand"));
    };
    if v.get("id").and_then(Value::as_u64) != Some(run.run_id)
        || v.get("run_attempt").and_then(Value::as_u64) != Some(run.attempt)
    {
        return Verdict::refused(format!(
            "{which}: the answer names another run or attempt; recover by hand"
        ));
    }
    let full_name = v.pointer("/repository/full_name").and_then(Value::as_str);
    if !full_name.is_some_and(|n| n.eq_ignore_ascii_case(repo)) {
        return Verdict::refused(format!(
            "{which}: the answer belongs to repository {}; recover by hand",
            full_name.unwrap_or("(none)")
        ));
    }
    match v.get("status").and_then(Value::as_str) {
        Some("completed") => {
            let conclusion = v
                .get("conclusion")
                .and_then(Value::as_str)
                .unwrap_or("none");
            Verdict::Finished(format!("{which} is completed (conclusion {conclusion})"))
        }
        Some(s) => Verdict::pending(format!(
            "{which} is {s}: its holder may still be working; wait for it to finish, or \
             cancel the run and recover again"
        )),
        None => Verdict::refused(format!(
            "{which}: the answer has no status; recover by hand"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_liveness_holder_names_exactly_one_attempt() {
        let table = [
            ("gh123.2-abc123", Some((123, 2))),
            ("gh38510782818.1-7f3a9c", Some((38_510_782_818, 1))),
            ("gh123-abc123", None),
            ("gh.1-abc", None),
            ("gh12.x-abc", None),
            ("gh12.1", None),
            ("gh12.1-", None),
            ("local-host-42-abcdef", None),
        ];
        for (holder, want) in table {
            let got = CiRun::from_holder(holder).map(|r| (r.run_id, r.attempt));
            assert_eq!(got, want, "{holder}");
        }
    }

    fn body(id: u64, attempt: u64, repo: &str, status: Option<&str>) -> Vec<u8> {
        let mut v = serde_json::json!({
            "id": id, "run_attempt": attempt, "conclusion": null,
            "repository": {"full_name": repo},
        });
        if let Some(s) = status {
            v["status"] = s.into();
        }
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn ci_liveness_only_completed_of_the_exact_attempt_is_finished() {
        let run = CiRun {
            run_id: 7,
            attempt: 2,
        };
        let repo = "acme/deploy";
        let fin = |v: &Verdict| matches!(v, Verdict::Finished(_));
        let may = |v: &Verdict| {
            matches!(
                v,
                Verdict::NotProved {
                    may_change: true,
                    ..
                }
            )
        };
        let table: [(u16, Vec<u8>, &str); 12] = [
            (200, body(7, 2, repo, Some("completed")), "finished"),
            (
                200,
                body(7, 2, "ACME/Deploy", Some("completed")),
                "finished",
            ),
            (200, body(7, 2, repo, Some("in_progress")), "pending"),
            (200, body(7, 2, repo, Some("queued")), "pending"),
            (200, body(7, 2, repo, Some("waiting")), "pending"),
            (200, body(7, 2, repo, None), "refused"),
            (200, body(7, 3, repo, Some("completed")), "refused"),
            (200, body(8, 2, repo, Some("completed")), "refused"),
            (200, body(7, 2, "other/repo", Some("completed")), "refused"),
            (200, b"<html>".to_vec(), "refused"),
            (404, Vec::new(), "refused"),
            (502, Vec::new(), "refused"),
        ];
        for (status, b, want) in table {
            let v = judge_attempt(run, repo, status, &b);
            let got = if fin(&v) {
                "finished"
            } else if may(&v) {
                "pending"
            } else {
                "refused"
            };
            assert_eq!(got, want, "{status} {}: {v}", String::from_utf8_lossy(&b));
            assert!(!v.to_string().contains('\n'), "one line: {v}");
        }
    }
}

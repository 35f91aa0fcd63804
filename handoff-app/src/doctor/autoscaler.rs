//! doctor's autoscaler check: each replicas gate's Deployment is targeted by no
//! `HorizontalPodAutoscaler` or unpaused KEDA `ScaledObject`, the same question `run` and
//! `pause` refuse on before any write ([`flux_suspend::autoscaler`]). A forbidden list is a
//! failed check naming the right, never a silent pass.

use flux_suspend::TargetSpec;
use flux_suspend::autoscaler::{self, Verdict};
use kube::Client;

use super::{Finding, chain};

/// One finding per replicas gate among `targets`.
pub(super) async fn findings(client: &Client, targets: &[TargetSpec]) -> Vec<Finding> {
    let mut out = Vec::new();
    for t in targets {
        let Some(want) = t.replicas else { continue };
        let verdict = autoscaler::check(client, &t.object, want).await;
        out.push(finding(&t.object, want, verdict));
    }
    out
}

/// Pure: the finding of gate `gate` at `want` for what the lists answered.
fn finding(
    gate: &flux_fence::ObjectRef,
    want: i32,
    verdict: Result<Verdict, kube::Error>,
) -> Finding {
    let check = format!("no autoscaler scales replicas gate {gate}");
    match verdict {
        Ok(v) => match autoscaler::refusal_line(gate, want, &v) {
            None => Finding::ok(check),
            Some(fix) => Finding::fail(check, fix),
        },
        Err(e) => Finding::fail(check, format!("cannot check: {}", chain(&e))),
    }
}

#[cfg(test)]
mod tests {
    use flux_suspend::autoscaler::Kind;

    use super::*;

    #[test]
    fn autoscaler_finding_fails_with_the_fix_or_the_missing_right() {
        let gate = flux_suspend::object::deployment("kube-system", "ca");
        let ok = finding(&gate, 0, Ok(Verdict::Clear));
        assert!(ok.is_ok());
        assert_eq!(
            ok.check,
            "no autoscaler scales replicas gate Deployment kube-system/ca"
        );
        let hpa = finding(&gate, 0, Ok(Verdict::Found(vec![(Kind::Hpa, "h".into())])));
        let fix = hpa.fix.unwrap();
        assert!(
            fix.contains("HorizontalPodAutoscaler kube-system/h"),
            "{fix}"
        );
        assert!(fix.contains("--allow-autoscaler"), "{fix}");
        let forbidden = finding(
            &gate,
            0,
            Ok(Verdict::Forbidden {
                kind: Kind::Keda,
                message: "denied".into(),
            }),
        );
        let fix = forbidden.fix.unwrap();
        assert!(
            fix.contains("list scaledobjects.keda.sh in kube-system is forbidden"),
            "{fix}"
        );
    }
}

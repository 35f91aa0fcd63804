use kube::api::GroupVersionKind;

use super::*;
use crate::{Epoch, Holder};

fn owner(h: &str, e: u64) -> OwnerValue {
    OwnerValue::new(h.parse::<Holder>().unwrap(), Epoch(e))
}

fn ks() -> ApiResource {
    let gvk = GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization");
    ApiResource::from_gvk_with_plural(&gvk, "kustomizations")
}

fn hr(version: &str) -> ApiResource {
    let gvk = GroupVersionKind::gvk("helm.toolkit.fluxcd.io", version, "HelmRelease");
    ApiResource::from_gvk_with_plural(&gvk, "helmreleases")
}

fn member(ns: &str, name: &str) -> RecordedMember {
    RecordedMember::of(&ObjectRef::new(ks(), ns, name))
}

fn record(o: &OwnerValue, members: &[RecordedMember]) -> String {
    ChainRecord {
        owner: o.to_string(),
        members: members.to_vec(),
    }
    .render()
    .unwrap()
}

#[test]
fn chain_record_stamp_only_adds_and_never_replaces_a_live_epoch() {
    let ours = owner("h", 3);
    let (a, b) = (member("flux-system", "apps"), member("tenant", "app"));
    let table: Vec<(&str, Option<String>, Vec<RecordedMember>, Stamp)> = vec![
        ("nothing recorded yet", None, vec![], Stamp::Keep),
        (
            "first member",
            None,
            vec![a.clone()],
            Stamp::Write(record(&ours, std::slice::from_ref(&a))),
        ),
        (
            "ours, already listed",
            Some(record(&ours, &[a.clone(), b.clone()])),
            vec![b.clone()],
            Stamp::Keep,
        ),
        (
            "ours, one more (the record keeps what it listed)",
            Some(record(&ours, std::slice::from_ref(&a))),
            vec![b.clone()],
            Stamp::Write(record(&ours, &[a.clone(), b.clone()])),
        ),
        (
            "a dead epoch's record on a Lease taken free",
            Some(record(&owner("x", 2), std::slice::from_ref(&a))),
            vec![b.clone()],
            Stamp::Write(record(&ours, std::slice::from_ref(&b))),
        ),
        (
            "another owner at our epoch",
            Some(record(&owner("x", 3), std::slice::from_ref(&a))),
            vec![b.clone()],
            Stamp::Foreign {
                owner: "x;3".into(),
            },
        ),
        (
            "a newer epoch",
            Some(record(&owner("h", 4), std::slice::from_ref(&a))),
            vec![b.clone()],
            Stamp::Foreign {
                owner: "h;4".into(),
            },
        ),
        (
            "malformed",
            Some("{not json".into()),
            vec![b.clone()],
            Stamp::Foreign {
                owner: "{not json".into(),
            },
        ),
    ];
    for (what, current, members, want) in table {
        assert_eq!(
            decide_stamp(current.as_deref(), &ours, &members).unwrap(),
            want,
            "{what}"
        );
    }
}

#[test]
fn chain_record_is_cleared_only_for_its_owner_or_a_settled_one() {
    let ours = owner("h", 3);
    let a = member("ns", "a");
    let settled = vec!["x;2".to_string()];
    let table = [
        (None, false),
        (Some(record(&ours, std::slice::from_ref(&a))), true),
        (Some(record(&owner("x", 2), std::slice::from_ref(&a))), true),
        (
            Some(record(&owner("y", 2), std::slice::from_ref(&a))),
            false,
        ),
        (
            Some(record(&owner("h", 2), std::slice::from_ref(&a))),
            false,
        ),
        (Some("garbage".to_string()), false),
    ];
    for (current, want) in table {
        assert_eq!(
            clears_on_release(current.as_deref(), &ours, &settled),
            want,
            "{current:?}"
        );
    }
}

#[test]
fn chain_record_members_resolve_only_to_known_kinds_at_the_readers_version() {
    let kinds = [ks(), hr("v2")];
    let old_hr = RecordedMember::of(&ObjectRef::new(hr("v2beta1"), "apps", "podinfo"));
    let got = old_hr.resolve(&kinds).unwrap();
    assert_eq!(got, ObjectRef::new(hr("v2"), "apps", "podinfo"));
    assert!(old_hr.is(&got));
    let secret = RecordedMember {
        api_version: "v1".into(),
        kind: "Secret".into(),
        namespace: "flux-system".into(),
        name: "x".into(),
    };
    assert_eq!(secret.resolve(&kinds), None);
    let text = record(&owner("h", 1), &[member("a", "b"), old_hr]);
    assert!(!text.contains('\n'));
    let back = ChainRecord::parse(&text).unwrap();
    assert_eq!(back.members.len(), 2);
    assert!(ChainRecord::parse(r#"{"owner":"no-epoch","members":[]}"#).is_err());
}

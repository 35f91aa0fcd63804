//! Naming a Kubernetes API request by its verb and resource, as the proxy counts and arms it.

/// `verb resource[/subresource]` of a Kubernetes API request.
#[must_use]
pub fn classify(method: &str, path: &str, query: &str) -> String {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let rest: &[&str] = match parts.as_slice() {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] => rest,
        _ => return format!("{} {path}", method.to_ascii_lowercase()),
    };
    let rest = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, named) = match rest {
        [res] => ((*res).to_string(), false),
        [res, _name] => ((*res).to_string(), true),
        [res, _name, sub, ..] => (format!("{res}/{sub}"), true),
        [] => ("namespaces".to_string(), false),
    };
    let verb = match (method, named) {
        ("GET", _) if query.contains("watch=true") || query.contains("watch=1") => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", _) => "delete",
        (other, _) => return format!("{} {resource}", other.to_ascii_lowercase()),
    };
    format!("{verb} {resource}")
}

#[cfg(test)]
mod tests {
    use super::classify;

    #[test]
    fn classifies_verbs_and_resources() {
        assert_eq!(
            classify("GET", "/api/v1/namespaces/a/configmaps/x", ""),
            "get configmaps"
        );
        assert_eq!(
            classify("GET", "/api/v1/namespaces/a/configmaps", ""),
            "list configmaps"
        );
        assert_eq!(
            classify("GET", "/api/v1/namespaces/a/pods", "watch=true"),
            "watch pods"
        );
        assert_eq!(
            classify(
                "PATCH",
                "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/f/kustomizations/i",
                ""
            ),
            "patch kustomizations"
        );
        assert_eq!(
            classify(
                "PATCH",
                "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/f/kustomizations/i/status",
                ""
            ),
            "patch kustomizations/status"
        );
        assert_eq!(
            classify("POST", "/api/v1/namespaces", ""),
            "create namespaces"
        );
        assert_eq!(
            classify(
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/f/leases/l",
                ""
            ),
            "update leases"
        );
        assert_eq!(classify("GET", "/version", ""), "get /version");
    }
}

//! What the Action trusts (issue 36, item 5; issue 48, item 6): its installer takes
//! `download-url` only over https (plain http only to loopback), runs a tool-cache hit only
//! when the binary's sha256 is the one the action ships for its own version (another version:
//! the binary of the cached archive, checked against the release's checksums read again; never
//! what the cache's marker says), and then a private copy of it; it takes only a version as a version,
//! creates its temporary files exclusively, and never prints a URL's credentials. The cases are
//! node tests of `action/install.js` (`action_trust:` in action/install.test.js); this runs
//! them by name.
mod common;

#[test]
fn action_trust_the_installer_refuses_what_it_must_not_trust() {
    let out = std::process::Command::new("node")
        .args([
            "--test",
            "--test-name-pattern=action_trust",
            "action/install.test.js",
        ])
        .current_dir(common::runner::repo_root())
        .output()
        .expect("node (the runner's JavaScript runtime) is needed for the action's tests");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The pattern matched the six cases: none was skipped by a renamed test.
    assert!(text.contains("# pass 6"), "{text}");
}

//! The check that no line of a command's output is a workflow command (or a line of its own)
//! that a hostile value made: its text must hold `evil` before and `injected` in every command
//! it carries, e.g. `evil\n::error::x-injected`. Our own commands are allowed (their data is
//! escaped where they are written). Included with `#[path]` by the tests that need it.

/// Our own workflow commands.
const OURS: [&str; 4] = ["::group::", "::endgroup::", "::error::", "::warning::"];

/// No line of `text` starts a workflow command (after blanks) other than ours, holds `##[`,
/// holds the value's `injected` without its `evil` (a newline of the value started a line), or
/// holds a carriage return.
pub fn check(what: &str, text: &str) {
    for line in text.split('\n') {
        let start = line.trim_start();
        assert!(
            !start.starts_with("::") || OURS.iter().any(|o| start.starts_with(o)),
            "{what}: a workflow command: {line:?}\n{text}"
        );
        assert!(
            !line.contains("##["),
            "{what}: a ##[ command: {line:?}\n{text}"
        );
        assert!(
            !line.contains("injected") || line.contains("evil"),
            "{what}: the value's newline started a line of its own: {line:?}\n{text}"
        );
        assert!(!line.contains('\r'), "{what}: a carriage return: {line:?}");
    }
}

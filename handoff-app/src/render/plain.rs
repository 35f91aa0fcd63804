//! Output that no value written by someone else can turn into a GitHub Actions workflow
//! command. The runner reads a line as a command when, after leading whitespace, it starts
//! with `::` (`ActionCommand.TryParseV2`), or when it holds `##[` anywhere followed by a
//! registered name and `]` (the older `ActionCommand.TryParse`, still tried after the first:
//! actions/runner `src/Runner.Worker/ActionCommandManager.cs`, `TryProcessCommand`). A Lease
//! holder, a fence's owner or reason, a field manager: each is written by whoever can write
//! the object, and each reaches these lines. Our own commands (`::group::`, `::error::`,
//! `::warning::`) are written elsewhere, with their data escaped.

use std::borrow::Cow;
use std::fmt::Write as _;

/// One line of plain output: every control character (a newline too) shown as an escape, so
/// a value cannot start a line of its own, then made inert as a workflow command ([`plain`]).
pub fn line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return plain(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    escape_controls(text, &mut out, true);
    Cow::Owned(plain(&out).into_owned())
}

/// Lines of plain output (a listing): control characters other than the line breaks and tabs
/// shown as escapes, each line that would start with `::` given a `\` before it, and every
/// `##[` written `##\[`.
#[must_use]
pub fn plain(text: &str) -> Cow<'_, str> {
    let risky = text.contains("##[")
        || text
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t')
        || text.split('\n').any(|l| l.trim_start().starts_with("::"));
    if !risky {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for (i, l) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let mut escaped = String::with_capacity(l.len());
        escape_controls(l, &mut escaped, false);
        let indent = escaped.len() - escaped.trim_start().len();
        if escaped[indent..].starts_with("::") {
            escaped.insert(indent, '\\');
        }
        out.push_str(&escaped.replace("##[", "##\\["));
    }
    Cow::Owned(out)
}

/// A JSON (or YAML double-quoted) document whose `##[` are written `##\u005b`: the same
/// value, and no command. Outside a string neither format has `#`.
#[must_use]
pub fn document(text: &str) -> Cow<'_, str> {
    if text.contains("##[") {
        Cow::Owned(text.replace("##[", "##\\u005b"))
    } else {
        Cow::Borrowed(text)
    }
}

/// Control characters as `\n`, `\r`, `\t` or `\u{1b}`; a tab is kept unless `tabs`.
fn escape_controls(text: &str, out: &mut String, tabs: bool) {
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' if tabs => out.push_str("\\t"),
            '\t' => out.push('\t'),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_injection_no_value_becomes_a_workflow_command_or_a_line_of_its_own() {
        let table = [
            ("fenced by gh1.1-abc;3", "fenced by gh1.1-abc;3"),
            (
                "fenced by evil\n::error::injected",
                "fenced by evil\\n::error::injected",
            ),
            ("held by x\r::add-mask::y", "held by x\\r::add-mask::y"),
            ("reason ##[error]v1", "reason ##\\[error]v1"),
            ("::set-output name=a::b", "\\::set-output name=a::b"),
            ("  ::warning::w", "  \\::warning::w"),
            ("bell\u{7} esc\u{1b}[31m", "bell\\u{7} esc\\u{1b}[31m"),
            ("tab\tkept", "tab\\tkept"),
        ];
        for (raw, want) in table {
            assert_eq!(line(raw), want, "{raw:?}");
            for l in line(raw).lines() {
                assert!(!l.trim_start().starts_with("::"), "{l}");
                assert!(!l.contains("##["), "{l}");
            }
        }
    }

    #[test]
    fn log_injection_a_listing_keeps_its_lines_and_loses_its_commands() {
        let listing = "FENCES\n  ks/a  by gh1.1-a\n::error::x\n\tdeep ##[group]g\n";
        assert_eq!(
            plain(listing),
            "FENCES\n  ks/a  by gh1.1-a\n\\::error::x\n\tdeep ##\\[group]g\n"
        );
        assert!(matches!(plain("FENCES\n  none\n"), Cow::Borrowed(_)));
        let doc = "{\"reason\":\"##[error]x\"}";
        assert_eq!(document(doc), "{\"reason\":\"##\\u005berror]x\"}");
        let back: serde_json::Value = serde_json::from_str(&document(doc)).unwrap();
        assert_eq!(back["reason"], "##[error]x");
    }
}

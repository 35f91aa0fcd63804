//! Output that no value written by someone else can turn into a GitHub Actions workflow
//! command. The runner reads a line as a command when, after leading whitespace, it starts
//! with `::` (`ActionCommand.TryParseV2`), or when it holds `##[` anywhere followed by a
//! registered name and `]` (the older `ActionCommand.TryParse`, still tried after the first:
//! actions/runner `src/Runner.Worker/ActionCommandManager.cs`, `TryProcessCommand`). A Lease
//! holder, a fence's owner or reason, a field manager: each is written by whoever can write
//! the object, and each reaches these lines. Our own commands (`::group::`, `::error::`,
//! `::warning::`) are written elsewhere, with their data escaped.
//!
//! This is the one escaper of every sink: the CLI's lines and listings ([`line`], [`plain`]),
//! its JSON and YAML documents ([`document`]), and its log: tracing's fields and messages go
//! through [`line`] and each formatted record through [`event`] before it reaches stderr
//! (handoff-cli's `logging` module). It lives here, in the application layer, because every
//! crate that prints depends on handoff-app, and the core crates (flux-fence, flux-suspend,
//! ghcr-auth) never print: what they say goes out as tracing events, through the log sink.

use std::borrow::Cow;
use std::fmt::Write as _;

/// One line of plain output: every control character (a newline too) shown as an escape, so
/// a value cannot start a line of its own, then made inert as a workflow command ([`plain`]).
pub fn line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return plain(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    escape_controls(text, &mut out, Keep::NOTHING);
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
        escape_controls(l, &mut escaped, Keep::TABS);
        out.push_str(&inert(&escaped));
    }
    Cow::Owned(out)
}

/// One record of a log sink as its formatter wrote it (a tracing event, `json` when the line
/// is a JSON object), made one inert line: the one line break that ends it is kept; any other
/// line break, a carriage return or another control character is shown as an escape — except
/// ESC when `ansi` (the formatter's own colours: the values in it already went through
/// [`line`]); a leading `::` gets a `\` and `##[` is written `##\[` (`##\u005b` in JSON, the
/// same string). The last check before stderr, whatever the formatter did.
#[must_use]
pub fn event(text: &str, ansi: bool, json: bool) -> Cow<'_, str> {
    let body = text.strip_suffix('\n').unwrap_or(text);
    let esc = |c: char| c.is_control() && !(ansi && c == '\u{1b}');
    if !body.chars().any(esc) && !body.contains("##[") && !body.trim_start().starts_with("::") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    let keep = if ansi { Keep::ESC } else { Keep::NOTHING };
    escape_controls(body, &mut out, keep);
    let mut out = if json {
        document(&out).into_owned()
    } else {
        inert(&out)
    };
    if body.len() < text.len() {
        out.push('\n');
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

/// One line (no line break in it) made inert as a workflow command: a `\` before a leading
/// `::` (after blanks), and `##[` written `##\[`.
fn inert(line: &str) -> String {
    let mut l = line.replace("##[", "##\\[");
    let indent = l.len() - l.trim_start().len();
    if l[indent..].starts_with("::") {
        l.insert(indent, '\\');
    }
    l
}

/// Which control characters [`escape_controls`] leaves as they are.
#[derive(Debug, Clone, Copy)]
struct Keep {
    tabs: bool,
    esc: bool,
}

impl Keep {
    const NOTHING: Self = Self {
        tabs: false,
        esc: false,
    };
    const TABS: Self = Self {
        tabs: true,
        esc: false,
    };
    const ESC: Self = Self {
        tabs: false,
        esc: true,
    };
}

/// Control characters as `\n`, `\r`, `\t` or `\u{1b}`, but those `keep` names.
fn escape_controls(text: &str, out: &mut String, keep: Keep) {
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' if keep.tabs => out.push('\t'),
            '\t' => out.push_str("\\t"),
            '\u{1b}' if keep.esc => out.push(c),
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

    #[test]
    fn log_escape_a_log_record_is_one_inert_line_colours_kept_only_with_ansi() {
        let table: [(&str, bool, bool, &str); 7] = [
            ("ts WARN plain\n", false, false, "ts WARN plain\n"),
            (
                "ts ERROR lease lost reason=taken by evil\n::error::x ##[add-mask]y\n",
                false,
                false,
                "ts ERROR lease lost reason=taken by evil\\n::error::x ##\\[add-mask]y\n",
            ),
            ("::error::x\r\n", false, false, "\\::error::x\\r\n"),
            ("  ::warning::w", false, false, "  \\::warning::w"),
            (
                "\u{1b}[2mts\u{1b}[0m held by a\nb\n",
                true,
                false,
                "\u{1b}[2mts\u{1b}[0m held by a\\nb\n",
            ),
            (
                "\u{1b}[2mts\u{1b}[0m\n",
                false,
                false,
                "\\u{1b}[2mts\\u{1b}[0m\n",
            ),
            (
                "{\"holder\":\"e\\n##[add-mask]y\"}\n",
                false,
                true,
                "{\"holder\":\"e\\n##\\u005badd-mask]y\"}\n",
            ),
        ];
        for (raw, ansi, json, want) in table {
            let got = event(raw, ansi, json);
            assert_eq!(got, want, "{raw:?}");
            let body = got.strip_suffix('\n').unwrap_or(&got);
            assert!(!body.contains(['\n', '\r']), "{got:?}");
            assert!(!body.trim_start().starts_with("::"), "{got:?}");
            assert!(!body.contains("##["), "{got:?}");
        }
        assert!(matches!(
            event("ts plain\n", false, false),
            Cow::Borrowed(_)
        ));
        let json = "{\"holder\":\"##[add-mask]y\"}";
        let back: serde_json::Value = serde_json::from_str(&event(json, false, true)).unwrap();
        assert_eq!(back["holder"], "##[add-mask]y");
    }
}

//! Cobra's `__complete` protocol, so `flux handoff <TAB>` completes through the Flux CLI.
//!
//! The flux CLI (v2.9, `internal/plugin/completion.go`) completes a plugin command by running
//! `<plugin> __complete <args...> <word being completed>` and reading one candidate a line
//! (`value` or `value<TAB>description`), then a last line `:<directive>` (Cobra's
//! `ShellCompDirective`; `4` = no file completion). `flux-handoff __complete ...` answers it:
//! subcommands, then flags of the command reached (with `-`), the values of an enumerated flag,
//! and for `-t`/`--target` the Kustomizations (and the `HelmReleases`, as `hr/<name>`) of the namespace in the
//! words (`-n`, default `flux-system`) read from the cluster — at most one list request each,
//! bounded; a cluster that cannot be reached completes nothing.

use std::fmt::Write as _;
use std::time::Duration;

use clap::{Arg, Command};

/// Cobra's `ShellCompDirectiveNoFileComp`.
const NO_FILE: u32 = 4;
/// How long the cluster may take to list targets.
const LIST_BUDGET: Duration = Duration::from_secs(5);

/// What to complete, from the words before the cursor and the word being completed.
#[derive(Debug, PartialEq, Eq)]
pub enum Want {
    /// Subcommands of the command reached (`path`), flags when the word starts with `-`.
    Words { path: Vec<String>, flags: bool },
    /// The values of flag `flag` (its long name) of the command reached.
    Value {
        path: Vec<String>,
        flag: String,
        prefix: String,
    },
}

/// Decides what the word being completed is (pure: the command tree and the words only).
#[must_use]
pub fn want(root: &Command, words: &[String], word: &str) -> Want {
    let mut cmd = root;
    let mut path = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        if w == "--" {
            // After `--` (run's command) nothing of ours is completed.
            return Want::Words { path, flags: false };
        }
        if let Some(arg) = flag(cmd, root, w)
            && takes_value(arg)
            && !w.contains('=')
        {
            i += 2;
            continue;
        }
        if !w.starts_with('-')
            && let Some(sub) = cmd.find_subcommand(w)
        {
            cmd = sub;
            path.push(sub.get_name().to_string());
        }
        i += 1;
    }
    // `--target=par` or `-t` then the word.
    if let Some((name, prefix)) = word.split_once('=')
        && let Some(arg) = flag(cmd, root, name)
        && takes_value(arg)
    {
        return Want::Value {
            path,
            flag: arg.get_id().to_string(),
            prefix: prefix.to_string(),
        };
    }
    if let Some(last) = words.last()
        && !last.contains('=')
        && let Some(arg) = flag(cmd, root, last)
        && takes_value(arg)
        && !skipped_value(root, words)
    {
        return Want::Value {
            path,
            flag: arg.get_id().to_string(),
            prefix: word.to_string(),
        };
    }
    Want::Words {
        path,
        flags: word.starts_with('-'),
    }
}

/// Whether the last word is itself a value of the flag before it (so not a flag to complete).
fn skipped_value(root: &Command, words: &[String]) -> bool {
    let n = words.len();
    n >= 2
        && flag(root, root, &words[n - 2]).is_some_and(takes_value)
        && !words[n - 2].contains('=')
}

/// The argument `word` names (`--long`, `--long=v`, `-s`) in `cmd`, or a global one of `root`.
fn flag<'a>(cmd: &'a Command, root: &'a Command, word: &str) -> Option<&'a Arg> {
    let name = word.split_once('=').map_or(word, |(n, _)| n);
    let find = |c: &'a Command| {
        c.get_arguments().find(|a| {
            if let Some(long) = name.strip_prefix("--") {
                a.get_long() == Some(long)
            } else if let Some(short) = name.strip_prefix('-') {
                short.len() == 1 && a.get_short().is_some_and(|s| short.starts_with(s))
            } else {
                false
            }
        })
    };
    find(cmd).or_else(|| find(root))
}

fn takes_value(arg: &Arg) -> bool {
    arg.get_num_args().is_some_and(|n| n.takes_values()) || arg.get_action().takes_values()
}

/// The command at `path` below `root`.
fn at<'a>(root: &'a Command, path: &[String]) -> &'a Command {
    path.iter()
        .fold(root, |c, name| c.find_subcommand(name).unwrap_or(c))
}

/// The candidate lines for `want` that need no cluster (`value\tdescription`).
#[must_use]
pub fn candidates(root: &Command, want: &Want, word: &str) -> Vec<String> {
    let one_line = |s: Option<&clap::builder::StyledStr>| {
        s.map(|t| t.to_string().lines().next().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    match want {
        Want::Words { path, flags: false } => at(root, path)
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name().starts_with(word))
            .map(|s| format!("{}\t{}", s.get_name(), one_line(s.get_about())))
            .collect(),
        Want::Words { path, flags: true } => {
            let cmd = at(root, path);
            let mut out: Vec<String> = cmd
                .get_arguments()
                .chain(root.get_arguments().filter(|a| a.is_global_set()))
                .filter(|a| !a.is_hide_set())
                .filter_map(|a| a.get_long().map(|l| (format!("--{l}"), a)))
                .filter(|(l, _)| l.starts_with(word))
                .map(|(l, a)| format!("{l}\t{}", one_line(a.get_help())))
                .collect();
            out.sort();
            out.dedup();
            out
        }
        Want::Value { path, flag, prefix } => {
            let cmd = at(root, path);
            let Some(arg) = cmd
                .get_arguments()
                .chain(root.get_arguments())
                .find(|a| a.get_id() == flag.as_str())
            else {
                return Vec::new();
            };
            arg.get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set() && v.get_name().starts_with(prefix.as_str()))
                .map(|v| v.get_name().to_string())
                .collect()
        }
    }
}

/// `--kubeconfig`, `--context` and `-n` as the words give them.
fn cluster_flags(words: &[String]) -> (Option<String>, Option<String>, String) {
    let (mut kubeconfig, mut context, mut ns) = (None, None, "flux-system".to_string());
    let mut it = words.iter();
    while let Some(w) = it.next() {
        let (name, inline) = match w.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (w.as_str(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next().cloned());
        match name {
            "--kubeconfig" => kubeconfig = value(),
            "--context" => context = value(),
            "-n" | "--namespace" => {
                if let Some(v) = value() {
                    ns = v;
                }
            }
            _ => {}
        }
    }
    (kubeconfig, context, ns)
}

/// The targets of the namespace in `words`: Kustomization names, `HelmReleases` as `hr/<name>`,
/// Flux Operator `ResourceSets` as `rset/<name>` and `FluxInstances` as `fi/<name>`.
async fn targets(words: &[String]) -> Vec<String> {
    use kube::api::{Api, DynamicObject, ListParams};
    let (kubeconfig, context, ns) = cluster_flags(words);
    let Ok(client) = crate::kubeconfig::client(
        kubeconfig.as_deref().map(std::path::Path::new),
        context.as_deref(),
    )
    .await
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (resource, prefix) in [
        (flux_suspend::object::kustomization_resource(), ""),
        (flux_suspend::object::helmrelease_resource(), "hr/"),
        (flux_suspend::object::resourceset_resource(), "rset/"),
        (flux_suspend::object::fluxinstance_resource(), "fi/"),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
        if let Ok(Ok(list)) =
            tokio::time::timeout(LIST_BUDGET, api.list(&ListParams::default())).await
        {
            out.extend(
                list.items
                    .into_iter()
                    .filter_map(|o| o.metadata.name)
                    .map(|n| format!("{prefix}{n}")),
            );
        }
    }
    out
}

/// Answers `flux-handoff __complete <args...>`: prints the candidates and the directive.
pub async fn run(root: &Command, args: &[String]) {
    let (word, words) = match args.split_last() {
        Some((w, rest)) => (w.as_str(), rest),
        None => ("", &[][..]),
    };
    let want = want(root, words, word);
    let mut lines = candidates(root, &want, word);
    if let Want::Value { flag, prefix, .. } = &want
        && flag == "target"
    {
        lines.extend(
            targets(words)
                .await
                .into_iter()
                .filter(|t| t.starts_with(prefix.as_str())),
        );
    }
    let mut text = String::new();
    for l in lines {
        text.push_str(&l);
        text.push('\n');
    }
    let _ = writeln!(text, ":{NO_FILE}");
    print!("{text}");
    eprintln!("Completion ended with directive: ShellCompDirectiveNoFileComp");
}

#[cfg(test)]
mod tests {
    use clap::ArgAction;

    use super::*;

    /// A command tree of flux-handoff's shape (the e2e `flux_plugin` test drives the real one
    /// through the flux CLI).
    fn tree() -> Command {
        let target = Arg::new("target")
            .long("target")
            .short('t')
            .action(ArgAction::Append)
            .help("a target");
        let handoff = |name: &'static str| {
            Command::new(name)
                .about("a handoff")
                .arg(target.clone())
                .arg(Arg::new("wait-lease").long("wait-lease").help("wait"))
        };
        Command::new("flux-handoff")
            .arg(
                Arg::new("output")
                    .long("output")
                    .short('o')
                    .global(true)
                    .value_parser(["text", "json", "yaml", "name"]),
            )
            .arg(
                Arg::new("namespace")
                    .long("namespace")
                    .short('n')
                    .global(true),
            )
            .subcommand(handoff("pause"))
            .subcommand(handoff("run").arg(Arg::new("command").num_args(1..).last(true)))
            .subcommand(Command::new("resume").about("resume"))
            .subcommand(Command::new("fences").about("fences"))
            .subcommand(
                Command::new("ghcr")
                    .about("ghcr")
                    .subcommand(Command::new("check")),
            )
    }

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn the_word_being_completed_is_decided_from_the_words_before_it() {
        let root = tree();
        let path = |p: &str| w(p);
        let table: Vec<(&str, &str, Want)> = vec![
            (
                "",
                "",
                Want::Words {
                    path: vec![],
                    flags: false,
                },
            ),
            (
                "",
                "pa",
                Want::Words {
                    path: vec![],
                    flags: false,
                },
            ),
            (
                "pause",
                "--",
                Want::Words {
                    path: path("pause"),
                    flags: true,
                },
            ),
            (
                "pause -t",
                "inf",
                Want::Value {
                    path: path("pause"),
                    flag: "target".into(),
                    prefix: "inf".into(),
                },
            ),
            (
                "-n apps pause --target",
                "",
                Want::Value {
                    path: path("pause"),
                    flag: "target".into(),
                    prefix: String::new(),
                },
            ),
            (
                "run",
                "--target=in",
                Want::Value {
                    path: path("run"),
                    flag: "target".into(),
                    prefix: "in".into(),
                },
            ),
            // A value already given: the next word is a flag or a subcommand again.
            (
                "pause -t infra",
                "--",
                Want::Words {
                    path: path("pause"),
                    flags: true,
                },
            ),
            (
                "ghcr",
                "",
                Want::Words {
                    path: path("ghcr"),
                    flags: false,
                },
            ),
            (
                "--output",
                "j",
                Want::Value {
                    path: vec![],
                    flag: "output".into(),
                    prefix: "j".into(),
                },
            ),
            (
                "run -t x --",
                "ec",
                Want::Words {
                    path: path("run"),
                    flags: false,
                },
            ),
        ];
        for (words, word, expected) in table {
            assert_eq!(want(&root, &w(words), word), expected, "{words:?} {word:?}");
        }
    }

    #[test]
    fn candidates_list_subcommands_flags_and_enumerated_values() {
        let root = tree();
        let subs = candidates(&root, &want(&root, &[], ""), "");
        for s in ["pause\t", "resume\t", "run\t", "fences\t"] {
            assert!(subs.iter().any(|l| l.starts_with(s)), "{s}: {subs:?}");
        }
        let flags = candidates(&root, &want(&root, &w("pause"), "--wa"), "--wa");
        assert!(
            flags.iter().any(|l| l.starts_with("--wait-lease\t")),
            "{flags:?}"
        );
        assert!(flags.iter().all(|l| l.starts_with("--wa")), "{flags:?}");
        let values = candidates(&root, &want(&root, &w("--output"), ""), "");
        assert_eq!(values, ["text", "json", "yaml", "name"]);
    }
}

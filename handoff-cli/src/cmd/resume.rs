//! `flux-handoff resume OBJECT...`, `resume -l SELECTOR|--all` or `resume --holder H`: by
//! object (named, or the paused objects a selection lists), the holder is read from the
//! objects' fences and its pause resumed as by holder, then each released object waited
//! for until Ready (`flux resume`'s default; `--wait=false` skips). By holder: release what H holds (every object of H's chain record on
//! the Lease, wherever it lives, and whatever the fenced label finds in -n, the configured
//! targets' namespaces and each --in; -A everywhere), targets before parents,
//! then the Lease; optionally wait until each released object is Ready for its generation. H's Lease is
//! adopted only when parked or when `--holder-exited` attests its process is gone. The Ready wait
//! comes after everything was handed back: an object not Ready in time is exit 10, a signal
//! during the wait ends it with 130, and neither leaves anything held.

use std::str::FromStr;

use flux_fence::recovery::short_ref;
use flux_fence::{Holder, ObjectRef};
use flux_suspend::handoff::ReadyWait;
use flux_suspend::holder_of;
use flux_suspend::io::Timing;
use flux_suspend::{Cancel, Members};
use flux_suspend::{ParentSpec, ResumeError, ResumeOptions, resume_holder};
use handoff_app::select::{LabelSelector, SelectError, Selection};
use serde_json::json;

use crate::args::{Global, ResumeArgs};
use crate::failure::{Failure, chain};
use crate::output::Output;
use crate::{client, exit, settings};
use handoff_app::config;

pub async fn run(
    global: &Global,
    args: &ResumeArgs,
    out: &mut Output,
    cancel: Cancel,
) -> Result<u8, Failure> {
    let by = by(
        args,
        std::env::var("FLUX_HANDOFF_HOLDER").ok(),
        &global.namespace,
    )?;
    let file = config::load_optional(global.config.as_deref()).map_err(Failure::usage)?;
    crate::notify::configure(out, &args.events, file.events_addr.as_deref())?;
    let mut targets = args.targets.clone();
    if targets.target.is_empty() && file.targets.is_empty() {
        // resume needs no target: it finds the holder's fences. Resolve the rest of the settings.
        targets.target.push("unused".into());
    }
    let settings = settings::resolve(global, &targets, &file).map_err(Failure::usage)?;
    // Where the holder's fences are looked for: -n, the configured targets and parents, --in.
    let mut base = vec![global.namespace.clone()];
    if let By::Objects(objects) = &by {
        base.extend(objects.iter().map(|o| o.namespace.clone()));
    }
    for t in &settings.targets {
        base.push(t.object.namespace.clone());
        if let ParentSpec::Explicit(p) = &t.parent {
            base.push(p.namespace.clone());
        }
    }
    let scope = args.find.scope(&base).map_err(Failure::usage)?;
    let client = client::client(global).await?;
    let by = match by {
        By::Selected(selection) => By::Objects(paused(&client, &selection, &settings).await?),
        by => by,
    };
    let holder = match &by {
        By::Holder(h) => h.clone(),
        By::Selected(_) => {
            return Err(Failure::new(
                exit::INTERNAL,
                "resume: a selection left unresolved",
            ));
        }
        By::Objects(objects) => {
            let h = holder_of(&client, &settings.keys, objects)
                .await
                .map_err(|e| failure(&e, None))?;
            out.note(&format!(
                "{} fenced by {h}: resuming its pause",
                objects.iter().map(short_ref).collect::<Vec<_>>().join(", ")
            ));
            h
        }
    };
    let mut opts = ResumeOptions::new(holder.clone(), scope);
    opts.lease = settings.lease.clone();
    opts.keys = settings.keys.clone();
    opts.listing = args.find.listing();
    opts.holder_exited = args.holder_exited;
    opts.if_held = args.if_held;
    opts.cancel = cancel;
    let wait = waits(args, !matches!(by, By::Holder(_)));
    let timing = Timing::new(settings.interval, settings.timeout);
    opts.wait_ready = wait.then_some(timing);
    out.cleanup_complete(false);
    out.stage("resume");
    crate::notify::session(out, &holder.to_string(), global.reason.as_deref());
    let resumed = resume_holder(&client, &opts, |e| {
        crate::notify::on_event(out, &e, &Members::default());
        out.phase(&e.line(&Members::default()));
    })
    .await
    .map_err(|e| failure(&e, Some(&holder)))?;
    if !resumed.lease_released {
        out.note(&format!(
            "{holder} holds neither the Lease {} nor a fence: nothing to do, nothing written",
            opts.lease
        ));
    } else if resumed.released.is_empty() {
        out.note(&format!("{holder} holds no fence"));
    }
    let released: Vec<String> = resumed.released.iter().map(ToString::to_string).collect();
    out.fact("released", json!(released));
    out.cleanup_complete(true);
    out.list(&resumed.released);
    ready(out, &resumed, wait, timing)
}

/// The Ready wait's outcome, after everything was handed back: exit 0, 10 (an object not
/// Ready in time) or 130 (a signal ended the wait); the line says nothing is held.
fn ready(
    out: &mut Output,
    resumed: &flux_suspend::Resumed,
    wait: bool,
    timing: Timing,
) -> Result<u8, Failure> {
    match &resumed.ready {
        ReadyWait::NotReady(objects) => {
            let not_ready: Vec<String> = objects.iter().map(ToString::to_string).collect();
            out.fact("not_ready", json!(not_ready));
            Err(Failure::new(
                exit::NOT_READY,
                format!(
                    "not Ready within {}s after the resume: {}; everything was handed back \
                     ({}, and the Lease): nothing is held",
                    timing.timeout.as_secs(),
                    not_ready.join(", "),
                    handed_back(&resumed.released),
                ),
            ))
        }
        ReadyWait::Stopped(objects) => Err(Failure::new(
            exit::INTERRUPTED,
            format!(
                "interrupted while waiting for Ready ({} not seen Ready yet); everything was \
                 handed back ({}, and the Lease): nothing is held",
                objects
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                handed_back(&resumed.released),
            ),
        )),
        _ => {
            if wait && !resumed.released.is_empty() {
                out.phase("every released object is Ready");
            }
            Ok(exit::SUCCESS)
        }
    }
}

/// `released Kustomization a/x, Kustomization a/y`, or `no fence was held`.
fn handed_back(released: &[ObjectRef]) -> String {
    if released.is_empty() {
        return "no fence was held".into();
    }
    let objects: Vec<String> = released.iter().map(ToString::to_string).collect();
    format!("released {}", objects.join(", "))
}

/// The paused objects `selection` selects (its selector and the fenced label, one list per
/// kind and namespace; reads only); none is exit 2 with one line.
async fn paused(
    client: &kube::Client,
    selection: &Selection,
    settings: &flux_suspend::SessionOptions,
) -> Result<Vec<ObjectRef>, Failure> {
    let fenced = settings.keys.fenced_selector();
    let both = match &selection.selector {
        Some(s) => format!("{s},{fenced}"),
        None => fenced,
    };
    let mut listed = selection.clone();
    listed.selector = Some(
        both.parse()
            .map_err(|e: SelectError| Failure::usage(e.to_string()))?,
    );
    let found = handoff_app::select::select(client, &listed)
        .await
        .map_err(|e| settings::select_failure(&e))?;
    if found.is_empty() {
        return Err(settings::select_failure(
            &selection.no_match("paused ", "resume"),
        ));
    }
    Ok(found.into_iter().map(|(o, _)| o).collect())
}

/// A refusal changed nothing (exit 3; a live holder gets the commands that prove it gone); a
/// release that failed leaves the rest held (exit 7).
fn failure(e: &ResumeError, holder: Option<&Holder>) -> Failure {
    let holder = holder.map_or_else(|| "H".to_string(), ToString::to_string);
    match e {
        ResumeError::LooksLive { .. } => Failure::new(
            exit::REFUSED,
            format!(
                "{e} (e.g. a run whose command is still running). Run `flux-handoff fences \
                 recover` to prove it gone by watching the Lease, or, if you know its process \
                 has exited, `flux-handoff resume --holder {holder} --holder-exited`"
            ),
        ),
        ResumeError::FencedWithoutLease { .. } => Failure::new(
            exit::REFUSED,
            format!(
                "{e}. `flux-handoff fences` lists them with the command that releases them \
                 (for {holder})"
            ),
        ),
        e => Failure::new(exit::code(e.class()), chain(e)),
    }
}

/// Whose pause to resume.
#[derive(Debug, PartialEq)]
enum By {
    /// The holder named by --holder or `$FLUX_HANDOFF_HOLDER`.
    Holder(Holder),
    /// The holder found on these objects' fences.
    Objects(Vec<ObjectRef>),
    /// The holder found on the fences of the paused objects -l/--all select.
    Selected(Selection),
}

/// -l/--all when given, else objects when named (then `$FLUX_HANDOFF_HOLDER` is not used:
/// the objects say whose pause it is), else --holder, else `env`; exit 2 with one line when
/// none, or one does not parse.
fn by(args: &ResumeArgs, env: Option<String>, default_ns: &str) -> Result<By, Failure> {
    if args.select.selector.is_some() || args.select.all {
        let selector = match &args.select.selector {
            Some(text) => Some(text.parse::<LabelSelector>().map_err(Failure::usage)?),
            None => None,
        };
        return Ok(By::Selected(Selection {
            kinds: handoff_app::select::kinds(&args.select.kind).map_err(Failure::usage)?,
            scope: args
                .find
                .scope(&[default_ns.to_string()])
                .map_err(Failure::usage)?,
            selector,
        }));
    }
    if !args.select.kind.is_empty() {
        return Err(Failure::usage(
            "--kind says what -l or --all select: give -l SELECTOR or --all",
        ));
    }
    if !args.objects.is_empty() {
        let objects = args.objects.iter();
        let objects = objects.map(|o| handoff_app::names::parse_object(o, default_ns));
        return Ok(By::Objects(
            objects.collect::<Result<_, _>>().map_err(Failure::usage)?,
        ));
    }
    let Some(text) = args.holder.clone().or(env).filter(|h| !h.is_empty()) else {
        return Err(Failure::usage(
            "resume: name the objects (`resume ks/apps`) or the holder (--holder H or \
             $FLUX_HANDOFF_HOLDER)",
        ));
    };
    Holder::from_str(&text)
        .map(By::Holder)
        .map_err(|e| Failure::usage(format!("--holder: {e}")))
}

/// Whether to wait for Ready: `--wait[=BOOL]` when given (it wins over --wait-ready), else by
/// object yes (as `flux resume`), by holder only with --wait-ready.
fn waits(args: &ResumeArgs, by_object: bool) -> bool {
    args.wait.unwrap_or(by_object || args.wait_ready)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn parse(argv: &[&str]) -> ResumeArgs {
        let cli = crate::cli::Cli::try_parse_from(argv).unwrap();
        let crate::cli::Command::Resume(r) = cli.command else {
            unreachable!()
        };
        r
    }

    #[test]
    fn flux_habits_resume_by_object_or_by_holder() {
        let r = parse(&["flux-handoff", "resume", "apps", "hr/web/podinfo"]);
        let By::Objects(o) = by(&r, Some("envholder".into()), "flux-system").unwrap() else {
            panic!("by object")
        };
        let o: Vec<String> = o.iter().map(short_ref).collect();
        assert_eq!(o, ["ks/flux-system/apps", "hr/web/podinfo"]);
        let r = parse(&["flux-handoff", "resume", "--holder", "h1"]);
        assert_eq!(
            by(&r, Some("h2".into()), "x").unwrap(),
            By::Holder(Holder::from_str("h1").unwrap())
        );
        let r = parse(&["flux-handoff", "resume"]);
        assert_eq!(
            by(&r, Some("h2".into()), "x").unwrap(),
            By::Holder(Holder::from_str("h2").unwrap())
        );
        let none = by(&r, None, "x").unwrap_err();
        assert_eq!(none.code, exit::USAGE);
        assert!(
            none.message.starts_with("resume: name the objects"),
            "{}",
            none.message
        );
        let bad = parse(&["flux-handoff", "resume", "a/b/c/d"]);
        assert_eq!(by(&bad, None, "x").unwrap_err().code, exit::USAGE);
        // An object and a holder at once: a usage error.
        let both = ["flux-handoff", "resume", "apps", "--holder", "h1"];
        assert!(crate::cli::Cli::try_parse_from(both).is_err());
    }

    #[test]
    fn selector_resume_takes_a_selection_instead_of_names_or_a_holder() {
        let r = parse(&["flux-handoff", "resume", "-l", "team=web", "--in", "apps"]);
        let By::Selected(s) = by(&r, Some("envholder".into()), "flux-system").unwrap() else {
            panic!("by selection")
        };
        assert_eq!(s.how(), "-l team=web");
        assert_eq!(
            s.scope,
            flux_fence::discover::Scope::Namespaces(vec!["flux-system".into(), "apps".into()])
        );
        assert_eq!(s.kinds[0].kind, "Kustomization");
        let r = parse(&["flux-handoff", "resume", "--all", "--kind", "hr", "-A"]);
        let By::Selected(s) = by(&r, None, "x").unwrap() else {
            panic!("by selection")
        };
        assert_eq!(
            (s.how().as_str(), s.kinds[0].kind.as_str()),
            ("--all", "HelmRelease")
        );
        assert_eq!(s.scope, flux_fence::discover::Scope::All);
        for bad in [
            &["-l", "a=b=c"][..],
            &["--kind", "hr", "--holder", "h"],
            &["--all", "--kind", "zz"],
        ] {
            let mut argv = vec!["flux-handoff", "resume"];
            argv.extend_from_slice(bad);
            assert_eq!(
                by(&parse(&argv), None, "x").unwrap_err().code,
                exit::USAGE,
                "{bad:?}"
            );
        }
        for both in [
            &["-l", "a=b", "apps"][..],
            &["--all", "--holder", "h"],
            &["-l", "a", "--all"],
        ] {
            let mut argv = vec!["flux-handoff", "resume"];
            argv.extend_from_slice(both);
            assert!(crate::cli::Cli::try_parse_from(argv).is_err(), "{both:?}");
        }
    }

    #[test]
    fn flux_habits_resume_by_object_waits_for_ready_by_default_by_holder_not() {
        let cases: [(&[&str], bool, bool); 8] = [
            (&["apps"], true, true),
            (&["apps", "--wait=false"], true, false),
            (&["apps", "--wait"], true, true),
            (&["--holder", "h"], false, false),
            (&["--holder", "h", "--wait-ready"], false, true),
            (&["--holder", "h", "--wait"], false, true),
            (&["--holder", "h", "--wait=true"], false, true),
            (
                &["--holder", "h", "--wait=false", "--wait-ready"],
                false,
                false,
            ),
        ];
        for (flags, by_object, wait) in cases {
            let mut argv = vec!["flux-handoff", "resume"];
            argv.extend_from_slice(flags);
            assert_eq!(waits(&parse(&argv), by_object), wait, "{flags:?}");
        }
    }
}

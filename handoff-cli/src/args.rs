//! The arguments each command takes, as clap derives them: the bottom layer of the command
//! line. Everything here imports only values (`output::Format`, `notify::EventsArg`), never a
//! command: `cli` assembles these into the top-level parser, `cmd/*`, `session` and `settings`
//! read them.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::output::Format;

#[derive(Debug, Args)]
pub struct Global {
    /// Configuration file (TOML): targets, Lease, registry, Secrets. Flags override it.
    #[arg(long, global = true, env = "FLUX_HANDOFF_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Kubeconfig to use (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// Default namespace of targets named without one (default: `$FLUX_SYSTEM_NAMESPACE`, as
    /// every flux command, else flux-system).
    #[arg(
        long,
        short = 'n',
        global = true,
        env = "FLUX_SYSTEM_NAMESPACE",
        default_value = "flux-system",
        value_name = "NS"
    )]
    pub namespace: String,
    /// Budget of the whole pause, e.g. 300s, 5m: its waits (quiet, acknowledgements, restart,
    /// the proof) share this one deadline, as `flux --timeout` does. Also the budget of a Flux
    /// source proof after `ghcr reassert`.
    #[arg(long, global = true, default_value = "300s", value_parser = handoff_app::settings::parse_duration, value_name = "DURATION")]
    pub timeout: std::time::Duration,
    /// Cap on a single wait of the pause (default: whatever is left of --timeout).
    #[arg(long, global = true, value_parser = handoff_app::settings::parse_duration, value_name = "DURATION")]
    pub wait_timeout: Option<std::time::Duration>,
    /// Pause between two reads of a bounded wait, e.g. 2s, 500ms.
    #[arg(long, global = true, default_value = "2s", value_parser = handoff_app::settings::parse_duration, value_name = "DURATION")]
    pub interval: std::time::Duration,
    /// Result format on stdout: phase lines for people (text), one JSON document (json), the
    /// same document as YAML (yaml), or one `kind/namespace/name` per line of the objects the
    /// command lists — paused, released or fenced — in the form every command takes back
    /// (name; not for `doctor`, `rbac` or `ghcr check`).
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = Format::Text)]
    pub output: Format,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// More logs (-v debug, -vv trace).
    #[arg(long, short = 'v', global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors.
    #[arg(long, short = 'q', global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Why this handoff runs; recorded on every fenced object (annotation and Event) so
    /// `kubectl describe` tells a person why it is paused and by which run.
    #[arg(long, global = true, value_name = "TEXT")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Args, Clone)]
pub struct TargetArgs {
    /// Flux object to pause: `[kind/][namespace/]name`, kind `ks` (Kustomization, default),
    /// `hr` (`HelmRelease`), `rset` (`ResourceSet`) or `fi` (`FluxInstance`); or a replicas
    /// gate `deploy/namespace/name=N`: the Deployment scaled to N under the pause of the
    /// Flux object that applies it (see --parent), its count restored on release. Repeatable. Default: the
    /// config file's `[[targets]]`.
    #[arg(long, short = 't', value_name = "TARGET")]
    pub target: Vec<String>,
    /// The Kustomization that applies the target, `[namespace/]name`, paused above it. Default:
    /// from the labels of the Flux object that applies it — a Kustomization's
    /// (kustomize.toolkit.fluxcd.io/name|namespace) or a `HelmRelease`'s
    /// (helm.toolkit.fluxcd.io/name|namespace) is paused as the parent; a `ResourceSet`'s
    /// (resourceset.fluxcd.controlplane.io/name|namespace) is not paused: the target is frozen
    /// in it with fluxcd.controlplane.io/reconcile: disabled, restored exactly. A Flux object
    /// with none of these labels is top-level (no parent); a replicas gate with none is refused
    /// (exit 2) unless `none` accepts it knowingly. `none`: no parent.
    #[arg(long, value_name = "PARENT")]
    pub parent: Option<String>,
    /// How in-flight reconciles are retired: `ack` waits for each object's acknowledgement of
    /// its requestedAt nonce (no restart); `restart` rollout-restarts the controller and waits
    /// until every old Pod is gone; `none` relies on a quiet window (weakest). A reconcile
    /// waiting on a health check delays `ack` until its timeout unless the controller runs with
    /// --feature-gates=CancelHealthCheckOnNewRevision=true (`doctor` tells); without the gate,
    /// `restart` is faster when that timeout is longer than a rollout (docs/bench.md).
    #[arg(long, value_name = "STRATEGY")]
    pub retire: Option<String>,
    /// Wait for the target to be quiet (no Reconciling=True) before fencing it. Implied by
    /// --retire none.
    #[arg(long)]
    pub quiesce: bool,
    /// The coordination Lease, `[namespace/]name` (default flux-system/flux-handoff).
    #[arg(long, value_name = "LEASE")]
    pub lease: Option<String>,
    /// The controller Deployment `--retire restart` restarts (default
    /// flux-system/kustomize-controller).
    #[arg(long, value_name = "DEPLOYMENT")]
    pub controller: Option<String>,
}

/// Targets chosen by label instead of by name, as `flux suspend kustomization --all -n apps`
/// and `kubectl get -l team=web` choose them (`run` and `pause`).
#[derive(Debug, Args, Clone, Default)]
pub struct SelectArgs {
    /// Pause every object of --kind whose labels match SELECTOR, in -n's namespace and each
    /// --in (-A: every namespace): `key=value`, `key!=value`, `key`, `!key`, `key in (a,b)`,
    /// `key notin (a,b)`, comma-separated, all must hold (the API server matches it). Resolved
    /// once, before anything is written: a selector that matches nothing is exit 2. Each
    /// target's dependencies (spec.dependsOn) are released before it, so Flux reconciles them
    /// first; a selected Kustomization that applies another selected object is paused as its
    /// parent. Not with named targets.
    #[arg(long, short = 'l', value_name = "SELECTOR", conflicts_with = "all")]
    pub selector: Option<String>,
    /// Pause every object of --kind in -n's namespace and each --in (-A: every namespace), as
    /// `flux suspend kustomization --all`; ordered and refused when empty as -l.
    #[arg(long)]
    pub all: bool,
    /// The kinds -l and --all select: `ks` (Kustomization, the default, as `flux suspend
    /// kustomization`), `hr` (`HelmRelease`); repeatable, commas allowed.
    #[arg(long, value_name = "KIND", value_delimiter = ',')]
    pub kind: Vec<String>,
    /// With -l or --all: also select in this namespace (repeatable; commas allowed).
    #[arg(long = "in", value_name = "NS", value_delimiter = ',')]
    pub namespaces: Vec<String>,
    /// With -l or --all: select in every namespace (needs cluster-wide list on the kinds).
    #[arg(long, short = 'A')]
    pub all_namespaces: bool,
}

impl SelectArgs {
    /// The flags, for [`handoff_app::select::SelectFlags::selection`].
    pub fn flags(&self) -> handoff_app::select::SelectFlags {
        let mut f = handoff_app::select::SelectFlags::default();
        f.selector.clone_from(&self.selector);
        f.all = self.all;
        f.kinds.clone_from(&self.kind);
        f.namespaces.clone_from(&self.namespaces);
        f.all_namespaces = self.all_namespaces;
        f
    }
}

/// Where fences are looked for, and how they are listed.
#[derive(Debug, Args, Clone, Default)]
pub struct FindArgs {
    /// Look in every namespace (needs cluster-wide list on kustomizations and helmreleases:
    /// `flux-handoff rbac --all-namespaces`). Default: the namespace of -n/--namespace, each
    /// --in, and the namespaces of the configured targets.
    #[arg(long, short = 'A', global = true)]
    pub all_namespaces: bool,
    /// Also look in this namespace (repeatable; commas allowed). Default: none.
    #[arg(long = "in", value_name = "NS", value_delimiter = ',', global = true)]
    pub namespaces: Vec<String>,
    /// List every object and filter here instead of selecting the flux-handoff.io/fenced label
    /// server-side: also finds fences an older version wrote without the label. Slower, and
    /// reads every object of each kind.
    #[arg(long, global = true)]
    pub full_scan: bool,
}

impl FindArgs {
    /// The scope: every namespace, or `base` plus each --in (one line for exit 2 on a bad
    /// name).
    pub fn scope(&self, base: &[String]) -> Result<flux_fence::discover::Scope, String> {
        if self.all_namespaces {
            return Ok(flux_fence::discover::Scope::All);
        }
        flux_fence::discover::Scope::namespaces(base.iter().chain(&self.namespaces))
            .map_err(|ns| format!("--in {ns:?}: not a namespace name"))
    }

    /// Label-selected unless --full-scan.
    pub fn listing(&self) -> flux_fence::discover::Listing {
        if self.full_scan {
            flux_fence::discover::Listing::FullScan
        } else {
            flux_fence::discover::Listing::Labelled
        }
    }
}

#[derive(Debug, Args, Clone)]
pub struct HolderArg {
    /// Use this holder identity instead of a generated one, e.g. when a CI step must know it
    /// before the run starts so that a later step can release by holder
    /// (`resume --holder H`). Letters, digits, `.` and `-`; unique per run.
    #[arg(long = "holder", value_name = "HOLDER")]
    pub holder: Option<String>,
    /// When the Lease or a fence of the chain is held by a GitHub Actions run (holder
    /// `gh<run>.<attempt>-...`) whose exact attempt GitHub reports `completed`, recover it first
    /// (Lease first, children before parents), then proceed; any other answer refuses as
    /// without it (exit 3). Needs `GITHUB_REPOSITORY` and `GITHUB_TOKEN` (`actions: read`) or
    /// --github-token-file. Config: `[recovery] recover_finished_runs = true`.
    #[arg(long)]
    pub recover_finished_runs: bool,
    /// Read the GitHub token for --recover-finished-runs from this file instead of
    /// `GITHUB_TOKEN`.
    #[arg(long, value_name = "PATH")]
    pub github_token_file: Option<std::path::PathBuf>,
    /// While another run holds the Lease, wait up to this long for it, e.g. 2m (default 0:
    /// refuse at once, exit 3). Says who holds it and since when about every 10 s and takes it
    /// the moment it is free. Waiting keeps the run's place: a start that loses a race, meets
    /// another holder's fence or a broken connection (refused, reset, 5xx) waits again. With
    /// --recover-finished-runs, a holder whose Lease stays unwritten for its whole duration is
    /// asked about (at most once per duration) and recovered once its run finished. A held
    /// Lease is never taken over otherwise: one still unwritten when the budget is spent is
    /// refused (exit 3), and a parked pause is not waited for (refused at once with its resume
    /// command). Config: `[lease] wait = "2m"`.
    #[arg(long, value_parser = handoff_app::settings::parse_duration, value_name = "DURATION")]
    pub wait_lease: Option<std::time::Duration>,
    /// How long this pause is meant to last, e.g. 2h: recorded on the Lease and on each fence,
    /// so `fences`, `fences --overdue` (and its alerts) and `doctor` name a pause held longer,
    /// with its holder, reason and age. Nothing is ever resumed because it ran out. Above
    /// zero; default: no limit. Config: `[lease] max_hold = "2h"`.
    #[arg(long, value_name = "DURATION")]
    pub max_hold: Option<String>,
}

/// Targets named positionally, as `flux suspend` and `kubectl get` take them: added to -t.
#[derive(Debug, Args, Clone, Default)]
pub struct Positional {
    /// Flux objects to pause, `[kind/][namespace/]name`, or `deploy/namespace/name=N` (as -t;
    /// both may be given).
    #[arg(value_name = "TARGET")]
    pub objects: Vec<String>,
}

impl TargetArgs {
    /// These flags with the positional targets added after the -t ones.
    pub fn with(&self, positional: &Positional) -> Self {
        let mut t = self.clone();
        t.target.extend(positional.objects.iter().cloned());
        t
    }
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  flux-handoff pause --dry-run=server ks/flux-system/apps   # answered, nothing changed
  flux-handoff pause ks/flux-system/apps                    # prints the holder
  flux-handoff resume ks/flux-system/apps                   # waits for Ready
  flux-handoff pause -l team=web -n apps                    # every Kustomization labelled
  flux-handoff pause --all --kind hr -n web                 # every HelmRelease in web

-l and --all are resolved once, before anything is written (a selector that matches nothing \
is exit 2); dependencies (spec.dependsOn) are released before what depends on them.")]
pub struct PauseArgs {
    #[command(flatten)]
    pub positional: Positional,
    #[command(flatten)]
    pub select: SelectArgs,
    /// Send every write the handoff would make first (the Lease, each parent's then each
    /// target's fence) with the server's dryRun=All, so RBAC and admission answer for real, and
    /// change nothing: one line per write (would pass, denied, refused). Waits for nothing and
    /// leaves nothing to release. Exit 0 when every write would pass, 6 when one would not.
    #[arg(long, value_enum, require_equals = true, value_name = "MODE")]
    pub dry_run: Option<DryRunMode>,
    #[command(flatten)]
    pub targets: TargetArgs,
    #[command(flatten)]
    pub holder: HolderArg,
    #[command(flatten)]
    pub events: crate::notify::EventsArg,
    /// Gate a Deployment (`deploy/NS/NAME=N`) that a `HorizontalPodAutoscaler` or a KEDA
    /// `ScaledObject` targets. Without it such a gate is refused before anything is written
    /// (exit 2), naming the autoscaler and the fix: pause a `ScaledObject` at the gate's count
    /// with its own `autoscaling.keda.sh/paused-replicas: "N"` annotation (one so paused is
    /// not refused); an HPA cannot be paused or hold 0, so remove it or change its
    /// `scaleTargetRef` for the pause. With this flag the check is skipped, and a count the
    /// autoscaler sets during the work is treated as any other writer's.
    #[arg(long)]
    pub allow_autoscaler: bool,
}

/// `resume -l`/`--all`: the paused objects to resume the pause of, chosen by label.
#[derive(Debug, Args, Clone, Default)]
pub struct ResumeSelect {
    /// Resume the pause of the paused objects of --kind whose labels match SELECTOR, in -n's
    /// namespace and each --in (-A: every namespace), as if each were named (`flux resume
    /// kustomization -l`): the one holder fencing them all is resumed, its whole pause. No
    /// paused object matching is exit 2, nothing written. Syntax as `pause -l`.
    #[arg(long, short = 'l', value_name = "SELECTOR", conflicts_with_all = ["all", "objects", "holder"])]
    pub selector: Option<String>,
    /// Resume the pause of every paused object of --kind in -n's namespace and each --in (-A:
    /// every namespace), as `flux resume kustomization --all`; as -l otherwise.
    #[arg(long, conflicts_with_all = ["objects", "holder"])]
    pub all: bool,
    /// The kinds -l and --all select: `ks` (Kustomization, the default), `hr`
    /// (`HelmRelease`); repeatable, commas allowed.
    #[arg(long, value_name = "KIND", value_delimiter = ',')]
    pub kind: Vec<String>,
}

#[derive(Debug, Args)]
#[command(after_help = "\
A holder is adopted only when its pause is parked (`flux-handoff pause` parks the Lease) or \
when you attest with --holder-exited that its process has exited. A Lease held by the holder \
and not parked looks live (for example a `run` whose command is still running): resume then \
refuses with exit 3 and changes nothing. Use `flux-handoff fences recover` to prove it gone by \
watching the Lease, or --holder-exited when you know its process has exited.")]
pub struct ResumeArgs {
    /// Resume the pause of these objects, `[kind/][namespace/]name`, as `flux resume` does:
    /// the holder is read from their fences (all must have the same one) and its whole pause
    /// is released, then each released object is waited for until Ready (--wait=false skips).
    #[arg(value_name = "OBJECT", conflicts_with = "holder")]
    pub objects: Vec<String>,
    #[command(flatten)]
    pub select: ResumeSelect,
    /// The holder whose fences to release (default: `$FLUX_HANDOFF_HOLDER`; pause prints it).
    /// Needed unless objects are named.
    #[arg(long, value_name = "HOLDER")]
    pub holder: Option<String>,
    /// Attest that the holder's process has exited (e.g. a CI post step after its job's main
    /// step ended), so a Lease it holds without having parked it may be adopted and released.
    /// Without it, such a Lease looks live and resume refuses (exit 3, nothing changed).
    /// The holder's command may outlive its process: if a keeper of that holder runs on this
    /// machine, it is asked to end the command's processes first and waited for (at most one
    /// Lease duration and 3 s); then every cgroup of the holder's command on this machine
    /// (`flux-handoff_HOLDER_*` under the cgroup v2 mount) is emptied with cgroup.kill, so
    /// processes whose keeper was killed with the holder (`pkill -9 flux-handoff`) end too.
    /// If any are still there, resume refuses (exit 3). What it cannot see: where the holder
    /// could make no cgroup (no cgroup v2, no write access to its own cgroup, or
    /// `FLUX_HANDOFF_CGROUP=off`), background processes of a command whose keeper died with the
    /// holder are not found, nor a holder's work on another machine.
    #[arg(long)]
    pub holder_exited: bool,
    /// Act only if the holder still holds the Lease (what the GitHub Action's post step
    /// runs): the Lease and the holder's fences are read first; a free Lease, or one another
    /// holder has, is never taken, and then nothing is written. Fences of the holder without
    /// its Lease are reported (exit 3, nothing changed).
    #[arg(long)]
    pub if_held: bool,
    /// After releasing, request a reconcile and wait until each object is Ready for its
    /// current generation (what --wait does; kept for scripts).
    #[arg(long)]
    pub wait_ready: bool,
    /// Wait until each released object is Ready, as `flux resume` does: default true when
    /// objects are named, false by holder (a CI post step or a recovery never waits on a
    /// target that was failing before the pause). `--wait=false` skips, `--wait` waits.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_name = "BOOL")]
    pub wait: Option<bool>,
    #[command(flatten)]
    pub targets: TargetArgs,
    #[command(flatten)]
    pub find: FindArgs,
    #[command(flatten)]
    pub events: crate::notify::EventsArg,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  flux-handoff run --dry-run=server apps -- ./deploy.sh   # answered, nothing changed or run
  flux-handoff run apps hr/web/podinfo -- ./deploy.sh     # pause, prove, run, resume
  flux-handoff run -l team=web -n apps -- ./deploy.sh     # every Kustomization labelled
  flux-handoff run --all --kind ks,hr --in web -- ./x.sh  # all of both kinds in -n and web

The command's parent is a keeper process: if flux-handoff is killed, or stopped or suspended \
past its Lease deadline, the keeper ends the command and everything it started (SIGTERM, \
SIGKILL after --grace) before anyone can take the Lease over. With a writable cgroup v2 (root, \
a delegated systemd scope) nothing the command starts escapes; without one, the keeper finds \
its processes in the process table. Ctrl-Z stops the command with the run; from a terminal \
the command gets /dev/null as standard input, as it does not own the terminal.")]
pub struct RunArgs {
    #[command(flatten)]
    pub positional: Positional,
    #[command(flatten)]
    pub select: SelectArgs,
    /// Send every write the handoff would make first (the Lease, each parent's then each
    /// target's fence) with the server's dryRun=All, so RBAC and admission answer for real, and
    /// change nothing: one line per write (would pass, denied, refused). Waits for nothing and
    /// leaves nothing to release; the command is not run. Exit 0 when every write would pass, 6 when one would not.
    #[arg(long, value_enum, require_equals = true, value_name = "MODE")]
    pub dry_run: Option<DryRunMode>,
    #[command(flatten)]
    pub targets: TargetArgs,
    #[command(flatten)]
    pub holder: HolderArg,
    #[command(flatten)]
    pub events: crate::notify::EventsArg,
    /// How long the command's processes get between SIGTERM and SIGKILL when the run is
    /// interrupted, loses its Lease or finds its pause broken — and what the command left
    /// running when it exits. The default leaves room, inside the 7.5 s a GitHub
    /// runner waits between SIGINT and SIGTERM, for the release after the command is gone.
    /// When the Lease's renewals stop succeeding, the holder's own deadline stops the command
    /// this long before it must be gone (at most a quarter of the time left before then).
    #[arg(long, default_value = "5s", value_parser = handoff_app::settings::parse_duration, value_name = "DURATION")]
    pub grace: std::time::Duration,
    /// Gate a Deployment (`deploy/NS/NAME=N`) that a `HorizontalPodAutoscaler` or a KEDA
    /// `ScaledObject` targets. Without it such a gate is refused before anything is written
    /// (exit 2), naming the autoscaler and the fix: pause a `ScaledObject` at the gate's count
    /// with its own `autoscaling.keda.sh/paused-replicas: "N"` annotation (one so paused is
    /// not refused); an HPA cannot be paused or hold 0, so remove it or change its
    /// `scaleTargetRef` for the pause. With this flag the check is skipped, and a count the
    /// autoscaler sets during the work is treated as any other writer's.
    #[arg(long)]
    pub allow_autoscaler: bool,
    /// The command to run while paused, after `--`. It gets `FLUX_HANDOFF_HOLDER`,
    /// `FLUX_HANDOFF_PROOF` and `FLUX_HANDOFF_TARGETS` in its environment and runs in its own
    /// process group. On the first SIGINT/SIGTERM the group gets SIGTERM (SIGKILL after
    /// --grace); on a second signal, or when the process that started flux-handoff dies, it
    /// gets SIGKILL at once. Either way the handoff then resumes. Background work does not
    /// outlive the pause: when the command exits or is stopped, every process it started (in
    /// the background, in its own group or session: flux-handoff is their subreaper on Linux)
    /// gets SIGTERM, then SIGKILL after --grace, and is gone before anything is released. If
    /// someone breaks the pause while it runs (removes or changes a fence, deletes or
    /// recreates a paused object, unsuspends it), the command is stopped and the run exits 8,
    /// naming the object, the change and the field manager. Otherwise exits with the
    /// command's exit code, or 128+N when a signal N ended it.
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `--dry-run`: only `server` (as `kubectl --dry-run=server`): the server answers each write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DryRunMode {
    /// Send every write with `dryRun=All`: admission and RBAC answer, nothing is stored.
    Server,
}

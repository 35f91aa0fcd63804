//! The command line, as clap derives it: the top-level parser, assembling the arguments of
//! `args` and of the commands that own theirs (`cmd::ghcr`, `cmd::fences`, ...). Only `main`
//! imports it. `--help` is the manual: keep it teaching.

use clap::{Parser, Subcommand};

use crate::args::{Global, PauseArgs, ResumeArgs, RunArgs};

const ABOUT: &str =
    "Take Flux objects out of Flux's hands, prove Flux has let go, do work, hand them back";

const LONG_ABOUT: &str = "\
Take Flux objects out of Flux's hands, prove that Flux has let go, do some work, and hand them
back — with owner fences (compare-and-swap on every write), a stable-pause proof that never
trusts frozen status, and reports that never print secrets or identities.

A handoff: acquire the Lease, fence the chain top-down (parent, then target: owner annotation,
spec.suspend=true — on a Flux Operator ResourceSet or FluxInstance its
fluxcd.controlplane.io/reconcile: disabled instead — a requestedAt nonce, reconcile: disabled on
the target, and the Flux Operator's suspendedBy where no one set one), retire in-flight
reconciles (--retire ack|restart|none), prove the pause is stable, work, then release bottom-up
and release the Lease — on every exit path, including SIGINT and SIGTERM.

Targets are named (`apps`, `ks/NS/NAME`, `hr/NS/NAME`, `rset/NS/NAME`, `fi/NS/NAME`) or
selected, as `flux suspend --all` and `kubectl -l` select them: `-l team=web` or `--all`
(`--kind hr`, `-n`, `--in`, `-A`),
listed once before any write; dependencies (spec.dependsOn) are released first, and a
selection that matches nothing is exit 2 with nothing written.

Try it first with the server's dry run: every write answered by RBAC and admission, nothing
changed:

  flux-handoff pause --dry-run=server ks/flux-system/apps
  flux-handoff pause ks/flux-system/apps";

/// `--version`: the crate version and the commit it was built from (build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("FLUX_HANDOFF_COMMIT"),
    ")"
);

#[derive(Debug, Parser)]
#[command(name = "flux-handoff", version = VERSION, about = ABOUT, long_about = LONG_ABOUT,
          after_help = crate::exit::TABLE, after_long_help = crate::exit::TABLE)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Fence the chain, retire in-flight reconciles, prove the stable pause; leave it paused.
    Pause(PauseArgs),
    /// Resume a pause by object (`resume apps`, as `flux resume`: waits for Ready) or by holder
    /// (`--holder H`): children before parents, then the Lease.
    Resume(ResumeArgs),
    /// Pause, prove, run a command, resume — whatever the command's outcome.
    Run(RunArgs),
    /// Prove a registry credential (`ghcr check`, no cluster I/O) or reassert it into Secrets
    /// inside a handoff (`ghcr reassert`).
    Ghcr(crate::cmd::ghcr::GhcrArgs),
    /// List every fence and the Lease with liveness evidence and the exact release command
    /// (read-only); `fences release` and `fences recover` release.
    Fences(crate::cmd::fences::FencesArgs),
    /// Read-only preflight: API, Flux CRDs, controller, Lease namespace, and every permission
    /// the configured handoff needs.
    Doctor(crate::cmd::doctor::DoctorArgs),
    /// Print the RBAC manifests granting exactly what the configured features need: a Role
    /// and `RoleBinding` per namespace (the root Secret and pull Secrets by name), cluster-wide
    /// rights only for -A or a namespace selector. No cluster call.
    Rbac(crate::cmd::rbac::RbacArgs),
    /// Print shell completions (bash, zsh, fish, elvish, powershell) to stdout.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) to stdout.
    Man,
}

//! `flux-handoff`: a thin binary over flux-fence, flux-suspend and ghcr-auth.

mod args;
mod cli;
mod client;
mod cmd;
mod exit;
mod failure;
mod logging;
mod notify;
mod output;
mod session;
mod settings;
mod signals;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::cli::{Cli, Command};
use crate::output::Output;

fn main() -> ExitCode {
    // `flux handoff <TAB>`: the Flux CLI asks its plugins with Cobra's protocol.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("__complete") {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return ExitCode::from(exit::INTERNAL);
        };
        rt.block_on(handoff_app::complete::run(&Cli::command(), &args[1..]));
        return ExitCode::SUCCESS;
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print and succeed; usage errors exit 2.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::SUCCESS
            });
        }
    };
    logging::init(&cli);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::INTERNAL);
        }
    };
    ExitCode::from(runtime.block_on(dispatch(cli)))
}

async fn dispatch(cli: Cli) -> u8 {
    let mut out = Output::new(
        cli.global.output,
        Output::github_from_env(),
        cli.global.quiet,
    );
    // Nothing is held until a command takes something (it says so when it does).
    out.cleanup_complete(true);
    let cancel = flux_suspend::Cancel::new();
    // A run orphaned by a killed shell (a CI runner cancelling a step) is a cancellation.
    let parent_death = matches!(
        cli.command,
        Command::Pause(_) | Command::Run(_) | Command::Ghcr(_)
    );
    if let Err(e) = signals::install(&cancel, parent_death) {
        eprintln!("error: cannot install signal handlers: {e}");
        return exit::INTERNAL;
    }
    let g = &cli.global;
    let name = command_name(&cli.command);
    if g.output == output::Format::Name && !output::lists_objects(name) {
        let line = format!("-o name: `{name}` lists no objects; use -o json or -o yaml");
        out.finish(name, exit::USAGE, Some(&line), None);
        return exit::USAGE;
    }
    let result = match &cli.command {
        // Boxed: a session's future (start, proof, work or park) is over 16 KiB.
        Command::Pause(a) => Box::pin(cmd::pause::run(g, a, &mut out, cancel)).await,
        Command::Resume(a) => cmd::resume::run(g, a, &mut out, cancel).await,
        Command::Run(a) => Box::pin(cmd::run::run(g, a, &mut out, cancel)).await,
        Command::Fences(a) => cmd::fences::run(g, a, &mut out).await,
        Command::Doctor(a) => cmd::doctor::run(g, a, &mut out).await,
        Command::Rbac(a) => cmd::rbac::run(g, a, &mut out),
        // Boxed: the reassert future (a registry proof, a handoff, the Secrets) is over 16 KiB.
        Command::Ghcr(a) => Box::pin(cmd::ghcr::run(g, a, &mut out, cancel)).await,
        Command::Completions { shell } => {
            clap_complete::generate(
                *shell,
                &mut Cli::command(),
                "flux-handoff",
                &mut std::io::stdout(),
            );
            return exit::SUCCESS;
        }
        Command::Man => {
            let man = clap_mangen::Man::new(Cli::command());
            return match man.render(&mut std::io::stdout()) {
                Ok(()) => exit::SUCCESS,
                // `flux-handoff man | head` closes the pipe early: not an error.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => exit::SUCCESS,
                Err(e) => {
                    eprintln!(
                        "error: {}",
                        handoff_app::render::plain::line(&e.to_string())
                    );
                    exit::INTERNAL
                }
            };
        }
    };
    // The Flux events still in flight, each within its bound, after everything was released.
    notify::flush(&mut out).await;
    match result {
        Ok(code) => {
            out.finish(name, code, None, None);
            code
        }
        Err(f) => {
            out.finish(name, f.code, Some(&f.message), f.next.as_deref());
            f.code
        }
    }
}

/// The command's name for the output (`ghcr check`, `ghcr reassert`: their subcommand too).
fn command_name(command: &Command) -> &'static str {
    match command {
        Command::Pause(_) => "pause",
        Command::Resume(_) => "resume",
        Command::Run(_) => "run",
        Command::Fences(_) => "fences",
        Command::Doctor(_) => "doctor",
        Command::Rbac(_) => "rbac",
        Command::Ghcr(a) => a.name(),
        Command::Completions { .. } => "completions",
        Command::Man => "man",
    }
}

//! Flags over config over defaults ([`handoff_app::settings`]): what a handoff command will
//! do, resolved before any cluster call, so bad input fails with exit code 2 and nothing
//! touched.

use flux_fence::ObjectRef;
use flux_suspend::SessionOptions;
use handoff_app::settings::Flags;

use crate::args::{Global, TargetArgs};
use crate::config::FileConfig;

/// Resolves flags over the config file. Errors are one line, for exit code 2.
pub fn resolve(
    global: &Global,
    args: &TargetArgs,
    file: &FileConfig,
) -> Result<SessionOptions, String> {
    let mut f = Flags::new(&global.namespace);
    f.targets.clone_from(&args.target);
    f.parent.clone_from(&args.parent);
    f.retire.clone_from(&args.retire);
    f.quiesce = args.quiesce;
    f.lease.clone_from(&args.lease);
    f.controller.clone_from(&args.controller);
    f.reason.clone_from(&global.reason);
    f.timeout = global.timeout;
    f.wait_timeout = global.wait_timeout;
    f.interval = global.interval;
    handoff_app::settings::resolve(&f, &file.tables())
}

/// Parses `[kind/][namespace/]name` (`fences release`).
pub fn parse_target(text: &str, default_ns: &str) -> Result<ObjectRef, String> {
    handoff_app::names::parse_object(text, default_ns).map_err(|e| e.to_string())
}

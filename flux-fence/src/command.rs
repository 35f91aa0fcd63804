//! The commands a person may run next, as facts. The library chooses which command helps and
//! with which names (the holder, the Lease, the object); the application spells it in its own
//! program's words ([`Spell`]), so no library writes a command line.
//!
//! ```
//! use flux_fence::command::Command;
//!
//! // An application's spelling: its program, its flags.
//! let spell = |c: &Command| match c {
//!     Command::Resume { holder, lease: Some(lease), .. } => {
//!         format!("mytool resume {holder} in {lease}")
//!     }
//!     _ => "mytool help".to_string(),
//! };
//! let resume = Command::Resume {
//!     holder: "gh1.1-abcdef".into(),
//!     lease: Some("flux-system/flux-handoff".into()),
//!     exited: false,
//! };
//! assert_eq!(spell(&resume), "mytool resume gh1.1-abcdef in flux-system/flux-handoff");
//! ```

use crate::ObjectRef;

/// A command of the application, named by what it does and the facts it needs.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Command {
    /// Take the objects and leave them paused, the Lease parked (what a deliberate pause was
    /// made with).
    Pause,
    /// Give back what `holder` took under the Lease `lease` (`namespace/name`; `None`: the one
    /// the application is configured with): its fences, then the Lease. `exited`: the holder
    /// did not park the Lease, so it looks live, and whoever runs this attests that its
    /// process has exited.
    Resume {
        /// The holder whose pause ends.
        holder: String,
        /// The Lease, `namespace/name`, when it must be named.
        lease: Option<String>,
        /// Whether the caller must attest that the holder exited.
        exited: bool,
    },
    /// Release the fence `holder` keeps on `object`, alone. `exited`: as for
    /// [`Command::Resume`]. `keep_moved`: keep each mark another writer changed as they set
    /// it, restore the others, remove the fence.
    Release {
        /// The fenced object.
        object: ObjectRef,
        /// Its fence's holder.
        holder: String,
        /// Whether the caller must attest that the holder exited.
        exited: bool,
        /// Whether a moved mark is kept as another writer set it.
        keep_moved: bool,
    },
    /// See every fence and the Lease, with the command that releases each; `lease` names a
    /// Lease other than the default one.
    Fences {
        /// The Lease, `namespace/name`, when not the default one.
        lease: Option<String>,
    },
    /// Release the fences of holders proven gone, under the Lease `lease` (`namespace/name`).
    Recover {
        /// The Lease, `namespace/name`.
        lease: String,
    },
}

/// How the application spells a [`Command`]: the text a person types to run it.
pub type Spell<'a> = &'a dyn Fn(&Command) -> String;

/// The spelling the crate's own tests read: a program `app` with the flags of flux-handoff's.
#[cfg(test)]
pub(crate) fn test_spell(c: &Command) -> String {
    match c {
        Command::Pause => "app pause".into(),
        Command::Resume {
            holder,
            lease,
            exited,
        } => {
            let exited = if *exited { " --holder-exited" } else { "" };
            let lease = lease.as_ref().map(|l| format!(" --lease {l}"));
            format!(
                "app resume --holder {holder}{exited}{}",
                lease.unwrap_or_default()
            )
        }
        Command::Release { object, holder, .. } => format!(
            "app fences release {} --holder {holder}",
            crate::recovery::short_ref(object)
        ),
        Command::Fences { lease } => {
            let lease = lease.as_ref().map(|l| format!(" --lease {l}"));
            format!("app fences{}", lease.unwrap_or_default())
        }
        Command::Recover { lease } => format!("app fences recover --lease {lease}"),
    }
}

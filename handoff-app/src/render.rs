//! What a handoff prints, as pure functions of what it has to say: a JSON document as YAML
//! ([`yaml`]), text no reader of a GitHub Actions log takes as a workflow command ([`plain`]),
//! and progress lines in the flux CLI's style ([`progress`]). The application decides where
//! each goes (stderr, stdout, the step summary).

pub mod plain;
pub mod progress;
pub mod yaml;

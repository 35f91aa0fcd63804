//! Docker config credentials: reading (never from argv), validation and canonical rendering.

use std::collections::BTreeMap;
use std::collections::HashSet;
use std::fmt;

use base64::Engine as _;
use base64::alphabet;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

use crate::error::{CredentialProblem, GhcrError};
pub use crate::input::{CredentialFormat, CredentialSource};

/// The key of a `kubernetes.io/dockerconfigjson` Secret that holds the Docker config.
pub const SECRET_KEY: &str = ".dockerconfigjson";
/// The type of the Secrets this crate reasserts.
pub const SECRET_TYPE: &str = "kubernetes.io/dockerconfigjson";
/// The registry of GitHub's container registry.
pub const GHCR: &str = "ghcr.io";

/// One registry's credential. Debug never shows the password.
#[derive(Clone)]
pub struct RegistryAuth {
    registry: String,
    username: String,
    password: SecretString,
}

impl RegistryAuth {
    /// The normalised registry host (`ghcr.io`, `127.0.0.1:5000`).
    #[must_use]
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The username.
    #[must_use]
    pub fn username(&self) -> &str {
        &self.username
    }

    /// The password or token.
    #[must_use]
    pub fn password(&self) -> &SecretString {
        &self.password
    }

    /// `base64(username:password)`, the Docker config `auth` field and HTTP Basic value.
    #[must_use]
    pub fn basic(&self) -> SecretString {
        SecretString::from(STANDARD.encode(format!(
            "{}:{}",
            self.username,
            self.password.expose_secret()
        )))
    }
}

impl PartialEq for RegistryAuth {
    fn eq(&self, other: &Self) -> bool {
        self.registry == other.registry
            && self.username == other.username
            && self.password.expose_secret() == other.password.expose_secret()
    }
}

impl Eq for RegistryAuth {}

impl fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryAuth")
            .field("registry", &self.registry)
            .field("password", &"[REDACTED]")
            .finish_non_exhaustive()
    }
}

/// A validated Docker config: one entry per registry, each with a username and password.
///
/// Equality is semantic (normalised registries, decoded `auth`), so two configs that differ only
/// in whitespace, key order or `auth`-only versus explicit fields are equal. Debug shows the
/// registries only.
#[derive(Clone)]
pub struct DockerConfig {
    entries: BTreeMap<String, RegistryAuth>,
    /// The text it was parsed from, kept so that masking covers it too.
    source_text: Option<SecretString>,
}

impl PartialEq for DockerConfig {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries
    }
}

impl Eq for DockerConfig {}

impl fmt::Debug for DockerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DockerConfig")
            .field("registries", &self.entries.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl DockerConfig {
    /// Reads and validates a credential in one step.
    ///
    /// # Errors
    /// Reading errors from [`CredentialSource::read`]; [`GhcrError::InvalidCredential`] when
    /// validation fails.
    pub fn load(source: &CredentialSource, format: &CredentialFormat) -> Result<Self, GhcrError> {
        let text = source.read()?;
        match format {
            CredentialFormat::DockerConfig => {
                Self::parse(text.expose_secret()).map_err(GhcrError::InvalidCredential)
            }
            CredentialFormat::Token { registry, username } => {
                let token = SecretString::from(text.expose_secret().trim_end_matches(['\r', '\n']));
                Self::from_token(registry, username, token).map_err(GhcrError::InvalidCredential)
            }
        }
    }

    /// Parses and validates Docker config JSON.
    ///
    /// # Guarantees
    /// Accepts only `{"auths": {<registry>: {username, password, auth?, email?}}}` where `auth`
    /// (if present) is base64 of `username:password` and agrees with explicit fields, no key is
    /// repeated, no registry appears twice after normalisation, nothing is empty, and no value
    /// contains a control character.
    ///
    /// # Errors
    /// A [`CredentialProblem`] naming the rule and registry, never a value.
    pub fn parse(text: &str) -> Result<Self, CredentialProblem> {
        let value: Value = serde_json::from_str(text).map_err(|e| CredentialProblem::NotJson {
            line: e.line(),
            column: e.column(),
        })?;
        serde_json::from_str::<crate::json_keys::NoDuplicateKeys>(text)
            .map_err(|_| CredentialProblem::DuplicateKey)?;
        let Value::Object(top) = value else {
            return Err(CredentialProblem::Shape(
                "the document is not a JSON object",
            ));
        };
        let mut auths = None;
        for (key, v) in top {
            if key == "auths" {
                auths = Some(v);
            } else {
                return Err(CredentialProblem::UnsupportedField {
                    field: plain_label(&key),
                });
            }
        }
        let Some(Value::Object(auths)) = auths else {
            return Err(CredentialProblem::Shape(
                "`auths` is missing or not an object",
            ));
        };
        if auths.is_empty() {
            return Err(CredentialProblem::Shape("`auths` is empty"));
        }
        let mut entries = BTreeMap::new();
        for (key, entry) in auths {
            let auth = parse_entry(&key, entry)?;
            let registry = auth.registry.clone();
            if entries.insert(registry.clone(), auth).is_some() {
                return Err(CredentialProblem::DuplicateRegistry { registry });
            }
        }
        Ok(Self {
            entries,
            source_text: Some(SecretString::from(text)),
        })
    }

    /// Builds a config for one registry from a bare token.
    ///
    /// # Errors
    /// The same rules as [`DockerConfig::parse`].
    pub fn from_token(
        registry: &str,
        username: &str,
        token: SecretString,
    ) -> Result<Self, CredentialProblem> {
        let registry = normalise_registry(registry)?;
        let auth = checked_auth(registry, username.to_string(), token)?;
        let mut entries = BTreeMap::new();
        entries.insert(auth.registry.clone(), auth);
        Ok(Self {
            entries,
            source_text: None,
        })
    }

    /// The entry for `registry` (normalised before lookup).
    #[must_use]
    pub fn credential_for(&self, registry: &str) -> Option<&RegistryAuth> {
        let key = normalise_registry(registry).ok()?;
        self.entries.get(&key)
    }

    /// The registries this config covers, sorted.
    pub fn registries(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// The canonical compact JSON: sorted registries, each with `username`, `password` and
    /// `auth`. This is what gets written into Secrets.
    #[must_use]
    pub fn render(&self) -> SecretString {
        let mut auths = serde_json::Map::new();
        for (registry, auth) in &self.entries {
            auths.insert(
                registry.clone(),
                serde_json::json!({
                    "auth": auth.basic().expose_secret(),
                    "password": auth.password.expose_secret(),
                    "username": auth.username,
                }),
            );
        }
        SecretString::from(serde_json::json!({ "auths": auths }).to_string())
    }

    /// Every form in which this credential could appear in output: each password, its base64
    /// forms, `base64(username:password)` in standard and URL-safe alphabets with and without
    /// padding, the rendered config and its base64, and the text it was parsed from.
    #[must_use]
    pub fn secret_forms(&self) -> Vec<SecretString> {
        use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
        let engines = [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD];
        let mut forms: Vec<String> = Vec::new();
        for auth in self.entries.values() {
            let password = auth.password.expose_secret();
            let pair = format!("{}:{password}", auth.username);
            forms.push(password.to_string());
            for engine in engines {
                forms.push(engine.encode(password));
                forms.push(engine.encode(&pair));
            }
        }
        let rendered = self.render();
        forms.push(rendered.expose_secret().to_string());
        forms.push(STANDARD.encode(rendered.expose_secret()));
        if let Some(text) = &self.source_text {
            forms.push(text.expose_secret().to_string());
            forms.push(STANDARD.encode(text.expose_secret()));
        }
        let mut seen = HashSet::new();
        forms.retain(|f| !f.is_empty() && seen.insert(f.clone()));
        forms.into_iter().map(SecretString::from).collect()
    }
}

/// Normalises a Docker config registry key: drops an `http(s)://` scheme and any path,
/// lowercases, and checks it is `host[:port]`.
///
/// # Errors
/// [`CredentialProblem::InvalidRegistry`] for anything else (the key is not echoed).
pub fn normalise_registry(key: &str) -> Result<String, CredentialProblem> {
    let rest = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = rest
        .split('/')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host.as_str(), None),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        && !name.starts_with(['.', '-'])
        && !name.ends_with(['.', '-']);
    // Like Docker, a registry is a host with a dot or a port, or `localhost`; this also keeps
    // a pasted token (no dot) from ever being echoed as a "registry".
    let looks_like_registry = name.contains('.') || port.is_some() || name == "localhost";
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    if name_ok && port_ok && looks_like_registry {
        Ok(host)
    } else {
        Err(CredentialProblem::InvalidRegistry)
    }
}

fn parse_entry(key: &str, entry: Value) -> Result<RegistryAuth, CredentialProblem> {
    let registry = normalise_registry(key)?;
    let Value::Object(fields) = entry else {
        return Err(CredentialProblem::Shape(
            "an `auths` entry is not an object",
        ));
    };
    let (mut username, mut password, mut auth) = (None, None, None);
    for (field, v) in fields {
        let Value::String(s) = v else {
            return Err(CredentialProblem::Shape("an `auths` field is not a string"));
        };
        match field.as_str() {
            "username" => username = Some(s),
            "password" => password = Some(SecretString::from(s)),
            "auth" => auth = Some(SecretString::from(s)),
            "email" => {}
            _ => {
                return Err(CredentialProblem::UnsupportedField {
                    field: plain_label(&field),
                });
            }
        }
    }
    if let Some(auth) = auth {
        let (u, p) = decode_auth(&registry, &auth)?;
        let agrees = username.as_ref().is_none_or(|x| *x == u)
            && password
                .as_ref()
                .is_none_or(|x| x.expose_secret() == p.expose_secret());
        if !agrees {
            return Err(CredentialProblem::AuthMismatch { registry });
        }
        username = Some(u);
        password = Some(p);
    }
    let username = username.unwrap_or_default();
    let password = password.unwrap_or_else(|| SecretString::from(""));
    checked_auth(registry, username, password)
}

fn checked_auth(
    registry: String,
    username: String,
    password: SecretString,
) -> Result<RegistryAuth, CredentialProblem> {
    if username.is_empty() {
        return Err(CredentialProblem::Missing {
            registry,
            field: "username",
        });
    }
    if password.expose_secret().is_empty() {
        return Err(CredentialProblem::Missing {
            registry,
            field: "password",
        });
    }
    if username.chars().any(char::is_control) {
        return Err(CredentialProblem::ControlCharacter {
            registry,
            field: "username",
        });
    }
    if password.expose_secret().chars().any(char::is_control) {
        return Err(CredentialProblem::ControlCharacter {
            registry,
            field: "password",
        });
    }
    if username.contains(':') {
        return Err(CredentialProblem::UsernameColon { registry });
    }
    Ok(RegistryAuth {
        registry,
        username,
        password,
    })
}

fn decode_auth(
    registry: &str,
    auth: &SecretString,
) -> Result<(String, SecretString), CredentialProblem> {
    let lenient = GeneralPurpose::new(
        &alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let malformed = || CredentialProblem::AuthMalformed {
        registry: registry.to_string(),
    };
    let bytes = lenient
        .decode(auth.expose_secret().trim())
        .map_err(|_| malformed())?;
    let text = String::from_utf8(bytes).map_err(|_| malformed())?;
    let (u, p) = text.split_once(':').ok_or_else(malformed)?;
    Ok((u.to_string(), SecretString::from(p)))
}

/// Field names that may be shown in a message: the known Docker config fields. Anything else
/// could be pasted credential material and is never echoed.
const KNOWN_FIELDS: &[&str] = &[
    "auths",
    "credsStore",
    "credHelpers",
    "HttpHeaders",
    "psFormat",
    "imagesFormat",
    "detachKeys",
    "proxies",
    "currentContext",
    "identitytoken",
    "registrytoken",
    "serveraddress",
];

fn plain_label(key: &str) -> String {
    if KNOWN_FIELDS.contains(&key) {
        key.to_string()
    } else {
        "<not shown>".to_string()
    }
}

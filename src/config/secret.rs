//! `Secret`: a string that never reaches logs, errors or `Debug` output; and
//! [`SecretSource`]: where one comes from (inline, a `*_file`, a systemd credential).
//!
//! The config loader decides the source; a file is read only when a command that talks to the
//! service asks for the credentials, so `status`, `checkpoint` and `migrate` run where the
//! secret file is missing or unreadable (a BI-group user, a file readable by the daemon only).
//! Once loaded, the value prints as `[redacted]` everywhere and is read only through
//! [`Secret::expose`].

use std::fmt;
use std::path::PathBuf;

use super::env::Env;
use super::error::{ConfigError, ConfigErrorKind as Kind};

/// A string held by the `secrecy` crate (zeroed when dropped, never in its `Debug`), read only
/// through [`Secret::expose`]. A thin type of callsync's own so the rest of the crate — and
/// the files other changes touch — keep one name and one method for it.
#[derive(Clone)]
pub struct Secret(secrecy::SecretString);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(secrecy::SecretString::from(value.into()))
    }

    /// The only way to read the value: greppable, so every use is deliberate.
    pub fn expose(&self) -> &str {
        secrecy::ExposeSecret::expose_secret(&self.0)
    }
}

/// Equal values: configurations compare (tests, `config`'s sources).
impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for Secret {}

/// `[redacted]`, as in every log and error (secrecy's own says `SecretBox<str>([REDACTED])`).
impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// A secret as configured: its value, or the file that holds it (read by [`SecretSource::read`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    Value(Secret),
    /// `key` is what an error names: `api.access_token_file`, or `api.access_token` for the
    /// systemd credential.
    File {
        key: String,
        path: PathBuf,
    },
}

impl SecretSource {
    /// The secret: the file read now, its surrounding whitespace trimmed; an unreadable or
    /// empty file is a configuration error naming the key and the file.
    pub fn read(&self) -> Result<Secret, ConfigError> {
        let (key, path) = match self {
            SecretSource::Value(secret) => return Ok(secret.clone()),
            SecretSource::File { key, path } => (key, path),
        };
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(
                Kind::Unreadable,
                key.as_str(),
                format!("cannot read {}: {e}", path.display()),
            )
        })?;
        let value = text.trim();
        if value.is_empty() {
            return Err(ConfigError::new(
                Kind::Empty,
                key.as_str(),
                format!("{} is empty", path.display()),
            ));
        }
        if is_placeholder(value) {
            return Err(ConfigError::new(
                Kind::Placeholder,
                key.as_str(),
                format!(
                    "{} holds a placeholder, not a secret; write the real one there",
                    path.display()
                ),
            ));
        }
        Ok(Secret::new(value.to_owned()))
    }
}

/// Words that stand for a secret in examples, compared with case and punctuation ignored
/// (`replace-me`, `REPLACE_ME` and `replaceme` alike).
const PLACEHOLDER_WORDS: [&str; 16] = [
    "replaceme",
    "changeme",
    "todo",
    "fixme",
    "tbd",
    "placeholder",
    "example",
    "token",
    "secret",
    "password",
    "accesstoken",
    "clientsecret",
    "yourtoken",
    "yourtokenhere",
    "yoursecret",
    "yoursecrethere",
];

/// A value an example or a template left for the operator to replace: sent as a token it
/// only earns 401s at run time, and it would win over the systemd credential. The rule (in
/// docs/operate.md, "Secrets"): anything in angle brackets (`<token>`); or, case and punctuation
/// ignored, nothing but `x`s (`xxx`, `xxxx-xxxx`) or no letter or digit at all (`...`, `***`);
/// or one of [`PLACEHOLDER_WORDS`]. Whole values only, so a random token is never refused.
pub fn is_placeholder(value: &str) -> bool {
    let value = value.trim();
    if value.starts_with('<') && value.ends_with('>') {
        return true;
    }
    let letters: String = value
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    letters.chars().all(|c| c == 'x') || PLACEHOLDER_WORDS.contains(&letters.as_str())
}

impl From<Secret> for SecretSource {
    fn from(secret: Secret) -> Self {
        SecretSource::Value(secret)
    }
}

/// A secret given inline or as `<key>_file` (read when a command needs it); never both.
/// `None` when neither is set.
pub(super) fn secret(
    key: &str,
    inline: Option<String>,
    file: Option<PathBuf>,
) -> Result<Option<SecretSource>, ConfigError> {
    match (inline, file) {
        (Some(_), Some(_)) => Err(ConfigError::new(
            Kind::Conflict,
            key,
            format!("set either {key} or {key}_file, not both"),
        )),
        (Some(value), None) if value.trim().is_empty() => {
            Err(ConfigError::new(Kind::Empty, key, "is empty"))
        }
        (Some(value), None) if is_placeholder(&value) => Err(ConfigError::new(
            Kind::Placeholder,
            key,
            format!(
                "is a placeholder, not a secret: set the real one, or delete {key} to use {key}_file or the systemd credential"
            ),
        )),
        (Some(value), None) => Ok(Some(Secret::new(value.trim().to_owned()).into())),
        (None, Some(path)) => Ok(Some(SecretSource::File {
            key: format!("{key}_file"),
            path,
        })),
        (None, None) => Ok(None),
    }
}

/// `$CREDENTIALS_DIRECTORY/<name>` when systemd passed that credential.
pub(super) fn credential(env: &Env, name: &str, key: &str) -> Option<SecretSource> {
    let path = env.credentials_dir.as_ref()?.join(name);
    path.is_file().then(|| SecretSource::File {
        key: key.to_owned(),
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::{Secret, is_placeholder};

    #[test]
    fn never_prints_its_value() {
        let s = Secret::new("hunter2");
        assert_eq!(
            format!("{s:?} {s} {:?}", Some(&s)),
            "[redacted] [redacted] Some([redacted])"
        );
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn placeholders_are_whole_values_an_example_leaves_behind() {
        for placeholder in [
            "replace-me",
            "REPLACE_ME",
            "changeme",
            "change-me",
            "<token>",
            "<your access token>",
            "xxx",
            "XXXX-XXXX-XXXX",
            "...",
            "***",
            "TODO",
            "your-token-here",
            "secret",
        ] {
            assert!(is_placeholder(placeholder), "{placeholder}");
        }
        for token in [
            "007",
            "tok",
            "secret-8f3a9c",
            "sk_live_replaceme1",
            "todo-list-token-4b1e",
            "x1",
            "eyJhbGciOiJIUzI1NiJ9.e30.xxxx",
        ] {
            assert!(!is_placeholder(token), "{token}");
        }
    }
}

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

use super::ConfigError;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The only way to read the value: greppable, so every use is deliberate.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

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
            ConfigError::invalid(key.as_str(), format!("cannot read {}: {e}", path.display()))
        })?;
        let value = text.trim();
        if value.is_empty() {
            return Err(ConfigError::invalid(
                key.as_str(),
                format!("{} is empty", path.display()),
            ));
        }
        Ok(Secret::new(value.to_owned()))
    }
}

impl From<Secret> for SecretSource {
    fn from(secret: Secret) -> Self {
        SecretSource::Value(secret)
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn never_prints_its_value() {
        let s = Secret::new("hunter2");
        assert_eq!(
            format!("{s:?} {s} {:?}", Some(&s)),
            "[redacted] [redacted] Some([redacted])"
        );
        assert_eq!(s.expose(), "hunter2");
    }
}

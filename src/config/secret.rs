//! `Secret`: a string that never reaches logs, errors or `Debug` output.
//!
//! Where a secret comes from (inline, a `*_file`, a systemd credential) is resolved by the
//! config loader; this type only guarantees that, once loaded, the value prints as
//! `[redacted]` everywhere and is read only through [`Secret::expose`].

use std::fmt;

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

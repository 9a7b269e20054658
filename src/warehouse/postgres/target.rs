//! `PgTarget`: where the PostgreSQL warehouse is and how to reach it, from a libpq URI.
//!
//! `postgresql://[user@]host[:port]/dbname[?host=/socket/dir&sslmode=…&sslrootcert=…]`. The
//! URI never holds the password (one there is refused: the configuration is not a secret's
//! place); it comes from `warehouse.password_file` or the systemd credential (the caller
//! passes it), else from libpq's password file (`passfile=` in the URI, `$PGPASSFILE`, or
//! `~/.pgpass`), else none (trust or peer authentication). `sslmode` keeps libpq's meaning:
//! `disable`; `allow`/`prefer` (TLS when the server offers it, unverified); `require`
//! (TLS, unverified — verified against `sslrootcert` when one is given, as libpq does);
//! `verify-ca` (the chain, against `sslrootcert`, or the system's roots); `verify-full`
//! (the chain and the host name). A Unix socket never uses TLS, as with libpq.
//! [`PgTarget::display`] is the only form that reaches logs and errors: no password, ever.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use tokio_postgres::config::{Host, SslMode as WireSslMode};

use crate::config::{ConfigError, ConfigErrorKind, PostgresConfig, Secret, SecretSource};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// Why a `warehouse.url` cannot be used; the configuration error built from it names the key.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The URI itself: not a PostgreSQL URI, a password in it, an unknown `sslmode`.
    #[error("{0}")]
    Uri(String),
    /// libpq's password file that the URI or `$PGPASSFILE` names cannot be read.
    #[error("{0}")]
    PasswordFile(String),
}

#[derive(Clone)]
pub struct PgTarget {
    pub(super) config: tokio_postgres::Config,
    pub(super) ssl_mode: SslMode,
    /// `sslrootcert`: a PEM file of the CAs to trust; `None`: the system's roots.
    pub(super) root_cert: Option<PathBuf>,
    display: String,
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display)
    }
}

impl PgTarget {
    /// Parses `url`; `password` from the configuration's password file or credential.
    pub fn parse(url: &str, password: Option<&Secret>) -> Result<PgTarget, TargetError> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(TargetError::Uri(
                "not a PostgreSQL URI; write postgresql://USER@HOST/DBNAME, or postgresql://USER@/DBNAME?host=/run/postgresql for a Unix socket".into(),
            ));
        };
        if !matches!(scheme, "postgresql" | "postgres") {
            return Err(TargetError::Uri(format!(
                "the URI's scheme is `{}`; write postgresql://USER@HOST/DBNAME",
                crate::untrusted::untrusted_text(scheme, 40)
            )));
        }
        let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
        let authority = location.split('/').next().unwrap_or_default();
        let userinfo = authority.rsplit_once('@').map(|(u, _)| u);
        let pairs: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        if userinfo.is_some_and(|u| u.contains(':'))
            || pairs.iter().any(|(k, _)| k == "password" || k == "passwd")
        {
            return Err(TargetError::Uri(
                "the URI holds a password; remove it, and give it in warehouse.password_file, a systemd credential, or a password file (PGPASSFILE, ~/.pgpass)".into(),
            ));
        }
        let mut ssl_mode = None;
        let mut root_cert = None;
        let mut passfile = None;
        // sslmode, sslrootcert and passfile are read here (tokio-postgres does not know them).
        let mut passed = url::form_urlencoded::Serializer::new(String::new());
        for (key, value) in &pairs {
            match key.as_str() {
                "sslmode" => ssl_mode = Some(parse_ssl_mode(value)?),
                "sslrootcert" => root_cert = Some(PathBuf::from(value)),
                "passfile" => passfile = Some(PathBuf::from(value)),
                _ => {
                    passed.append_pair(key, value);
                }
            }
        }
        let passed = passed.finish();
        let text = if passed.is_empty() {
            format!("postgresql://{location}")
        } else {
            format!("postgresql://{location}?{passed}")
        };
        let mut config = tokio_postgres::Config::from_str(&text)
            .map_err(|e| TargetError::Uri(format!("{e}; see libpq's connection URIs")))?;
        config.application_name("callsync");
        let unix_only = config
            .get_hosts()
            .iter()
            .all(|h| matches!(h, Host::Unix(_)));
        // libpq's default is `prefer`; a Unix socket never speaks TLS.
        let ssl_mode = if unix_only {
            SslMode::Disable
        } else {
            ssl_mode.unwrap_or(SslMode::Prefer)
        };
        config.ssl_mode(match ssl_mode {
            SslMode::Disable => WireSslMode::Disable,
            SslMode::Prefer => WireSslMode::Prefer,
            _ => WireSslMode::Require,
        });
        if let Some(root) = &root_cert
            && root.as_os_str() == "system"
        {
            root_cert = None;
        }
        let display = display(&config);
        match password {
            Some(secret) => {
                config.password(secret.expose());
            }
            None => {
                if let Some(found) = passfile_password(&config, passfile.as_deref())? {
                    config.password(found.expose());
                }
            }
        }
        Ok(PgTarget {
            config,
            ssl_mode,
            root_cert,
            display,
        })
    }

    /// The configured warehouse, its password read now: a bad URI or an unreadable password
    /// file is a configuration error naming its key.
    pub fn configured(config: &PostgresConfig) -> Result<PgTarget, ConfigError> {
        let password = config
            .password
            .as_ref()
            .map(SecretSource::read)
            .transpose()?;
        PgTarget::parse(&config.url, password.as_ref()).map_err(|err| {
            let kind = match err {
                TargetError::Uri(_) => ConfigErrorKind::BadUrl,
                TargetError::PasswordFile(_) => ConfigErrorKind::Unreadable,
            };
            ConfigError::new(kind, "warehouse.url", err.to_string())
        })
    }

    /// `postgresql://user@host:port/dbname`: what logs, errors, status and metrics show.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// The database's name (the user's name when the URI gives none, as libpq does).
    pub fn dbname(&self) -> String {
        self.config
            .get_dbname()
            .or(self.config.get_user())
            .unwrap_or_default()
            .to_owned()
    }

    /// The same server and credentials, another database (tests, benchmarks).
    pub fn with_dbname(&self, dbname: &str) -> PgTarget {
        let mut target = self.clone();
        target.config.dbname(dbname);
        target.display = display(&target.config);
        target
    }

    pub fn ssl_mode(&self) -> SslMode {
        self.ssl_mode
    }
}

fn parse_ssl_mode(value: &str) -> Result<SslMode, TargetError> {
    Ok(match value {
        "disable" => SslMode::Disable,
        "allow" | "prefer" => SslMode::Prefer,
        "require" => SslMode::Require,
        "verify-ca" => SslMode::VerifyCa,
        "verify-full" => SslMode::VerifyFull,
        other => {
            return Err(TargetError::Uri(format!(
                "sslmode `{}` is not one of disable, allow, prefer, require, verify-ca, verify-full",
                crate::untrusted::untrusted_text(other, 40)
            )));
        }
    })
}

fn display(config: &tokio_postgres::Config) -> String {
    let user = config
        .get_user()
        .map(|u| format!("{u}@"))
        .unwrap_or_default();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .zip(config.get_ports().iter().chain(std::iter::repeat(&5432)))
        .map(|(host, port)| match host {
            Host::Tcp(name) => format!("{name}:{port}"),
            Host::Unix(dir) => format!("[{}]:{port}", dir.display()),
        })
        .collect();
    format!(
        "postgresql://{user}{}/{}",
        hosts.join(","),
        config.get_dbname().unwrap_or_default()
    )
}

/// The password libpq's password file gives this connection, if any: `passfile`, else
/// `$PGPASSFILE`, else `~/.pgpass`. Lines `host:port:database:user:password`, `*` matching
/// anything, `\:` and `\\` escaped; the first matching line wins. A socket's host is
/// `localhost` there, as in libpq. A missing file is no error; an unreadable one is.
fn passfile_password(
    config: &tokio_postgres::Config,
    passfile: Option<&Path>,
) -> Result<Option<Secret>, TargetError> {
    let explicit = passfile
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("PGPASSFILE").map(PathBuf::from));
    let path = match explicit.clone() {
        Some(path) => path,
        None => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(".pgpass"),
            None => return Ok(None),
        },
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => {
            return Ok(None);
        }
        Err(e) => {
            return Err(TargetError::PasswordFile(format!(
                "cannot read the password file {}: {e}",
                path.display()
            )));
        }
    };
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        _ => "localhost".to_owned(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = config.get_user().unwrap_or_default().to_owned();
    let dbname = config.get_dbname().unwrap_or(&user).to_owned();
    let wanted = [host.as_str(), port.as_str(), dbname.as_str(), user.as_str()];
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = split_passfile_line(line);
        if fields.len() < 5 {
            continue;
        }
        let matches = fields[..4]
            .iter()
            .zip(wanted)
            .all(|(field, want)| field == "*" || field == want);
        if matches {
            return Ok(Some(Secret::new(fields[4..].join(":"))));
        }
    }
    Ok(None)
}

fn split_passfile_line(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(next), Some(field)) = (chars.next(), fields.last_mut()) {
                    field.push(next);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => {
                if let Some(field) = fields.last_mut() {
                    field.push(c);
                }
            }
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_in_the_uri_is_refused_without_being_shown() {
        for url in [
            "postgresql://callsync:hunter2@db.example.com/callsync",
            "postgresql://db.example.com/callsync?password=hunter2",
        ] {
            let err = PgTarget::parse(url, None).unwrap_err().to_string();
            assert!(err.contains("holds a password"), "{err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn socket_directory_sslmode_and_display() {
        let t = PgTarget::parse(
            "postgresql://callsync@/warehouse?host=/run/postgresql&sslmode=verify-full",
            None,
        )
        .unwrap();
        // A socket never speaks TLS.
        assert_eq!(t.ssl_mode(), SslMode::Disable);
        assert_eq!(
            t.display(),
            "postgresql://callsync@[/run/postgresql]:5432/warehouse"
        );
        let t = PgTarget::parse(
            "postgresql://bi@db.example.com:6543/dw?sslmode=verify-full&sslrootcert=/etc/ca.pem",
            Some(&Secret::new("s3cret")),
        )
        .unwrap();
        assert_eq!(t.ssl_mode(), SslMode::VerifyFull);
        assert_eq!(t.root_cert.as_deref(), Some(Path::new("/etc/ca.pem")));
        assert_eq!(t.display(), "postgresql://bi@db.example.com:6543/dw");
        assert!(!format!("{t:?}").contains("s3cret"));
        let err = PgTarget::parse("postgresql://h/d?sslmode=sometimes", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("sslmode `sometimes`"), "{err}");
        let err = PgTarget::parse("mysql://h/d", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("scheme is `mysql`"), "{err}");
    }

    #[test]
    fn the_password_file_is_read_as_libpq_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pgpass");
        std::fs::write(
            &file,
            "# comment\nother:5432:*:*:nope\ndb.example.com:5432:dw:bi:pa\\:ss:word\n*:*:*:*:fallback\n",
        )
        .unwrap();
        let url = format!(
            "postgresql://bi@db.example.com/dw?passfile={}",
            file.display()
        );
        let t = PgTarget::parse(&url, None).unwrap();
        assert_eq!(t.config.get_password(), Some(&b"pa:ss:word"[..]));
        let url = format!("postgresql://x@elsewhere/dw?passfile={}", file.display());
        let t = PgTarget::parse(&url, None).unwrap();
        assert_eq!(t.config.get_password(), Some(&b"fallback"[..]));
        // The configured password wins over the file.
        let url = format!(
            "postgresql://bi@db.example.com/dw?passfile={}",
            file.display()
        );
        let t = PgTarget::parse(&url, Some(&Secret::new("given"))).unwrap();
        assert_eq!(t.config.get_password(), Some(&b"given"[..]));
        let err = PgTarget::parse("postgresql://h/d?passfile=/nonexistent/pgpass", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot read the password file"), "{err}");
    }

    #[test]
    fn the_configured_target_names_its_key_and_the_kind_of_problem() {
        let configured = |url: &str| {
            PgTarget::configured(&PostgresConfig {
                url: url.to_owned(),
                password: None,
            })
            .unwrap_err()
        };
        for url in [
            "mysql://h/d",
            "postgresql://callsync:hunter2@h/d",
            "postgresql://h/d?sslmode=sometimes",
        ] {
            let err = configured(url);
            assert_eq!(err.kind(), ConfigErrorKind::BadUrl, "{url}: {err}");
            assert_eq!(err.key(), Some("warehouse.url"), "{url}");
        }
        let err = configured("postgresql://h/d?passfile=/nonexistent/pgpass");
        assert_eq!(err.kind(), ConfigErrorKind::Unreadable, "{err}");
        assert_eq!(err.key(), Some("warehouse.url"));
        assert!(
            err.to_string().starts_with(
                "config: warehouse.url: cannot read the password file /nonexistent/pgpass: "
            ),
            "{err}"
        );
    }
}

//! `PgTarget`: where the PostgreSQL warehouse is and how to reach it, from `warehouse.url`
//! in either of libpq's forms.
//!
//! `postgresql://[user@]host[:port]/dbname[?host=/socket/dir&sslmode=…&sslrootcert=…]`, or
//! `host=… port=… dbname=… user=… sslmode=…` (`config::pg_url` splits it as libpq does).
//! The URL never holds the password: one there, in any form tokio-postgres or libpq would
//! read (after a `/`, percent-encoded, `password=`), is refused before anything else, since
//! the configuration is not a secret's place. It comes from `warehouse.password_file` or
//! the systemd credential (the caller passes it), else `$PGPASSWORD` (as libpq: unless
//! empty), else libpq's password file (`passfile=` in the URL, `$PGPASSFILE`, or
//! `~/.pgpass`), else none (trust or peer authentication). `sslmode` keeps libpq's meaning:
//! `disable`; `allow`/`prefer` (TLS when the server offers it, unverified); `require`
//! (TLS, unverified — verified against `sslrootcert` when one is given, as libpq does);
//! `verify-ca` (the chain, against `sslrootcert`, or the system's roots); `verify-full`
//! (the chain and the host name). A Unix socket never uses TLS, as with libpq.
//! [`PgTarget::display`] is the only form that reaches logs and errors: no password, ever.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use tokio_postgres::config::{Host, SslMode as WireSslMode};

use crate::config::pg_url::{holds_password, key_value_pairs, key_value_text, percent_decoded};
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
    /// The URL itself: neither a PostgreSQL URI nor a connection string, an unknown
    /// `sslmode`, or what tokio-postgres refuses.
    #[error("{0}")]
    Uri(String),
    /// A password in the URL, in any form: never shown, and never used.
    #[error(
        "holds a password; remove it, and give the password in warehouse.password_file (or the systemd credential warehouse_password), in libpq's password file (passfile= in the URL, $PGPASSFILE, or ~/.pgpass), or in $PGPASSWORD"
    )]
    Password,
    /// libpq's password file that the URI or `$PGPASSFILE` names cannot be read.
    #[error("{0}")]
    PasswordFile(String),
    /// The `sslrootcert` file cannot be read.
    #[error("{0}")]
    RootCert(String),
}

#[derive(Clone)]
pub struct PgTarget {
    pub(super) config: tokio_postgres::Config,
    pub(super) ssl_mode: SslMode,
    /// `sslrootcert`: a PEM file of the CAs to trust; `None`: the system's roots.
    pub(super) root_cert: Option<PathBuf>,
    /// `warehouse.schema`: where callsync's tables live, every session's `search_path`
    /// (`session.rs`); a plain identifier (`config/validate.rs`), so it needs no quoting.
    schema: String,
    display: String,
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display)
    }
}

/// The parameters callsync reads itself (tokio-postgres does not know them, or knows fewer
/// of their values), and the rest of the URL for tokio-postgres.
#[derive(Debug, Default)]
struct Split {
    for_tokio: String,
    ssl_mode: Option<String>,
    root_cert: Option<String>,
    passfile: Option<String>,
}

impl Split {
    /// Keeps `key`'s value when it is one of callsync's; `false` otherwise.
    fn take(&mut self, key: &str, value: String) -> bool {
        let slot = match key {
            "sslmode" => &mut self.ssl_mode,
            "sslrootcert" => &mut self.root_cert,
            "passfile" => &mut self.passfile,
            _ => return false,
        };
        *slot = Some(value);
        true
    }
}

/// `url` in either of libpq's forms: `postgresql://…` (or `postgres://…`), or `key=value`
/// pairs; callsync's own parameters taken out, the rest left as written.
fn split(url: &str) -> Result<Split, TargetError> {
    let mut split = Split::default();
    if let Some(rest) = ["postgresql://", "postgres://"]
        .iter()
        .find_map(|scheme| url.strip_prefix(scheme))
    {
        let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
        // Each pair as written: decoding and encoding again would change what tokio-postgres
        // reads (`+` is no space to it).
        let kept: Vec<&str> = query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .filter(|pair| {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                !split.take(&percent_decoded(key), percent_decoded(value))
            })
            .collect();
        split.for_tokio = match kept.is_empty() {
            true => format!("postgresql://{location}"),
            false => format!("postgresql://{location}?{}", kept.join("&")),
        };
        return Ok(split);
    }
    if let Some((scheme, _)) = url.split_once("://") {
        return Err(TargetError::Uri(format!(
            "the URI's scheme is `{}`; write postgresql://USER@HOST/DBNAME",
            crate::untrusted::untrusted_text(scheme, 40)
        )));
    }
    if !url.contains('=') {
        return Err(TargetError::Uri(
            "is neither a PostgreSQL URI nor a connection string; write postgresql://USER@HOST/DBNAME (postgresql://USER@/DBNAME?host=/run/postgresql for a Unix socket), or host=HOST dbname=DBNAME user=USER".into(),
        ));
    }
    let mut kept = key_value_pairs(url).map_err(TargetError::Uri)?;
    kept.retain(|(key, value)| !split.take(key, value.clone()));
    split.for_tokio = key_value_text(&kept);
    Ok(split)
}

impl PgTarget {
    /// Parses `url`, a URI or a `key=value` connection string; `password` from the
    /// configuration's password file or credential, which wins over `$PGPASSWORD`, which wins
    /// over libpq's password file (as libpq orders them, the URL's own being refused).
    pub fn parse(url: &str, password: Option<&Secret>) -> Result<PgTarget, TargetError> {
        Self::parse_with(url, password, std::env::var_os("PGPASSWORD"))
    }

    /// [`Self::parse`] with `$PGPASSWORD`'s value given.
    fn parse_with(
        url: &str,
        password: Option<&Secret>,
        pgpassword: Option<std::ffi::OsString>,
    ) -> Result<PgTarget, TargetError> {
        // Before anything that could quote the URL.
        if holds_password(url) {
            return Err(TargetError::Password);
        }
        let split = split(url)?;
        let mut config = tokio_postgres::Config::from_str(&split.for_tokio).map_err(|e| {
            TargetError::Uri(format!(
                "{}; see libpq's connection strings",
                crate::error_chain(&e)
            ))
        })?;
        if config.get_password().is_some() {
            return Err(TargetError::Password);
        }
        config.application_name("callsync");
        let unix_only = config
            .get_hosts()
            .iter()
            .all(|h| matches!(h, Host::Unix(_)));
        // libpq's default is `prefer`; a Unix socket never speaks TLS.
        let ssl_mode = match (&split.ssl_mode, unix_only) {
            (_, true) => SslMode::Disable,
            (Some(mode), false) => parse_ssl_mode(mode)?,
            (None, false) => SslMode::Prefer,
        };
        config.ssl_mode(match ssl_mode {
            SslMode::Disable => WireSslMode::Disable,
            SslMode::Prefer => WireSslMode::Prefer,
            _ => WireSslMode::Require,
        });
        let root_cert = split
            .root_cert
            .filter(|root| root != "system")
            .map(PathBuf::from);
        let schema = crate::config::DEFAULT_SCHEMA.to_owned();
        let display = display(&config, &schema);
        let passfile = split.passfile.as_deref().map(Path::new);
        if let Some(found) = password_for(&config, password, pgpassword, passfile)? {
            config.password(found.expose());
        }
        Ok(PgTarget {
            config,
            ssl_mode,
            root_cert,
            schema,
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
        let target = PgTarget::parse(&config.url, password.as_ref())
            .and_then(PgTarget::with_readable_root_cert)
            .map_err(|err| {
                let kind = match err {
                    TargetError::Uri(_) | TargetError::Password => ConfigErrorKind::BadUrl,
                    TargetError::PasswordFile(_) | TargetError::RootCert(_) => {
                        ConfigErrorKind::Unreadable
                    }
                };
                ConfigError::new(kind, "warehouse.url", err.to_string())
            })?;
        Ok(target.with_schema(&config.schema))
    }

    /// The target, once its `sslrootcert` is known readable: a file it names that cannot
    /// be read is the configuration's mistake, found before any connection.
    fn with_readable_root_cert(self) -> Result<PgTarget, TargetError> {
        if let Some(path) = &self.root_cert
            && let Err(e) = std::fs::File::open(path)
        {
            return Err(TargetError::RootCert(format!(
                "cannot read sslrootcert {}: {e}; name a readable PEM file of the CAs to trust, or sslrootcert=system",
                path.display()
            )));
        }
        Ok(self)
    }

    /// `postgresql://user@host:port/dbname`, followed by ` (schema NAME)` for a schema other
    /// than `public`: what logs, errors, status and metrics show.
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
        target.display = display(&target.config, &target.schema);
        target
    }

    /// The same database, its tables in `schema` (a name `warehouse.schema` allows: the
    /// configuration checked it).
    pub fn with_schema(&self, schema: &str) -> PgTarget {
        let mut target = self.clone();
        schema.clone_into(&mut target.schema);
        target.display = display(&target.config, schema);
        target
    }

    /// The schema callsync's tables live in (`public` unless `warehouse.schema` says).
    pub fn schema(&self) -> &str {
        &self.schema
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

fn display(config: &tokio_postgres::Config, schema: &str) -> String {
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
    let database = format!(
        "postgresql://{user}{}/{}",
        hosts.join(","),
        config.get_dbname().unwrap_or_default()
    );
    // Two warehouses in one database tell themselves apart; the default says nothing.
    match schema {
        crate::config::DEFAULT_SCHEMA => database,
        schema => format!("{database} (schema {schema})"),
    }
}

/// The password to send: the configured one, else `$PGPASSWORD` (unless empty, as libpq
/// reads it), else the password file's for this connection; `None` for a server that asks
/// for none (trust, peer, certificates). Never logged.
fn password_for(
    config: &tokio_postgres::Config,
    configured: Option<&Secret>,
    pgpassword: Option<std::ffi::OsString>,
    passfile: Option<&Path>,
) -> Result<Option<Secret>, TargetError> {
    if let Some(secret) = configured {
        return Ok(Some(secret.clone()));
    }
    if let Some(env) = pgpassword.filter(|p| !p.is_empty()) {
        return Ok(Some(Secret::new(env.to_string_lossy().into_owned())));
    }
    passfile_password(config, passfile)
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
    fn a_password_in_the_url_is_refused_in_every_form_without_being_shown() {
        for url in [
            "postgresql://callsync:hunter2@db.example.com/callsync",
            "postgresql://db.example.com/callsync?password=hunter2",
            // tokio-postgres reads the user info up to the `@`, past the `/`.
            "postgresql://callsync:hun/ter2@db.example.com/callsync",
            "postgresql://callsync:%68unter2@db.example.com/callsync",
            "postgresql://db.example.com/callsync?pass%77ord=hunter2",
            "postgres://callsync:hunter2@db.example.com/callsync",
            "host=db.example.com dbname=callsync password=hunter2",
            "host=db.example.com password = 'hunter2' dbname=callsync",
            // Otherwise invalid too: the password is what is named.
            "postgresql://callsync:hunter2@db.example.com:port/callsync",
        ] {
            let err = PgTarget::parse(url, None).unwrap_err();
            assert!(matches!(err, TargetError::Password), "{url}: {err}");
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn a_connection_string_reads_as_its_uri_does() {
        let from_uri = PgTarget::parse(
            "postgresql://callsync@db.example.com:6543/dw?sslmode=verify-full&sslrootcert=/etc/ca.pem&options=-c%20statement_timeout%3D5s",
            None,
        )
        .unwrap();
        let from_pairs = PgTarget::parse(
            "host=db.example.com port=6543 dbname=dw user=callsync sslmode=verify-full sslrootcert=/etc/ca.pem options='-c statement_timeout=5s'",
            None,
        )
        .unwrap();
        for t in [&from_uri, &from_pairs] {
            assert_eq!(t.display(), "postgresql://callsync@db.example.com:6543/dw");
            assert_eq!(t.ssl_mode(), SslMode::VerifyFull);
            assert_eq!(t.root_cert.as_deref(), Some(Path::new("/etc/ca.pem")));
            // Passed to tokio-postgres as written: `%20` a space, not a `+`.
            assert_eq!(t.config.get_options(), Some("-c statement_timeout=5s"));
        }
        for (url, says) in [
            ("host=h dbname", "`dbname` is not a key=value pair"),
            ("host=h bogus=1", "unknown option `bogus`"),
            (
                "db.example.com/dw",
                "neither a PostgreSQL URI nor a connection string",
            ),
        ] {
            let err = PgTarget::parse(url, None).unwrap_err().to_string();
            assert!(err.contains(says), "{url}: {err}");
        }
    }

    #[test]
    fn pgpassword_comes_after_the_configured_password_and_before_the_password_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pgpass");
        std::fs::write(&file, "*:*:*:*:from-file\n").unwrap();
        let url = format!(
            "postgresql://bi@db.example.com/dw?passfile={}",
            file.display()
        );
        let password = |configured: Option<&str>, env: Option<&str>| {
            let configured = configured.map(Secret::new);
            let t = PgTarget::parse_with(&url, configured.as_ref(), env.map(Into::into)).unwrap();
            t.config
                .get_password()
                .map(|p| String::from_utf8_lossy(p).into_owned())
        };
        assert_eq!(password(None, None).as_deref(), Some("from-file"));
        assert_eq!(
            password(None, Some("from-env")).as_deref(),
            Some("from-env")
        );
        // Set but empty, as libpq reads it: unset.
        assert_eq!(password(None, Some("")).as_deref(), Some("from-file"));
        assert_eq!(
            password(Some("configured"), Some("from-env")).as_deref(),
            Some("configured")
        );
        let t = PgTarget::parse_with(&url, None, Some("from-env".into())).unwrap();
        assert!(!format!("{t:?}").contains("from-env"));
        assert!(!t.display().contains("from-env"));
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
                schema: crate::config::DEFAULT_SCHEMA.to_owned(),
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
        let err = configured("postgresql://h/d?sslmode=verify-ca&sslrootcert=/nonexistent/ca.pem");
        assert_eq!(err.kind(), ConfigErrorKind::Unreadable, "{err}");
        assert!(
            err.to_string().starts_with(
                "config: warehouse.url: cannot read sslrootcert /nonexistent/ca.pem: "
            ),
            "{err}"
        );
    }
}

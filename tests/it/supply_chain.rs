//! Supply chain: `backoff` (unmaintained) and `tokio-cron-scheduler`, which the user asked
//! for, are each used by one module of callsync only, so replacing one is a change to one
//! file; and every exception in `deny.toml` (checked by `cargo deny` in `.ci/supply-chain`)
//! says why it is there; and an older `rand`/`getrandom` stays in Cargo.lock only for the
//! crates that need it.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// The files of `src/` that use crate `name` (as Rust spells it) in code: a path through it
/// (`name::…`) outside a string.
fn users_of(name: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut users: Vec<String> = rust_files(&root.join("src"))
        .into_iter()
        .filter(|file| {
            let text = std::fs::read_to_string(file).expect("a source file");
            text.lines().any(|line| {
                let code = line.split("//").next().unwrap_or_default();
                code.match_indices(&format!("{name}::")).any(|(at, _)| {
                    let before = &code[..at];
                    // Not inside a string literal, not the tail of a longer name.
                    before.matches('"').count() % 2 == 0
                        && !before.ends_with(|c: char| c.is_alphanumeric() || c == '_')
                })
            })
        })
        .map(|file| {
            file.strip_prefix(root)
                .expect("under the root")
                .display()
                .to_string()
        })
        .collect();
    users.sort();
    users
}

#[test]
fn the_crates_the_user_asked_for_stay_in_one_module_each() {
    for (name, module) in [
        ("backoff", "src/api/retry.rs"),
        ("tokio_cron_scheduler", "src/daemon/scheduler.rs"),
    ] {
        let users = users_of(name);
        assert_eq!(
            users.len(),
            1,
            "{name} is used by {users:?}: keep it in one module (deny.toml says why it stays)"
        );
        // Where it is now; a move is fine, a second user is not.
        if users[0] != module {
            eprintln!("{name} moved from {module} to {}", users[0]);
        }
    }
    assert!(users_of("no_such_crate").is_empty());
}

#[test]
fn every_exception_in_deny_toml_says_why() {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deny.toml"))
        .expect("deny.toml");
    // Each exception is one inline table on its line: an ignored advisory (`{ id = … }`), a
    // banned or confined crate, or a licence allowed for one crate (`{ crate = … }`).
    let lines: Vec<&str> = text.lines().collect();
    let mut exceptions = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let entry = line.trim();
        if !(entry.starts_with("{ id = ") || entry.starts_with("{ crate = ")) {
            continue;
        }
        let name = entry.split('"').nth(1).unwrap_or("?").to_owned();
        // A reason in the entry, or a comment just above it.
        let reason = entry
            .split("reason = \"")
            .nth(1)
            .is_some_and(|r| r.trim_end_matches(['"', ' ', '}', ',']).len() > 10);
        let commented = i > 0 && lines[i - 1].trim().starts_with('#');
        assert!(reason || commented, "deny.toml: {name} says not why");
        exceptions.push(name);
    }
    for name in [
        "RUSTSEC-2025-0012",
        "backoff",
        "tokio-cron-scheduler",
        "openssl-sys",
    ] {
        assert!(
            exceptions.iter().any(|e| e == name),
            "deny.toml lacks {name}: {exceptions:?}"
        );
    }
}

/// One version each of `rand`, `rand_core` and `getrandom` is callsync's own; an older one
/// stays in Cargo.lock only for a crate that asks for it and has no release that does not:
/// `backoff` 0.4 (its last release, kept at the user's request) pulls rand 0.8, and `ring`
/// 0.17 (rustls' crypto) getrandom 0.2. A version that lingers for any other crate fails.
/// `(name, version, dependencies as Cargo.lock spells them)` of every package in Cargo.lock.
fn locked_packages() -> Vec<(String, String, Vec<String>)> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock"))
        .expect("Cargo.lock");
    let quoted = |line: &str| line.split('"').nth(1).unwrap_or_default().to_owned();
    let mut packages = Vec::new();
    for block in text.split("[[package]]").skip(1) {
        let (mut name, mut version, mut deps) = (String::new(), String::new(), Vec::new());
        let mut in_deps = false;
        for line in block.lines().map(str::trim) {
            match line {
                l if l.starts_with("name = ") => name = quoted(l),
                l if l.starts_with("version = ") => version = quoted(l),
                "dependencies = [" => in_deps = true,
                "]" => in_deps = false,
                l if in_deps => deps.push(quoted(l)),
                _ => {}
            }
        }
        packages.push((name, version, deps));
    }
    packages
}

#[test]
fn older_random_crates_stay_only_for_the_crates_that_need_them() {
    let packages = locked_packages();
    assert!(
        packages.len() > 100,
        "Cargo.lock read: {} packages",
        packages.len()
    );
    // The crates allowed to hold an older version up, and those older versions' own family.
    let allowed = ["backoff", "ring", "rand", "rand_core", "rand_chacha"];
    for name in ["rand", "rand_core", "getrandom"] {
        let mut versions: Vec<&String> = packages
            .iter()
            .filter(|(n, _, _)| n == name)
            .map(|(_, v, _)| v)
            .collect();
        versions.sort_by_key(|v| {
            v.split('.')
                .map(|n| n.parse::<u64>().unwrap_or(0))
                .collect::<Vec<_>>()
        });
        assert!(versions.len() <= 2, "{name}: {versions:?} in Cargo.lock");
        let Some((_newest, older)) = versions.split_last() else {
            continue;
        };
        for version in older {
            let spelled = format!("{name} {version}");
            let holders: Vec<&String> = packages
                .iter()
                .filter(|(_, _, deps)| deps.contains(&spelled))
                .map(|(n, _, _)| n)
                .collect();
            assert!(
                !holders.is_empty() && holders.iter().all(|h| allowed.contains(&h.as_str())),
                "{spelled} is held in Cargo.lock by {holders:?}: move them to the newest {name}"
            );
        }
    }
}

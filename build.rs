//! The revision `callsync_build_info{revision}` names: `$BUILD_REVISION` when set (a packager
//! building outside git), else `git rev-parse --short=12 HEAD`, else "unknown". Given to the
//! crate as `BUILD_GIT_REVISION`: no `CALLSYNC_` name, which cargo also sets when it runs the
//! tests' binaries and the configuration would read as a key.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=BUILD_REVISION");
    let revision = std::env::var("BUILD_REVISION")
        .ok()
        .filter(|r| !r.trim().is_empty())
        .or_else(git_revision)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=BUILD_GIT_REVISION={}", revision.trim());
}

/// HEAD's abbreviated commit; asks cargo to build again when HEAD or its branch moves.
fn git_revision() -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
            .filter(|s| !s.is_empty())
    };
    let revision = git(&["rev-parse", "--short=12", "HEAD"])?;
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    Some(revision)
}

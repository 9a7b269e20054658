//! The revision `callsync_build_info{revision}` names: `$BUILD_REVISION` when set (a packager
//! building outside git), else `git rev-parse --short=12 HEAD`, else "unknown". Given to the
//! crate as `BUILD_GIT_REVISION`: no `CALLSYNC_` name, which cargo also sets when it runs the
//! tests' binaries and the configuration would read as a key.

use std::path::{Path, PathBuf};
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
///
/// Only paths that exist are watched: cargo takes a missing one as changed, and would build the
/// crate again on every command (a fresh clone has no `packed-refs`). A branch without a loose
/// file (packed) is watched through its folder, where its next commit writes one.
fn git_revision() -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
            .filter(|s| !s.is_empty())
    };
    let revision = git(&["rev-parse", "--short=12", "HEAD"])?;
    let git_path = |name: &str| git(&["rev-parse", "--git-path", name]).map(PathBuf::from);
    let mut watched: Vec<PathBuf> = ["HEAD", "packed-refs"]
        .into_iter()
        .filter_map(git_path)
        .collect();
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]).and_then(|b| git_path(&b)) {
        if branch.exists() {
            watched.push(branch);
        } else {
            watched.extend(branch.parent().map(Path::to_path_buf));
        }
    }
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    Some(revision)
}

//! Signals: SIGINT and SIGTERM cancel (a second one exits at once with 130); SIGHUP is logged
//! and ignored, since the configuration is not reloaded.

use super::progress;
use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;

/// Cancelled on the first SIGINT or SIGTERM; a second one exits at once (the checkpoint is
/// committed with each page, so that is safe).
pub(super) fn cancel_on_signal() -> Result<CancellationToken> {
    // Registered now, not in the task: a signal that arrives before the task first runs
    // (right after a banner is printed, say) must not meet the default action and kill us.
    let mut signals = ShutdownSignals::install().context("cannot listen for SIGTERM and SIGINT")?;
    let cancel = CancellationToken::new();
    let token = cancel.clone();
    tokio::spawn(async move {
        signals.recv().await;
        // A stop asked for (systemctl stop, a restart) is no warning: INFO, so restarts do not
        // fill `journalctl -p warning`. A person at a terminal who pressed Ctrl-C is answered
        // at any log level (the default shows warnings only). A second signal, which cuts a
        // page short, is a warning.
        const STOPPING: &str =
            "shutting down: finishing the pages being written (signal again to exit now)";
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            tracing::warn!("{STOPPING}");
        } else {
            tracing::info!("{STOPPING}");
        }
        token.cancel();
        signals.recv().await;
        tracing::warn!("second signal: exiting now");
        progress::clear_and_exit(130);
    });
    Ok(cancel)
}

/// The configuration is read once: a reload would have to re-plan running passes, and a
/// restart is already safe at any instant. Without this handler SIGHUP would kill the
/// daemon mid-page, so it is caught and answered with the way to apply a new configuration.
pub(super) fn refuse_reload_on_sighup() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut hangup) = signal(SignalKind::hangup()) {
            tokio::spawn(async move {
                while hangup.recv().await.is_some() {
                    tracing::warn!(
                        "SIGHUP ignored: callsync does not reload its configuration; \
                         restart it to apply changes (systemctl restart callsync; safe at any time)"
                    );
                }
            });
        }
    }
}

/// SIGTERM and SIGINT, caught from the moment this value is made.
pub(super) struct ShutdownSignals {
    #[cfg(unix)]
    pub(super) terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    pub(super) interrupt: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    pub(super) fn install() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(ShutdownSignals {
                terminate: signal(SignalKind::terminate())?,
                interrupt: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(ShutdownSignals {})
    }

    pub(super) async fn recv(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}

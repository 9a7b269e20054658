//! How a long command shows it is moving: a bar on a terminal, a log line now and then
//! otherwise. The bar is drawn on stderr only, so stdout (`--json`) is never touched, and it
//! never stays on the screen half drawn: log lines go above it while it runs, and it is
//! finished, or cleared, however the command ends.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use crate::sync::{PassProgress, PassReport, PassResult};
use crate::telemetry;

/// A progress bar on a terminal: calls read of the service's total, and pages.
pub(crate) struct ProgressBar(pub(crate) indicatif::ProgressBar);

impl ProgressBar {
    /// A bar on stderr when it is a terminal; `None` otherwise.
    pub(crate) fn for_terminal() -> Option<Self> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(0),
            indicatif::ProgressDrawTarget::stderr(),
        );
        let style = indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} calls ({per_sec}) {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        bar.set_style(style);
        bar.enable_steady_tick(Duration::from_millis(200));
        telemetry::show_above(&bar);
        Some(ProgressBar(bar))
    }

    /// Replaces the bar with the pass's last line: pages and how it ended. A pass that did
    /// not complete keeps the count it reached, not a full bar.
    pub(crate) fn finish(self, report: &PassReport) {
        telemetry::hide_progress();
        let pages = report.stats.pages;
        // The report's count: the bar hears of a page only once it is handed on.
        let seen = report.stats.calls_seen;
        if self.0.length().is_none_or(|length| length < seen) {
            self.0.set_length(seen);
        }
        self.0.set_position(seen);
        match report.result {
            PassResult::Completed => self
                .0
                .finish_with_message(format!("{pages} pages, {}", report.result)),
            _ => self.0.abandon_with_message(format!(
                "{pages} pages, {}; run it again to finish",
                report.result
            )),
        }
    }
}

impl Drop for ProgressBar {
    /// A bar not finished (an error returned early, a panic) is cleared, not left behind.
    fn drop(&mut self) {
        telemetry::hide_progress();
        if !self.0.is_finished() {
            self.0.finish_and_clear();
        }
    }
}

/// The exit that does not wait (a second Ctrl-C): clears a bar being shown first, so the
/// shell's prompt does not come back after half a bar.
pub(crate) fn clear_and_exit(code: i32) -> ! {
    if let Some(bar) = telemetry::hide_progress() {
        bar.finish_and_clear();
    }
    std::process::exit(code)
}

/// Without a terminal (systemd, cron, a pipe): a log line now and then, so a long backfill
/// shows it is moving.
pub(crate) struct ProgressLog {
    every: Duration,
    last: std::sync::Mutex<Instant>,
}

impl ProgressLog {
    pub(crate) fn every(every: Duration) -> Self {
        ProgressLog {
            every,
            last: std::sync::Mutex::new(Instant::now()),
        }
    }
}

impl PassProgress for ProgressLog {
    fn page(&self, pages: u64, calls_seen: u64, total: Option<u64>) {
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        if last.elapsed() >= self.every {
            *last = Instant::now();
            tracing::info!(pages, calls_seen, total, "progress");
        }
    }
}

impl PassProgress for ProgressBar {
    fn page(&self, pages: u64, calls_seen: u64, total: Option<u64>) {
        if let Some(total) = total {
            self.0.set_length(calls_seen.max(total));
        }
        self.0.set_position(calls_seen);
        self.0.set_message(format!("{pages} pages"));
    }
}

//! How a long command shows it is moving: a bar on a terminal, a log line now and then
//! otherwise. The bar is drawn on stderr only, so stdout (`--json`) is never touched, and it
//! never stays on the screen half drawn: log lines go above it while it runs, and it is
//! finished, or cleared, however the command ends.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::sync::{PassProgress, PassReport, PassResult};
use crate::telemetry;
use crate::upload::UploadProgress;

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

impl UploadProgress for ProgressBar {
    fn chunk_done(&self, rows_done: u64, rows: u64) {
        self.0.set_length(rows);
        self.0.set_position(rows_done);
    }

    fn waiting(&self, what: Option<&str>) {
        self.0.set_message(what.unwrap_or_default().to_owned());
    }
}

pub(super) struct NoProgress;

impl UploadProgress for NoProgress {
    fn chunk_done(&self, _: u64, _: u64) {}
    fn waiting(&self, _: Option<&str>) {}
}

/// Without a terminal (systemd, cron, a pipe): a line every `every` with the rows done and
/// what the upload waits for, whether a chunk finished meanwhile or not, so that a slow
/// service shows as slow, not as a hang.
pub(super) struct UploadLog {
    state: Arc<LogState>,
    ticker: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct LogState {
    rows_done: AtomicU64,
    /// What the upload waits for, and since when: each line says for how long, so that a
    /// long wait reads as progress, not as one line repeated.
    waiting: Mutex<Option<(String, tokio::time::Instant)>>,
}

impl UploadLog {
    pub(super) fn start(
        every: Duration,
        rows: u64,
        emit: impl Fn(u64, u64, Option<&str>) + Send + 'static,
    ) -> Self {
        let state = Arc::new(LogState::default());
        let shared = Arc::clone(&state);
        let ticker = tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                ticks.tick().await;
                let waiting = shared.waiting.lock().ok().and_then(|w| {
                    w.as_ref().map(|(what, since)| {
                        format!("{what} (for {} s now)", since.elapsed().as_secs())
                    })
                });
                emit(
                    shared.rows_done.load(Ordering::Relaxed),
                    rows,
                    waiting.as_deref(),
                );
            }
        });
        UploadLog { state, ticker }
    }
}

impl Drop for UploadLog {
    fn drop(&mut self) {
        self.ticker.abort();
    }
}

impl UploadProgress for UploadLog {
    fn chunk_done(&self, rows_done: u64, _rows: u64) {
        self.state.rows_done.store(rows_done, Ordering::Relaxed);
    }

    fn waiting(&self, what: Option<&str>) {
        if let Ok(mut waiting) = self.state.waiting.lock() {
            *waiting = match (what, waiting.take()) {
                // The same wait, told again (a count going up): it started when it started.
                (Some(what), Some((_, since))) => Some((what.to_owned(), since)),
                (Some(what), None) => Some((what.to_owned(), tokio::time::Instant::now())),
                (None, _) => None,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn without_a_terminal_progress_is_logged_every_period_even_while_a_chunk_is_slow() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&lines);
        let log = UploadLog::start(Duration::from_secs(10), 3_000, move |done, rows, what| {
            seen.lock()
                .unwrap()
                .push(format!("{done}/{rows} {}", what.unwrap_or("-")));
        });
        log.chunk_done(1_000, 3_000);
        // The second chunk takes 25 s: no chunk ends, yet two lines are written.
        tokio::time::sleep(Duration::from_secs(15)).await;
        log.waiting(Some("looking for lines 1002–2001"));
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            *lines.lock().unwrap(),
            [
                "1000/3000 -",
                "1000/3000 looking for lines 1002–2001 (for 5 s now)"
            ]
        );
        // A long wait: each line says how long, none repeats the one before.
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            lines.lock().unwrap()[2],
            "1000/3000 looking for lines 1002–2001 (for 15 s now)"
        );
        log.waiting(None);
        drop(log);
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(
            lines.lock().unwrap().len(),
            3,
            "nothing after the upload ends"
        );
    }
}

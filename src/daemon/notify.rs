//! systemd notifications (READY, STATUS, WATCHDOG, STOPPING); silent outside systemd.

use std::time::Duration;

use sd_notify::NotifyState;

pub fn ready() {
    send(&[NotifyState::Ready]);
}

pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

pub fn status(text: &str) {
    send(&[NotifyState::Status(text)]);
}

pub fn watchdog() {
    send(&[NotifyState::Watchdog]);
}

/// The interval systemd expects watchdog pings at (`WatchdogSec=`), when enabled.
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled()
}

fn send(states: &[NotifyState<'_>]) {
    // Outside systemd this is a no-op; inside, a failure is worth a line but never fatal.
    if let Err(err) = sd_notify::notify(states) {
        tracing::warn!(error = %err, "cannot notify systemd");
    }
}

//! The simulator's one way to lock its mutexes.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex even if a panicking test thread poisoned it: the data stays usable.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

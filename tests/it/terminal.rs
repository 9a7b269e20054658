//! The binary with its stderr on a terminal (a pseudo-terminal read back through a terminal
//! emulator, `vt100`): colours unless `NO_COLOR`, and a backfill's progress bar, which log
//! lines pass above and which never stays on the screen half drawn.

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use callsync::simulator::{FaultPlan, SimulatorOptions};
use serde_json::Value;

use crate::harness::TestEnv;

const ROWS: u16 = 300;
const COLS: u16 = 2000;

/// A pseudo-terminal of `ROWS` × `COLS`: the end a program writes to, and ours.
fn open_pty() -> (OwnedFd, OwnedFd) {
    let (mut master, mut slave) = (-1, -1);
    let size = libc::winsize {
        ws_row: ROWS,
        ws_col: COLS,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two descriptors into the integers given; the name and termios
    // may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    for fd in [master, slave] {
        // SAFETY: fcntl on descriptors we own. Close-on-exec, so that children of other tests
        // do not keep the terminal open; our end does not block.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
    // SAFETY: as above.
    unsafe {
        let flags = libc::fcntl(master, libc::F_GETFL);
        libc::fcntl(master, libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    // SAFETY: openpty succeeded, so both are open descriptors that nothing else owns.
    unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) }
}

/// What a run on the terminal left: its exit, stdout, and the screen as rows of text.
struct OnTerminal {
    status: ExitStatus,
    stdout: String,
    /// Everything the terminal received, escape codes included.
    bytes: Vec<u8>,
    /// The screen's rows, trailing blanks and blank rows left out.
    rows: Vec<String>,
}

/// Runs `callsync args` with stderr on a terminal and stdout a pipe; `react` sees what the
/// terminal has received so far (and the pid) every few milliseconds until the process ends.
fn run_on_terminal(
    args: &[&str],
    vars: &[(&str, &str)],
    mut react: impl FnMut(&[u8], u32),
) -> OnTerminal {
    let (master, slave) = open_pty();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_callsync"));
    command
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .env_remove("CREDENTIALS_DIRECTORY")
        .envs(vars.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(slave));
    let mut child = command.spawn().expect("callsync starts");
    // The child has the terminal now; ours would keep it open.
    drop(command);
    let mut stdout = child.stdout.take().expect("stdout");
    let out_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let mut terminal = std::fs::File::from(master);
    let mut bytes = Vec::new();
    let drain = |terminal: &mut std::fs::File, bytes: &mut Vec<u8>| {
        let mut chunk = [0u8; 8192];
        loop {
            match terminal.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            }
        }
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        drain(&mut terminal, &mut bytes);
        if let Some(status) = child.try_wait().expect("wait") {
            // Everything it wrote is in the terminal's buffer by now.
            drain(&mut terminal, &mut bytes);
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "callsync did not end; the terminal shows:\n{}",
                String::from_utf8_lossy(&bytes)
            );
        }
        react(&bytes, child.id());
        // Polling interval under the patience above.
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut screen = vt100::Parser::new(
        std::num::NonZeroU16::new(ROWS).unwrap(),
        std::num::NonZeroU16::new(COLS).unwrap(),
        0,
    );
    screen.process(&bytes);
    let rows = screen
        .screen()
        .rows(0, COLS)
        .map(|row| row.trim_end().to_owned())
        .filter(|row| !row.is_empty())
        .collect();
    OnTerminal {
        status,
        stdout: out_reader.join().expect("stdout read"),
        bytes,
        rows,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_coloured_on_a_terminal_unless_no_color() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 10,
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("");
    let c = config.display().to_string();
    let run = |vars: Vec<(&'static str, &'static str)>| {
        let c = c.clone();
        tokio::task::spawn_blocking(move || {
            run_on_terminal(&["--config", &c, "-v", "sync"], &vars, |_, _| {})
        })
    };
    for (vars, coloured) in [
        (vec![], true),
        (vec![("NO_COLOR", "")], true),
        (vec![("NO_COLOR", "1")], false),
    ] {
        let shown = run(vars.clone()).await.unwrap();
        assert!(shown.status.success(), "{:?}", shown.rows);
        let text = String::from_utf8_lossy(&shown.bytes);
        assert!(text.contains("DEBUG"), "{vars:?}: {text}");
        assert_eq!(text.contains('\x1b'), coloured, "{vars:?}: {text:?}");
    }
}

/// A backfill slow enough for the bar to be drawn many times, with retries logged meanwhile.
async fn slow_service(slow: Duration, error_5xx_rate: f64) -> (TestEnv, String) {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 300,
        faults: FaultPlan {
            slow_rate: 1.0,
            slow_delay: slow,
            error_5xx_rate,
            ..FaultPlan::default()
        },
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("page_size = 10\n");
    let c = config.display().to_string();
    (env, c)
}

/// The rows that show the bar: spinner, elapsed time, bar, `N/M calls (rate)`.
fn bar_rows(rows: &[String]) -> Vec<&String> {
    rows.iter().filter(|row| row.contains(" calls (")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_lines_pass_above_the_progress_bar_which_ends_as_one_line() {
    let (env, c) = slow_service(Duration::from_millis(60), 0.2).await;
    let s = env.schedules()[0].to_string();
    let shown = tokio::task::spawn_blocking(move || {
        run_on_terminal(
            &["--config", &c, "backfill", "--schedule", &s, "--json"],
            // Retries are logged at INFO (the configuration says `warn`).
            &[("CALLSYNC_LOG__LEVEL", "info")],
            |_, _| {},
        )
    })
    .await
    .unwrap();
    assert!(shown.status.success(), "{:#?}", shown.rows);
    let line: Value = serde_json::from_str(shown.stdout.trim_end()).expect("one JSON line");
    assert_eq!(shown.stdout.lines().count(), 1, "{}", shown.stdout);
    assert_eq!(line["outcome"], "completed");
    assert!(
        !shown.stdout.contains('\x1b'),
        "the bar never reaches stdout"
    );
    let retries: Vec<&String> = shown
        .rows
        .iter()
        .filter(|row| row.contains("request failed; retrying"))
        .collect();
    assert!(!retries.is_empty(), "{:#?}", shown.rows);
    for row in retries {
        // A whole line of its own, starting with its timestamp: not after half a bar.
        assert!(
            row.starts_with("20") && !row.contains(" calls ("),
            "{:#?}",
            shown.rows
        );
    }
    let bars = bar_rows(&shown.rows);
    assert_eq!(bars.len(), 1, "one bar, no stale copies: {:#?}", shown.rows);
    assert_eq!(Some(bars[0]), shown.rows.last(), "{:#?}", shown.rows);
    let seen = &line["calls_seen"];
    assert!(
        bars[0].contains(&format!("{seen}/{seen} calls")),
        "{:#?}",
        shown.rows
    );
    assert!(bars[0].ends_with(" pages, completed"), "{:#?}", shown.rows);
    env.assert_matches_truth(&env.schedules());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_leaves_the_bar_finished_below_the_shutdown_line() {
    let (env, c) = slow_service(Duration::from_millis(150), 0.0).await;
    let s = env.schedules()[0].to_string();
    let mut interrupted = false;
    let shown = tokio::task::spawn_blocking(move || {
        run_on_terminal(
            &["--config", &c, "backfill", "--schedule", &s, "--json"],
            &[],
            |bytes, pid| {
                // Once the bar shows a few pages: Ctrl-C.
                if !interrupted && String::from_utf8_lossy(bytes).contains(" 3 pages") {
                    interrupted = true;
                    // SAFETY: a signal to our own child, which has not been waited for.
                    unsafe {
                        libc::kill(pid as libc::pid_t, libc::SIGINT);
                    }
                }
            },
        )
    })
    .await
    .unwrap();
    assert_eq!(shown.status.code(), Some(1), "{:#?}", shown.rows);
    let line: Value = serde_json::from_str(shown.stdout.trim_end()).expect("one JSON line");
    assert_eq!(line["outcome"], "interrupted");
    let shutdown = shown
        .rows
        .iter()
        .position(|row| row.contains("shutting down"))
        .unwrap_or_else(|| panic!("{:#?}", shown.rows));
    assert!(shown.rows[shutdown].starts_with("20"), "{:#?}", shown.rows);
    let bars = bar_rows(&shown.rows);
    assert_eq!(bars.len(), 1, "one bar, no stale copies: {:#?}", shown.rows);
    assert_eq!(Some(bars[0]), shown.rows.last(), "{:#?}", shown.rows);
    assert!(
        bars[0].ends_with("pages, interrupted by shutdown; run it again to finish"),
        "{:#?}",
        shown.rows
    );
    // Where it got to, not a full bar.
    let seen = &line["calls_seen"];
    assert!(bars[0].contains(&format!(" {seen}/")), "{:#?}", shown.rows);
    assert!(bars[0].contains('░'), "{:#?}", shown.rows);
}

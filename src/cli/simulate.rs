//! `callsync simulate`: the in-process simulator served on a port, with its arguments.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, ValueEnum};

use super::output::print_out;
use super::signals::cancel_on_signal;
use crate::simulator::{
    DialerOptions, FaultPlan, Precision, Simulator, SimulatorOptions, TieOrder,
};

mod lie_arg;

#[derive(Debug, Args)]
pub(super) struct SimulateArgs {
    /// Address to listen on (loopback only is sensible: it has no real security)
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(super) listen: SocketAddr,
    /// Number of schedules to create
    #[arg(long, default_value_t = 3)]
    pub(super) schedules: usize,
    /// Calls per schedule to seed
    #[arg(long, default_value_t = 200)]
    pub(super) calls: usize,
    /// Precision of the service's timestamps
    #[arg(long, value_enum, default_value_t = PrecisionArg::Micros)]
    pub(super) precision: PrecisionArg,
    /// Work the calls over time: attempts, outcomes, notifications, retries after each
    /// schedule's intervals, new calls now and then
    #[arg(long)]
    pub(super) dialer: bool,
    /// Real seconds per second of the dialer's time (ringing, talk, retry intervals, new
    /// calls): 1 is real time, 0.01 runs 100 times faster
    #[arg(long, value_name = "FACTOR", default_value_t = 1.0, value_parser = parse_time_scale)]
    pub(super) time_scale: f64,
    /// Seed for the generated data
    #[arg(long, default_value_t = 1)]
    pub(super) seed: u64,
    /// List items omit their attempts' outcomes and variables (a summary list): a client
    /// must fetch each changed call's detail
    #[arg(long)]
    pub(super) summary_list: bool,
    /// Lifetime of the tokens /oauth/token issues, in seconds (the static token never
    /// expires)
    #[arg(long, value_name = "SECS", default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) token_lifetime: u64,
    /// A change becomes visible this many milliseconds after the instant it is stamped with
    /// (a late commit)
    #[arg(long, value_name = "MS")]
    pub(super) late_commit_ms: Option<u64>,
    /// The order of calls sharing an updated_at in an updated_after list, which the spec
    /// leaves open: by uid (stable), drawn anew for every request (shuffled), or by each
    /// request's LIMIT, as a top-N sort on updated_at alone (top-n)
    #[arg(long, value_enum, default_value_t = TieOrderArg::Stable)]
    pub(super) tie_order: TieOrderArg,
    /// Seed the calls in bulk tie groups of this many calls, each sharing one updated_at on
    /// a whole second (as bulk uploads at second precision are); 0 for none
    #[arg(long, value_name = "CALLS", default_value_t = 0)]
    pub(super) tie_group: usize,
    /// With --dialer: also change calls' children (an outcome, a delivered notification)
    /// without bumping the call's updated_at, as the service may
    #[arg(long, requires = "dialer")]
    pub(super) child_changes_without_bump: bool,
    /// Share of API requests answered 500, 502 (a proxy's HTML page) or 503, in turn (0 to 1)
    #[arg(long, value_name = "RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub(super) fail_rate: f64,
    /// Share of API requests answered 429 with Retry-After: --retry-after (0 to 1)
    #[arg(long = "429-rate", value_name = "RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub(super) too_many_rate: f64,
    /// The Retry-After of the 429s of --429-rate, in seconds
    #[arg(long, value_name = "SECS", default_value_t = 1)]
    pub(super) retry_after: u64,
    /// A quota, as a real service has: requests beyond this many a second (a second's burst)
    /// are answered 429 without Retry-After; 0 for none
    #[arg(long, value_name = "REQ_PER_SEC", default_value_t = 0)]
    pub(super) rate_limit: u32,
    /// Share of API requests answered correctly, but only after --slow-ms (0 to 1)
    #[arg(long, value_name = "RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub(super) slow_rate: f64,
    /// How late the answers of --slow-rate come, in milliseconds
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub(super) slow_ms: u64,
    /// Share of API responses whose connection closes half way through the body (0 to 1)
    #[arg(long, value_name = "RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub(super) truncate_rate: f64,
    /// The Date header runs this many seconds off the clock that stamps the calls (negative:
    /// behind it), as a front with a wrong clock sends it
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub(super) date_skew_secs: i64,
    /// Share of calls served with half a surrogate pair (a lone \ud83d, as a JavaScript
    /// service writes a string cut mid-emoji) in their first name and a custom parameter; the
    /// same calls on every request (0 to 1)
    #[arg(long, value_name = "RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub(super) lone_surrogate_rate: f64,
    /// What the first schedule's list pages say wrongly about their first call:
    /// stamp-ahead=SECS (stamped SECS after the service's clock, listed last; 0: later than
    /// every call), foreign-uid (a call of the second schedule), uid-twice (the second call
    /// carries the first's uid), mistyped=FIELD:JSON (e.g. is_test_call:"yes")
    #[arg(long, value_name = "LIE", value_parser = lie_arg::parse_lie)]
    pub(super) lie: Option<lie_arg::LieArg>,
}

impl SimulateArgs {
    pub(super) fn options(&self) -> SimulatorOptions {
        SimulatorOptions {
            schedules: self.schedules,
            calls_per_schedule: self.calls,
            precision: match self.precision {
                PrecisionArg::Seconds => Precision::Seconds,
                PrecisionArg::Millis => Precision::Millis,
                PrecisionArg::Micros => Precision::Micros,
            },
            seed: self.seed,
            tie_group: self.tie_group,
            summary_list: self.summary_list,
            token_lifetime: Duration::from_secs(self.token_lifetime),
            dialer: self.dialer.then(|| DialerOptions {
                child_changes_without_bump: self.child_changes_without_bump,
                ..DialerOptions::endless(self.time_scale)
            }),
            late_commit: self.late_commit_ms.map(Duration::from_millis),
            tie_order: match self.tie_order {
                TieOrderArg::Stable => TieOrder::Stable,
                TieOrderArg::Shuffled => TieOrder::Shuffled,
                TieOrderArg::TopN => TieOrder::TopN,
            },
            faults: FaultPlan {
                error_5xx_rate: self.fail_rate,
                rate_429: self.too_many_rate,
                retry_after_secs: self.retry_after,
                slow_rate: self.slow_rate,
                slow_delay: Duration::from_millis(self.slow_ms),
                truncate_rate: self.truncate_rate,
                quota_per_second: self.rate_limit,
                date_skew_secs: self.date_skew_secs,
                lone_surrogate_rate: self.lone_surrogate_rate,
                ..FaultPlan::default()
            },
            ..SimulatorOptions::default()
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(super) enum TieOrderArg {
    Stable,
    Shuffled,
    TopN,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(super) enum PrecisionArg {
    Seconds,
    Millis,
    Micros,
}

pub(super) async fn simulate(args: SimulateArgs) -> Result<ExitCode> {
    let simulator = Simulator::start(args.listen, args.options())
        .await
        .map_err(|err| cannot_listen(args.listen, err))?;
    if let Some(lie) = &args.lie {
        lie.tell(&simulator).map_err(anyhow::Error::msg)?;
    }
    let stop = cancel_on_signal()?;
    // `callsync simulate | head -1` (to grab the base URL) closes stdout; the simulator
    // goes on serving.
    print_out(format_args!(
        "{}\nPress Ctrl-C to stop.\n\n# A callsync.toml for this simulator: everything from [api] on\n{}",
        simulator.summary(),
        config_for_simulator(&simulator)
    ))?;
    stop.cancelled().await;
    simulator.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

/// A configuration that works with the simulator as it is, ready to paste (or to cut out of
/// the output with `sed -n '/^\[api\]/,$p'`): its URL and token, a warehouse in the working
/// directory, its schedules.
pub(super) fn config_for_simulator(simulator: &Simulator) -> String {
    let schedules: Vec<String> = simulator
        .schedule_uids()
        .iter()
        .map(|uid| format!("\"{uid}\""))
        .collect();
    format!(
        "[api]\nbase_url = \"{}\"\naccess_token = \"{}\"\n\n[warehouse]\npath = \"callsync.db\"\n\n[sync]\nschedules = [{}]\n",
        simulator.base_url(),
        simulator.access_token(),
        schedules.join(", ")
    )
}

/// The simulator's address cannot be listened on: what to do, for the usual reasons.
pub(super) fn cannot_listen(
    addr: SocketAddr,
    err: crate::simulator::SimulatorError,
) -> anyhow::Error {
    use std::io::ErrorKind;
    let kind = std::error::Error::source(&err)
        .and_then(|source| source.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind);
    let what_to_do = match kind {
        Some(ErrorKind::AddrInUse) => {
            "is in use (another simulator, or another program, listens there): stop it, or choose another address with --listen (127.0.0.1:0 takes any free port)"
        }
        Some(ErrorKind::AddrNotAvailable) => {
            "is not an address of this machine: listen on loopback, e.g. --listen 127.0.0.1:8080"
        }
        Some(ErrorKind::PermissionDenied) => {
            "needs privileges this user lacks (a port below 1024): choose a port above 1023 with --listen"
        }
        _ => return anyhow::Error::new(err).context("cannot start the simulator"),
    };
    anyhow::anyhow!("cannot start the simulator: {addr} {what_to_do}")
}

/// A share of requests: a number from 0 to 1.
pub(super) fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if (0.0..=1.0).contains(&rate) => Ok(rate),
        _ => Err(format!(
            "{text:?} is not a share from 0 to 1 (0.05 is one request in 20)"
        )),
    }
}

/// `--time-scale`: a positive, finite factor.
pub(super) fn parse_time_scale(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 => Ok(f),
        _ => Err(format!(
            "{text:?} is not a positive number (1 is real time, 0.01 is 100 times faster)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_a_share_from_0_to_1() {
        assert_eq!(parse_rate("0"), Ok(0.0));
        assert_eq!(parse_rate("0.05"), Ok(0.05));
        assert_eq!(parse_rate("1"), Ok(1.0));
        for bad in ["-0.1", "1.5", "NaN", "inf", "5%", ""] {
            assert_eq!(
                parse_rate(bad),
                Err(format!(
                    "{bad:?} is not a share from 0 to 1 (0.05 is one request in 20)"
                )),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_date_skew_is_signed_seconds_into_the_fault_plan() {
        use clap::FromArgMatches;

        use super::super::args::{Cli, Command, command};
        let skew = |args: &[&str]| {
            let matches = command().try_get_matches_from(args).expect("parses");
            match Cli::from_arg_matches(&matches).expect("a command").command {
                Command::Simulate(args) => args.options().faults.date_skew_secs,
                _ => unreachable!("simulate"),
            }
        };
        assert_eq!(skew(&["callsync", "simulate"]), 0);
        assert_eq!(
            skew(&["callsync", "simulate", "--date-skew-secs", "-1735689600"]),
            -1_735_689_600
        );
        assert_eq!(
            skew(&["callsync", "simulate", "--date-skew-secs", "600"]),
            600
        );
    }
}

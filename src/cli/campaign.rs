//! The write half of the service on the command line: call flows, campaigns, schedules and
//! single calls. Each command validates what it can before sending, prints the new uid (or
//! the object with `--json`), and fails with one line naming the request and what to do.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde::Serialize;
use uuid::Uuid;

use super::progress::{NoProgress, UploadLog};
use super::{UsageError, parse_timestamp};
use crate::api::{ApiClient, Counters};
use crate::config::Config;
use crate::service::MAX_BULK;
use crate::service::{NewCall, NewCampaign, NewSchedule, Timestamp, new_call_problems};
use crate::upload::{self, UploadOptions, UploadProgress};
use crate::warehouse::Warehouse;

#[derive(Debug, Subcommand)]
pub enum ServiceCommand {
    /// Print the campaign uid of a call flow (--json: the whole call flow)
    CallFlow {
        /// The call flow's uid
        uid: Uuid,
        /// Print the object as JSON
        #[arg(long)]
        json: bool,
    },
    /// Create campaigns
    #[command(subcommand)]
    Campaign(CampaignCommand),
    /// Create schedules, enable or disable them
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Create a single call
    #[command(subcommand)]
    Call(CallCommand),
    /// Load a contact list (CSV with a header row) into a schedule as calls: every row is
    /// checked first; chunks of 1,000; a re-run continues and creates nothing twice
    Upload(UploadArgs),
}

#[derive(Debug, Args)]
pub struct UploadArgs {
    /// The schedule the calls go to
    #[arg(long, value_name = "UID")]
    schedule: Uuid,
    /// The contact list: phone_number, full_name, first_name, last_name, phonetic_*, email,
    /// external_id columns fill those fields; every other column is a custom parameter
    file: PathBuf,
    /// Rename a column (repeatable): to a field, a parameter name, or nothing to drop it
    #[arg(long = "map", value_name = "COLUMN=FIELD", value_parser = parse_rename)]
    renames: Vec<(String, String)>,
    /// Create the calls even though the schedule is enabled
    #[arg(long)]
    force: bool,
    /// Check the file and say what would be sent; send nothing
    #[arg(long)]
    dry_run: bool,
    /// Accept rows without external_id (a re-run after a lost answer may then duplicate them)
    #[arg(long)]
    allow_missing_external_id: bool,
    /// Send only the rows whose external_id the schedule does not have yet, and count the
    /// others as skipped (without it, such rows stop the upload before anything is sent)
    #[arg(long)]
    skip_existing: bool,
}

#[derive(Debug, Subcommand)]
pub enum CampaignCommand {
    /// Create a campaign (disabled, as the service creates every campaign) and print its uid
    Create {
        #[arg(long)]
        name: String,
        /// The campaign type (`scheduled_call` is the value in use)
        #[arg(long = "type", default_value = "scheduled_call")]
        kind: String,
        #[arg(long, default_value = "outbound")]
        direction: String,
        /// Print the object as JSON
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Create a schedule in a campaign (disabled) and print its uid
    Create(ScheduleCreate),
    /// Enable a schedule: the service starts dialling its calls
    Enable {
        uid: Uuid,
        #[arg(long)]
        json: bool,
    },
    /// Disable a schedule: the service stops dialling; calls can be added again
    Disable {
        uid: Uuid,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct ScheduleCreate {
    /// The campaign the schedule belongs to
    #[arg(long, value_name = "UID")]
    campaign: Uuid,
    #[arg(long)]
    name: String,
    /// When dialling may start (RFC 3339 with a zone)
    #[arg(long, value_name = "RFC3339", value_parser = parse_timestamp)]
    starts_at: Timestamp,
    /// When dialling stops (RFC 3339 with a zone; after --starts-at)
    #[arg(long, value_name = "RFC3339", value_parser = parse_timestamp)]
    ends_at: Timestamp,
    /// Waits before each retry, comma-separated, each positive (three give four attempts)
    #[arg(long, value_name = "N,N,…", value_delimiter = ',', required = true)]
    retry_intervals: Vec<i64>,
    #[arg(long, default_value = "consistent")]
    retry_type: String,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
pub enum CallCommand {
    /// Create one call in a schedule and print its uid
    Create(CallCreate),
}

#[derive(Debug, Args)]
pub struct CallCreate {
    #[arg(long, value_name = "UID")]
    schedule: Uuid,
    /// The number to dial, international form: + and digits
    #[arg(long, value_name = "+DIGITS")]
    phone: String,
    /// The contact's full name
    #[arg(long)]
    name: Option<String>,
    #[arg(long)]
    first_name: Option<String>,
    #[arg(long)]
    last_name: Option<String>,
    #[arg(long)]
    email: Option<String>,
    /// Your own reference for the call, echoed by the service
    #[arg(long)]
    external_id: Option<String>,
    /// A custom parameter (repeatable); datetimes need a zone (Z or +hh:mm)
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = parse_param)]
    params: Vec<(String, String)>,
    /// Create it even though the schedule is enabled
    #[arg(long)]
    force: bool,
    #[arg(long)]
    json: bool,
}

impl ServiceCommand {
    /// `upload --dry-run` checks a file and sends nothing: it runs without credentials.
    pub fn talks_to_the_service(&self) -> bool {
        !matches!(
            self,
            ServiceCommand::Upload(UploadArgs { dry_run: true, .. })
        )
    }
}

pub async fn run(config: &Config, command: ServiceCommand) -> Result<ExitCode> {
    let command = match command {
        ServiceCommand::Upload(args) => return upload(config, args).await,
        other => other,
    };
    let client = service_client(config)?;
    let counters = Counters::default();
    match command {
        ServiceCommand::CallFlow { uid, json } => {
            let flow = client
                .call_flow(uid, &counters)
                .await
                .with_context(|| format!("cannot read call flow {uid}"))?;
            print_resource(&flow, json, &flow.campaign_uid.to_string())
        }
        ServiceCommand::Campaign(CampaignCommand::Create {
            name,
            kind,
            direction,
            json,
        }) => {
            let new = NewCampaign {
                name: non_empty("--name", name)?,
                kind,
                direction: Some(direction),
            };
            let campaign = client
                .create_campaign(&new, &counters)
                .await
                .context("cannot create the campaign")?;
            remember(config, "the campaign was created", |w| {
                w.remember_campaign(&campaign)
            });
            print_resource(&campaign, json, &campaign.uid.to_string())
        }
        ServiceCommand::Schedule(ScheduleCommand::Create(args)) => {
            let (campaign, json) = (args.campaign, args.json);
            let new = new_schedule(args)?;
            let schedule = client
                .create_schedule(campaign, &new, &counters)
                .await
                .with_context(|| format!("cannot create the schedule in campaign {campaign}"))?;
            remember(config, "the schedule was created", |w| {
                w.remember_schedule(&schedule, Some(campaign))
            });
            print_resource(&schedule, json, &schedule.uid.to_string())
        }
        ServiceCommand::Schedule(ScheduleCommand::Enable { uid, json }) => {
            set_enabled(config, &client, &counters, uid, true, json).await
        }
        ServiceCommand::Schedule(ScheduleCommand::Disable { uid, json }) => {
            set_enabled(config, &client, &counters, uid, false, json).await
        }
        ServiceCommand::Call(CallCommand::Create(args)) => {
            let (schedule, force, json) = (args.schedule, args.force, args.json);
            let new = new_call(args)?;
            let call = client
                .create_call(schedule, &new, force, &counters)
                .await
                .with_context(|| format!("cannot create the call in schedule {schedule}"))?;
            print_resource(&call, json, &call.uid.to_string())
        }
        ServiceCommand::Upload(_) => unreachable!("handled above"),
    }
}

fn service_client(config: &Config) -> Result<ApiClient> {
    let credentials = config.api.credentials()?;
    ApiClient::new(&config.api, &credentials).context("cannot set up the service's client")
}

async fn upload(config: &Config, args: UploadArgs) -> Result<ExitCode> {
    let options = UploadOptions {
        schedule: args.schedule,
        path: args.file,
        renames: args.renames,
        force: args.force,
        allow_missing_external_id: args.allow_missing_external_id,
        skip_existing: args.skip_existing,
        settle: config.api.create_settle_window(),
    };
    let shown = options.path.display().to_string();
    let checked = upload::check(&options).map_err(|err| UsageError(format!("{err}")))?;
    if checked.problem_count > 0 {
        for problem in &checked.problems {
            let _ = writeln!(std::io::stderr(), "{shown}: {problem}");
        }
        let unlisted = checked.problem_count - checked.problems.len() as u64;
        if unlisted > 0 {
            let _ = writeln!(std::io::stderr(), "{shown}: … and {unlisted} more problems");
        }
        bail!(UsageError(format!(
            "{shown}: {} problems in {} rows; nothing was sent: fix them and run the upload again",
            checked.problem_count, checked.rows
        )));
    }
    let chunks = checked.rows.div_ceil(MAX_BULK as u64);
    if args.dry_run {
        print_line(&format!(
            "{shown}: {} rows checked, all valid; would send {chunks} chunks to schedule {} (dry run: nothing sent)",
            checked.rows, options.schedule
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    let client = service_client(config)?;
    let mut warehouse = Warehouse::open(&config.warehouse.path, config.warehouse.busy_timeout)
        .with_context(|| {
            format!(
                "cannot open the warehouse {} for the upload ledger",
                config.warehouse.path.display()
            )
        })?;
    // Held until the upload ends: a second upload into this schedule now could send a
    // contact this one is sending.
    let _lock = upload::lock(&config.warehouse.path, options.schedule)?;
    let bar = super::ProgressBar::for_terminal();
    let log = bar
        .is_none()
        .then(|| UploadLog::start(PROGRESS_EVERY, checked.rows, log_progress));
    let progress: &dyn UploadProgress = match (&bar, &log) {
        (Some(bar), _) => bar,
        (None, Some(log)) => log,
        (None, None) => &NoProgress,
    };
    let sent = upload::send(&client, &mut warehouse, &options, &checked, progress).await;
    drop(log);
    if let Some(bar) = bar {
        bar.0.finish_and_clear();
    }
    let summary = match sent {
        Ok(summary) => summary,
        // Each says all there is, the schedule included.
        Err(err @ upload::UploadError::ScheduleNotFound { .. }) => return Err(err.into()),
        // Rows that would call someone twice: named like the check's bad rows, and refused
        // the same way (exit 2, nothing sent).
        Err(upload::UploadError::AlreadyInSchedule {
            schedule,
            problems,
            count,
        }) => {
            for problem in &problems {
                let _ = writeln!(std::io::stderr(), "{shown}: {problem}");
            }
            let unlisted = count - problems.len() as u64;
            if unlisted > 0 {
                let _ = writeln!(std::io::stderr(), "{shown}: … and {unlisted} more");
            }
            bail!(UsageError(format!(
                "{shown}: {count} rows have an external_id schedule {schedule} already has; nothing was sent: remove those rows, or pass --skip-existing to send only the others"
            )));
        }
        Err(err) => {
            return Err(anyhow::Error::new(err).context(format!(
                "upload of {shown} to schedule {}",
                options.schedule
            )));
        }
    };
    for problem in &summary.refusals {
        let _ = writeln!(std::io::stderr(), "{shown}: {problem}");
    }
    print_line(&format!("{shown}: {}", describe_summary(&summary)))?;
    if summary.rows_refused > 0 {
        bail!(
            "the service refused {} rows of {shown} (the reasons above; a chunk is refused whole, so its other rows were not sent either); the other chunks were sent: fix those rows and run the same upload again — chunks already created are found, not sent twice",
            summary.rows_refused
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What became of every row: `2500 rows: 1500 calls created (2 chunks), 0 found already
/// created (0 chunks), 0 skipped (already in the schedule), 1000 refused by the service (1
/// chunk)`.
fn describe_summary(s: &upload::UploadSummary) -> String {
    let chunks = |n: u64| {
        if n == 1 {
            "1 chunk".to_owned()
        } else {
            format!("{n} chunks")
        }
    };
    format!(
        "{} rows: {} calls created ({}), {} found already created ({}), {} skipped (already in the schedule), {} refused by the service ({})",
        s.rows,
        s.calls_created,
        chunks(s.chunks_created),
        s.rows_found,
        chunks(s.chunks_found),
        s.rows_skipped,
        s.rows_refused,
        chunks(s.chunks_refused),
    )
}

/// How often an upload without a terminal logs where it is.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

fn log_progress(rows_done: u64, rows: u64, waiting: Option<&str>) {
    match waiting {
        Some(what) => tracing::info!(rows_done, rows, "upload progress: {what}"),
        None => tracing::info!(rows_done, rows, "upload progress"),
    }
}

/// `COLUMN=FIELD`; an empty field drops the column.
fn parse_rename(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((column, field)) if !column.trim().is_empty() => {
            Ok((column.trim().to_owned(), field.trim().to_owned()))
        }
        _ => Err(format!("{text:?} is not COLUMN=FIELD")),
    }
}

async fn set_enabled(
    config: &Config,
    client: &ApiClient,
    counters: &Counters,
    uid: Uuid,
    enabled: bool,
    json: bool,
) -> Result<ExitCode> {
    let verb = if enabled { "enable" } else { "disable" };
    let schedule = client
        .set_schedule_enabled(uid, enabled, counters)
        .await
        .with_context(|| format!("cannot {verb} schedule {uid}"))?;
    remember(config, &format!("the schedule was {verb}d"), |w| {
        w.remember_schedule(&schedule, None)
    });
    let state = if schedule.is_enabled {
        "enabled"
    } else {
        "disabled"
    };
    print_resource(&schedule, json, &format!("schedule {uid} is {state}"))
}

/// Records what the service answered in the warehouse (`campaigns`, `schedules`). The
/// service's change stands whatever happens here, so a failure is a warning: an error would
/// invite running a create again.
fn remember(
    config: &Config,
    done: &str,
    write: impl FnOnce(&mut Warehouse) -> Result<(), crate::warehouse::WarehouseError>,
) {
    let path = &config.warehouse.path;
    let recorded =
        Warehouse::open(path, config.warehouse.busy_timeout).and_then(|mut w| write(&mut w));
    if let Err(err) = recorded {
        let _ = writeln!(
            std::io::stderr(),
            "warning: {done}, but is not recorded in the warehouse {}: {}",
            path.display(),
            crate::error_chain(&err)
        );
    }
}

fn new_schedule(args: ScheduleCreate) -> Result<NewSchedule> {
    if args.ends_at <= args.starts_at {
        bail!(UsageError(format!(
            "--ends-at {} is not after --starts-at {}",
            args.ends_at, args.starts_at
        )));
    }
    if let Some(bad) = args.retry_intervals.iter().find(|i| **i <= 0) {
        bail!(UsageError(format!(
            "--retry-intervals: {bad} is not a positive number of seconds"
        )));
    }
    Ok(NewSchedule {
        name: non_empty("--name", args.name)?,
        starts_at: args.starts_at,
        ends_at: args.ends_at,
        retry_type: args.retry_type,
        retry_intervals: args.retry_intervals,
    })
}

fn new_call(args: CallCreate) -> Result<NewCall> {
    let call = NewCall {
        phone_number: args.phone,
        full_name: args.name,
        first_name: args.first_name,
        last_name: args.last_name,
        email: args.email,
        external_id: args.external_id,
        custom_parameters: args.params.into_iter().collect::<BTreeMap<_, _>>(),
        ..NewCall::default()
    };
    let problems = new_call_problems(&call);
    if !problems.is_empty() {
        let each: Vec<String> = problems.iter().map(ToString::to_string).collect();
        bail!(UsageError(format!(
            "the call is not valid: {}",
            each.join("; ")
        )));
    }
    Ok(call)
}

fn non_empty(flag: &str, value: String) -> Result<String> {
    if value.trim().is_empty() {
        bail!(UsageError(format!("{flag} must not be empty")));
    }
    Ok(value)
}

/// `KEY=VALUE`, the key not empty.
fn parse_param(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

/// The object as JSON with `--json`, else the one line a script or a person wants.
fn print_resource(resource: &impl Serialize, json: bool, line: &str) -> Result<ExitCode> {
    if json {
        let text =
            serde_json::to_string_pretty(resource).context("cannot print the answer as JSON")?;
        // The service's names and texts, for a terminal as much as for a script.
        print_line(&crate::untrusted::json_safe(&text))?;
    } else {
        print_line(line)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A line on stdout, through the one writer that survives a reader that has gone.
fn print_line(line: &str) -> Result<()> {
    super::print_out(format_args!("{line}\n"))
}

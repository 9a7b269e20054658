//! The write half of the service on the command line: call flows, campaigns, schedules and
//! single calls. Each command validates what it can before sending, prints the new uid (or
//! the object with `--json`), and fails with one line naming the request and what to do.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use uuid::Uuid;

use super::service_args::{
    CallCommand, CallCreate, CampaignCommand, ScheduleCommand, ScheduleCreate, ServiceCommand,
};
use super::usage::UsageError;
use crate::api::{ApiClient, Counters};
use crate::config::Config;
use crate::service::{NewCall, NewCampaign, NewSchedule, new_call_problems};
use crate::warehouse::Destination;

/// Every service command but `upload` (`upload.rs`).
pub async fn run(config: &Config, command: ServiceCommand) -> Result<ExitCode> {
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
        ServiceCommand::Upload(_) => unreachable!("dispatched to upload::run"),
    }
}

pub(super) fn service_client(config: &Config) -> Result<ApiClient> {
    let credentials = config.api.credentials()?;
    ApiClient::new(&config.api, &credentials).context("cannot set up the service's client")
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

/// Records what the service answered in the configured warehouse, SQLite or PostgreSQL
/// (`campaigns`, `schedules`). The service's change stands whatever happens here, so a
/// failure is a warning: an error would invite running a create again.
fn remember(
    config: &Config,
    done: &str,
    write: impl FnOnce(&mut dyn Destination) -> Result<(), crate::warehouse::WarehouseError>,
) {
    let recorded = super::destination::writing(config).and_then(|mut w| Ok(write(w.as_mut())?));
    if let Err(err) = recorded {
        let _ = writeln!(
            std::io::stderr(),
            "warning: {done}, but is not recorded in the warehouse: {}",
            crate::error_chain(err.as_ref())
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
pub(super) fn print_line(line: &str) -> Result<()> {
    super::output::print_out(format_args!("{line}\n"))
}

//! The write half of the service on the command line, defined: call flows, campaigns,
//! schedules, single calls and uploads (their running: `campaign.rs`, `upload.rs`).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use uuid::Uuid;

use super::usage::parse_timestamp;
use crate::service::Timestamp;

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
    pub(super) schedule: Uuid,
    /// The contact list: phone_number, full_name, first_name, last_name, phonetic_*, email,
    /// external_id columns fill those fields; every other column is a custom parameter
    pub(super) file: PathBuf,
    /// Rename a column (repeatable): to a field, a parameter name, or nothing to drop it
    #[arg(long = "map", value_name = "COLUMN=FIELD", value_parser = parse_rename)]
    pub(super) renames: Vec<(String, String)>,
    /// Create the calls even though the schedule is enabled
    #[arg(long)]
    pub(super) force: bool,
    /// Check the file and say what would be sent; send nothing
    #[arg(long)]
    pub(super) dry_run: bool,
    /// Accept rows without external_id (a re-run after a lost answer may then duplicate them)
    #[arg(long)]
    pub(super) allow_missing_external_id: bool,
    /// Send only the rows whose external_id the schedule does not have yet, and count the
    /// others as skipped (without it, such rows stop the upload before anything is sent)
    #[arg(long)]
    pub(super) skip_existing: bool,
    /// Print the summary (or the dry run's) as one JSON object
    #[arg(long)]
    pub(super) json: bool,
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
    pub(super) campaign: Uuid,
    #[arg(long)]
    pub(super) name: String,
    /// When dialling may start (RFC 3339 with a zone)
    #[arg(long, value_name = "RFC3339", value_parser = parse_timestamp)]
    pub(super) starts_at: Timestamp,
    /// When dialling stops (RFC 3339 with a zone; after --starts-at)
    #[arg(long, value_name = "RFC3339", value_parser = parse_timestamp)]
    pub(super) ends_at: Timestamp,
    /// Waits before each retry, comma-separated, each positive (three give four attempts)
    #[arg(long, value_name = "N,N,…", value_delimiter = ',', required = true)]
    pub(super) retry_intervals: Vec<i64>,
    #[arg(long, default_value = "consistent")]
    pub(super) retry_type: String,
    #[arg(long)]
    pub(super) json: bool,
}

#[derive(Debug, Subcommand)]
pub enum CallCommand {
    /// Create one call in a schedule and print its uid
    Create(CallCreate),
}

#[derive(Debug, Args)]
pub struct CallCreate {
    #[arg(long, value_name = "UID")]
    pub(super) schedule: Uuid,
    /// The number to dial, international form: + and digits
    #[arg(long, value_name = "+DIGITS")]
    pub(super) phone: String,
    /// The contact's full name
    #[arg(long)]
    pub(super) name: Option<String>,
    #[arg(long)]
    pub(super) first_name: Option<String>,
    #[arg(long)]
    pub(super) last_name: Option<String>,
    #[arg(long)]
    pub(super) email: Option<String>,
    /// Your own reference for the call, echoed by the service
    #[arg(long)]
    pub(super) external_id: Option<String>,
    /// A custom parameter (repeatable); datetimes need a zone (Z or +hh:mm)
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = parse_param)]
    pub(super) params: Vec<(String, String)>,
    /// Create it even though the schedule is enabled
    #[arg(long)]
    pub(super) force: bool,
    #[arg(long)]
    pub(super) json: bool,
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

/// `COLUMN=FIELD`; an empty field drops the column.
fn parse_rename(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((column, field)) if !column.trim().is_empty() => {
            Ok((column.trim().to_owned(), field.trim().to_owned()))
        }
        _ => Err(format!("{text:?} is not COLUMN=FIELD")),
    }
}

/// `KEY=VALUE`, the key not empty.
fn parse_param(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

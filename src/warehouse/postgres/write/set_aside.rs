//! `set_aside_calls` on PostgreSQL (`warehouse/set_aside.rs` says which rows): two
//! statements in a group's round trip — the rows of calls read again that now fit taken out,
//! then the group's calls set aside upserted (each schedule and call once: a statement
//! updates a row once).

use std::collections::HashMap;

use uuid::Uuid;

use crate::service::Timestamp;
use crate::warehouse::error::WarehouseError;
use crate::warehouse::postgres::PgWarehouse;
use crate::warehouse::postgres::pipeline::Pipeline;
use crate::warehouse::postgres::session::{RowColumn, micros};
use crate::warehouse::set_aside::SetAside;

const TAKE_OUT: &str = "DELETE FROM set_aside_calls AS s
     USING unnest($1::uuid[], $2::uuid[]) AS f(schedule_uid, call_uid)
     WHERE s.schedule_uid = f.schedule_uid AND s.call_uid = f.call_uid";

/// Conflicts of each schedule `$1` older than the checkpoint `$2` its page saves: the walk
/// read their instant again without them (a listed conflict holds the checkpoint at it).
const TAKE_OUT_PASSED: &str = "DELETE FROM set_aside_calls AS s
     USING unnest($1::uuid[], $2::timestamptz[]) AS c(schedule_uid, cursor)
     WHERE s.schedule_uid = c.schedule_uid AND s.kind = 'conflict' AND s.updated_at < c.cursor";

/// Each schedule `$1`'s calls set aside, once the group's statements ran.
const COUNT: &str = "SELECT s, (SELECT count(*) FROM set_aside_calls WHERE schedule_uid = s)
     FROM unnest($1::uuid[]) AS s";

const SET_ASIDE: &str = "INSERT INTO set_aside_calls (schedule_uid, call_uid, kind, updated_at,
         reason, raw_json, first_seen, last_seen, run_id)
     SELECT s, c, k, u, r, j, $7, $7, run
     FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::timestamptz[], $5::text[], $6::text[],
                 $8::int8[]) AS t(s, c, k, u, r, j, run)
     ON CONFLICT (schedule_uid, call_uid) DO UPDATE SET
         kind = excluded.kind, updated_at = excluded.updated_at, reason = excluded.reason,
         raw_json = excluded.raw_json, last_seen = excluded.last_seen, run_id = excluded.run_id";

/// A group's set-aside writes, as the statements' array parameters.
pub(in crate::warehouse::postgres) struct AsideWrites {
    fitting: (Vec<Uuid>, Vec<Uuid>),
    schedules: Vec<Uuid>,
    calls: Vec<Uuid>,
    kinds: Vec<&'static str>,
    stamps: Vec<time::OffsetDateTime>,
    reasons: Vec<String>,
    raw: Vec<String>,
    runs: Vec<Option<i64>>,
    /// The checkpoints the group's pages save, by schedule.
    passed: (Vec<Uuid>, Vec<time::OffsetDateTime>),
    /// The group's schedules, each once: their rows are counted after the writes.
    counted: Vec<Uuid>,
    /// Where each (schedule, call) set aside is in the arrays: a call's latest row wins.
    rows_at: HashMap<(Uuid, Uuid), usize>,
    /// When the group's calls were seen set aside (this machine's clock).
    now: time::OffsetDateTime,
}

impl AsideWrites {
    pub(in crate::warehouse::postgres) fn new() -> Self {
        AsideWrites {
            fitting: (Vec::new(), Vec::new()),
            schedules: Vec::new(),
            calls: Vec::new(),
            kinds: Vec::new(),
            stamps: Vec::new(),
            reasons: Vec::new(),
            raw: Vec::new(),
            runs: Vec::new(),
            passed: (Vec::new(), Vec::new()),
            counted: Vec::new(),
            rows_at: HashMap::new(),
            now: micros(Timestamp::now()),
        }
    }

    /// Adds a page's: the calls taken as they are (`fitting`), the rows set aside, and the
    /// checkpoint it saves.
    pub(in crate::warehouse::postgres) fn add(
        &mut self,
        (schedule, checkpoint): (Uuid, Option<Timestamp>),
        fitting: Vec<Uuid>,
        rows: &[&SetAside],
    ) {
        if let Some(cursor) = checkpoint {
            self.passed.0.push(schedule);
            self.passed.1.push(micros(cursor));
        }
        if !self.counted.contains(&schedule) {
            self.counted.push(schedule);
        }
        self.fitting
            .0
            .extend(std::iter::repeat_n(schedule, fitting.len()));
        self.fitting.1.extend(fitting);
        // The latest row of each call wins.
        for row in rows {
            let i = *self
                .rows_at
                .entry((schedule, row.call_uid))
                .or_insert_with(|| {
                    self.schedules.push(schedule);
                    self.calls.push(row.call_uid);
                    self.kinds.push("");
                    self.stamps.push(micros(Timestamp::EPOCH));
                    self.reasons.push(String::new());
                    self.raw.push(String::new());
                    self.runs.push(None);
                    self.calls.len() - 1
                });
            self.kinds[i] = row.kind.as_str();
            self.stamps[i] = micros(row.updated_at);
            self.reasons[i] = row.reason.clone();
            self.raw[i] = row.raw_json.clone();
            self.runs[i] = row.run;
        }
    }

    /// The statements, where they have rows, onto `pipeline`; the index of the count.
    pub(in crate::warehouse::postgres) fn push<'a>(
        &'a self,
        warehouse: &PgWarehouse,
        pipeline: &mut Pipeline<'a>,
    ) -> Result<Option<usize>, WarehouseError> {
        if !self.fitting.0.is_empty() {
            let step = "taking out calls set aside that now fit";
            let statement = warehouse.statement(TAKE_OUT, step)?;
            pipeline.push(statement, vec![&self.fitting.0, &self.fitting.1], step);
        }
        if !self.passed.0.is_empty() {
            let step = "taking out conflicts the walk read past";
            let statement = warehouse.statement(TAKE_OUT_PASSED, step)?;
            pipeline.push(statement, vec![&self.passed.0, &self.passed.1], step);
        }
        if !self.calls.is_empty() {
            let step = "setting calls aside";
            let statement = warehouse.statement(SET_ASIDE, step)?;
            let params: Vec<&'a (dyn tokio_postgres::types::ToSql + Sync)> = vec![
                &self.schedules,
                &self.calls,
                &self.kinds,
                &self.stamps,
                &self.reasons,
                &self.raw,
                &self.now,
                &self.runs,
            ];
            pipeline.push(statement, params, step);
        }
        if self.counted.is_empty() {
            return Ok(None);
        }
        let step = "counting calls set aside";
        let statement = warehouse.statement(COUNT, step)?;
        Ok(Some(pipeline.push(statement, vec![&self.counted], step)))
    }

    /// The counts the statement at `index` answered, by schedule.
    pub(in crate::warehouse::postgres) fn counts(
        warehouse: &PgWarehouse,
        rows: &[Vec<tokio_postgres::Row>],
        index: Option<usize>,
    ) -> Result<HashMap<Uuid, u64>, WarehouseError> {
        let step = "counting calls set aside";
        let rows = index
            .and_then(|i| rows.get(i))
            .map_or(&[][..], Vec::as_slice);
        rows.iter()
            .map(|row| {
                let schedule: Uuid = row.column(0, &warehouse.target, step)?;
                let n: i64 = row.column(1, &warehouse.target, step)?;
                Ok((schedule, u64::try_from(n).unwrap_or(0)))
            })
            .collect()
    }
}

//! Statements sent together and answered together: a page's writes that do not wait for each
//! other's answers go in one round trip instead of one each (tokio-postgres sends a request
//! as soon as its future is first polled, and the server answers in order).
//!
//! Inside a transaction a failed statement aborts it: the statements after it fail too
//! ("current transaction is aborted"), so the first error in order is the one told, and the
//! transaction is rolled back, whole, by whoever ends it.

use std::future::Future;

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};

use super::session::PgContext;
use super::target::PgTarget;
use crate::warehouse::error::WarehouseError;

/// Prepared statements with their parameters, in the order the server runs them.
#[derive(Default)]
pub(super) struct Pipeline<'a> {
    requests: Vec<Request<'a>>,
}

struct Request<'a> {
    statement: Statement,
    params: Vec<&'a (dyn ToSql + Sync)>,
    step: &'static str,
}

/// Every statement's answer, in order; an error for the first that failed.
pub(super) type Answers = Vec<Result<Vec<Row>, tokio_postgres::Error>>;

impl<'a> Pipeline<'a> {
    /// Adds a statement; returns its place in the answers.
    pub(super) fn push(
        &mut self,
        statement: Statement,
        params: Vec<&'a (dyn ToSql + Sync)>,
        step: &'static str,
    ) -> usize {
        self.requests.push(Request {
            statement,
            params,
            step,
        });
        self.requests.len() - 1
    }

    /// Sends every statement, in order, and waits for all their answers.
    pub(super) fn answers<'c>(&'c self, client: &'c Client) -> impl Future<Output = Answers> + 'c {
        futures::future::join_all(
            self.requests
                .iter()
                .map(|r| client.query(&r.statement, &r.params)),
        )
    }

    /// `answers`' rows, or the first error in order, with its step.
    pub(super) fn rows(
        &self,
        answers: Answers,
        target: &PgTarget,
    ) -> Result<Vec<Vec<Row>>, WarehouseError> {
        answers
            .into_iter()
            .zip(&self.requests)
            .map(|(answer, request)| answer.pg(target, request.step))
            .collect()
    }
}

//! Statements through each connection's cache of prepared statements.
//!
//! tokio-postgres runs a statement given as text in two round trips: it prepares it (Parse,
//! Describe) and waits for the answer, then binds and executes it. Every statement of the
//! store goes through [`Sql`] instead, which prepares a text once per connection
//! (deadpool's statement cache) and then runs it in one round trip (Bind, Execute, Sync).
//! The texts are the store's own, a fixed set (no text is built from a request's data or
//! from a count of values: lists go as arrays), so each connection's cache holds at most
//! that many statements.

use deadpool_postgres::{Object, Transaction};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Error, Row, Statement};

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A connection or a transaction on one: runs the store's statements prepared.
#[async_trait::async_trait]
pub(crate) trait Sql: Sync {
    /// The prepared statement of `sql` on this connection (prepared at its first use).
    async fn prepared(&self, sql: &str) -> Result<Statement, Error>;
    /// The connection the statements run on.
    fn connection(&self) -> &tokio_postgres::Client;

    /// Every row `sql` answers.
    async fn fetch_all(&self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, Error> {
        let statement = self.prepared(sql).await?;
        self.connection().query(&statement, params).await
    }

    /// The one row `sql` answers (an error for none or several).
    async fn fetch_one(&self, sql: &str, params: Params<'_>) -> Result<Row, Error> {
        let statement = self.prepared(sql).await?;
        self.connection().query_one(&statement, params).await
    }

    /// The row `sql` answers, if any (an error for several).
    async fn fetch_opt(&self, sql: &str, params: Params<'_>) -> Result<Option<Row>, Error> {
        let statement = self.prepared(sql).await?;
        self.connection().query_opt(&statement, params).await
    }

    /// Runs `sql`; the number of rows it changed.
    async fn run(&self, sql: &str, params: Params<'_>) -> Result<u64, Error> {
        let statement = self.prepared(sql).await?;
        self.connection().execute(&statement, params).await
    }
}

#[async_trait::async_trait]
impl Sql for Object {
    async fn prepared(&self, sql: &str) -> Result<Statement, Error> {
        self.prepare_cached(sql).await
    }

    fn connection(&self) -> &tokio_postgres::Client {
        self
    }
}

#[async_trait::async_trait]
impl Sql for Transaction<'_> {
    async fn prepared(&self, sql: &str) -> Result<Statement, Error> {
        self.prepare_cached(sql).await
    }

    fn connection(&self) -> &tokio_postgres::Client {
        let transaction: &tokio_postgres::Transaction<'_> = self;
        transaction.client()
    }
}

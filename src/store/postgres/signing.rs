//! The token signing key in the database (`token_signing_key`, one row): every process signs
//! and checks tokens with the same key, so a token made by one is good at all of them.

use super::sql::Sql;
use super::{PgResult, PgStore};

impl PgStore {
    /// The signing key every process shares: the stored one, or `fresh` when none is stored
    /// yet (of processes starting together, the first insert wins and all read it back).
    pub async fn signing_key(&self, fresh: &[u8]) -> PgResult<Vec<u8>> {
        let client = self.pool.get().await?;
        client
            .run(
                "INSERT INTO token_signing_key (secret) VALUES ($1) ON CONFLICT (only_one) DO NOTHING",
                &[&fresh],
            )
            .await?;
        Ok(client
            .fetch_one("SELECT secret FROM token_signing_key", &[])
            .await?
            .try_get(0)?)
    }
}

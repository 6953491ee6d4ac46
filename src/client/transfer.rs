//! `pigeonhole export [FILE]` and `pigeonhole import FILE`: one account of both services as
//! one JSON file (docs/backup.md).

use crate::config::{ExportArgs, ImportArgs};

pub async fn export(_args: ExportArgs) -> Result<(), String> {
    Err("export is not available yet".into())
}

pub async fn import(_args: ImportArgs) -> Result<(), String> {
    Err("import is not available yet".into())
}

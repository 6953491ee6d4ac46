//! The sled implementation of [`super::api::Administration`]: the writer thread's health,
//! statistics and flush, and the backup held between two of its write cycles.

use super::writer::Writer;
use super::{backup, format, BackupSummary, CycleStats, Result, WriterStats};

#[async_trait::async_trait]
impl super::api::Administration for Writer {
    /// The writer thread runs, no sync of the database files ever failed, and the latest
    /// write cycle reached the disk. Nothing is written or synced to find out.
    async fn writable(&self) -> std::result::Result<(), String> {
        Writer::writable(self)
    }

    fn writer_stats(&self) -> WriterStats {
        self.stats()
    }

    fn writer_cycles(&self) -> CycleStats {
        self.cycle_stats()
    }

    fn flush(&self) -> Result<()> {
        self.flush_now()
    }

    fn simulate_sync_failure_for_tests(&self) {
        self.simulate_sync_failure()
    }

    fn backup_to(&self, out: &mut dyn std::io::Write, files: &[(&str, &[u8])]) -> Result<BackupSummary> {
        // an open store has been migrated to the current format
        backup::backup_of_format(self, out, files, format::CURRENT)
    }
}

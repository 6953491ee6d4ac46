//! Large values are stored in chunks, so that sled never writes a blob file.
//!
//! sled 0.34 writes any log record larger than a quarter of a segment (about 128 KiB) to a
//! file of its own under `db/blobs/`, and every later consolidation of a page holding such a
//! value writes the whole page again as a new blob. Those files are created and filled
//! without `fsync`, and sled's own periodic `fsync` of the log (every 500 ms, in its
//! background thread, and when it shrinks the file) can make a log record durable while the
//! blob it points to is not. A power cut then leaves a log that points at missing or empty
//! blobs: the power-cut simulation (tests/durability/powercut.rs) saw acknowledged items lost and
//! databases that no longer opened ("tried to serialize Uninitialized"). Syncing the blob
//! files after each flush narrows that window but cannot close it, because the writer does
//! not control when sled syncs its log.
//!
//! So no record reaches sled's blob path: a value longer than [`CHUNK`] bytes is stored as a
//! small *manifest* under its own key and its bytes as chunk records of at most [`CHUNK`]
//! bytes under keys of their own (`0xFF` + 16 bytes of the SHA-256 of the value's key + chunk
//! number, big-endian), written in the same sled batch as the manifest, so a crash keeps all
//! of them or none. A leaf page holds at most 17 records, so with keys kept short (usernames
//! are hashed in their index key, idempotency keys are at most 200 bytes) no page grows past
//! the blob threshold either. Record prefixes are ASCII letters, so no scan of a record kind
//! ever meets a chunk key.
//!
//! A manifest is `0xFF 'P' 'H' 'C'` + the value's length (u64, big-endian). No record
//! written before this format starts with `0xFF`, and a value that happens to have exactly a
//! manifest's shape is itself stored in chunks, so a stored value of that shape is always a
//! manifest.

use sha2::{Digest, Sha256};

/// The most bytes a value (or a chunk) may have inline.
pub(crate) const CHUNK: usize = 4096;

/// First byte of every chunk key.
pub(crate) const CHUNK_PREFIX: u8 = 0xFF;

const MAGIC: [u8; 4] = [0xFF, b'P', b'H', b'C'];
const MANIFEST_LEN: usize = 12;

/// Whether `value` is stored in chunks.
pub(crate) fn needs_chunks(value: &[u8]) -> bool {
    value.len() > CHUNK || manifest_len(value).is_some()
}

pub(crate) fn manifest(len: usize) -> Vec<u8> {
    let mut m = MAGIC.to_vec();
    m.extend_from_slice(&(len as u64).to_be_bytes());
    m
}

/// The length of the value a stored manifest stands for (`None`: not a manifest).
pub(crate) fn manifest_len(stored: &[u8]) -> Option<usize> {
    if stored.len() != MANIFEST_LEN || stored[..4] != MAGIC {
        return None;
    }
    let len = u64::from_be_bytes(stored[4..].try_into().ok()?);
    usize::try_from(len).ok()
}

/// Number of chunks of a value of `len` bytes.
pub(crate) fn count(len: usize) -> u32 {
    len.div_ceil(CHUNK) as u32
}

/// The key of chunk `index` of the value stored under `key`.
pub(crate) fn chunk_key(key: &[u8], index: u32) -> Vec<u8> {
    let mut k = chunk_prefix(key);
    k.extend_from_slice(&index.to_be_bytes());
    k
}

/// The chunk keys of the value stored under `key` without their chunk number.
fn chunk_prefix(key: &[u8]) -> Vec<u8> {
    let digest = Sha256::digest(key);
    let mut k = Vec::with_capacity(21);
    k.push(CHUNK_PREFIX);
    k.extend_from_slice(&digest[..16]);
    k
}

/// How many times [`read`] looks each chunk up.
///
/// sled 0.34 counts every read of a page in its cache's bookkeeping, but only looks at the
/// counts of one of its 256 shards once 64 of them have queued up there; a page read fewer
/// times stays in memory until then, whatever the cache's capacity. A scan reads each page
/// once, so listing a large account used to leave every page of its chunks (about 64 KiB
/// each: 16 chunks of 4 KiB) in memory: 240 MB of items, 200 MiB resident. Looked up 8
/// times per chunk, a chunk page is counted often enough that its shard's count is taken and
/// what is over the capacity leaves (measured in docs/performance.md: 32 MiB instead of
/// 135 MiB after listing 120 MB; each lookup of a page in memory costs well under a
/// microsecond, against the 4 KiB it brings).
const LOOKUPS_PER_CHUNK: usize = 8;

/// The value of `len` bytes stored in chunks under `key`, made whole; `None` when a chunk is
/// missing or has another length than expected (a batch replaced the value meanwhile: the
/// caller reads its manifest again).
pub(crate) fn read(tree: &sled::Tree, key: &[u8], len: usize) -> sled::Result<Option<Vec<u8>>> {
    let mut k = chunk_prefix(key);
    let prefix = k.len();
    let mut out = Vec::with_capacity(len);
    for index in 0..count(len) {
        k.truncate(prefix);
        k.extend_from_slice(&index.to_be_bytes());
        let Some(part) = tree.get(&k)? else {
            return Ok(None);
        };
        for _ in 1..LOOKUPS_PER_CHUNK {
            tree.get(&k)?;
        }
        if out.len() + part.len() > len {
            return Ok(None);
        }
        out.extend_from_slice(&part);
    }
    Ok((out.len() == len).then_some(out))
}

/// The chunks of `value`, in order.
pub(crate) fn split(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.chunks(CHUNK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_stay_inline_and_manifest_shaped_ones_do_not() {
        assert!(!needs_chunks(b""));
        assert!(!needs_chunks(&[1u8; CHUNK]));
        assert!(needs_chunks(&[1u8; CHUNK + 1]));
        let m = manifest(123_456);
        assert_eq!(manifest_len(&m), Some(123_456));
        assert!(needs_chunks(&m), "a value that looks like a manifest is chunked itself");
        assert_eq!(manifest_len(&m[..11]), None);
        assert_eq!(manifest_len(&[1u8; 12]), None);
    }

    /// The layouts of manifests and chunk keys (what existing databases hold).
    #[test]
    fn manifest_and_chunk_key_layouts() {
        assert_eq!(hex::encode(manifest(123_456)), "ff504843000000000001e240");
        assert_eq!(
            hex::encode(chunk_key(b"i-some-item", 1)),
            "ff091bcf2da078869083f3b5333182cf0d00000001"
        );
    }

    #[test]
    fn a_value_is_read_whole_from_its_chunks_or_not_at_all() {
        let db = sled::Config::new().temporary(true).open().expect("sled");
        let tree = db.open_tree("t").expect("tree");
        let value: Vec<u8> = (0..3 * CHUNK + 5).map(|i| i as u8).collect();
        for (i, part) in split(&value).enumerate() {
            tree.insert(chunk_key(b"k", i as u32), part).expect("insert");
        }
        assert_eq!(read(&tree, b"k", value.len()).expect("read"), Some(value.clone()));
        // a manifest that says otherwise than the chunks (the value was replaced meanwhile)
        assert_eq!(read(&tree, b"k", value.len() + 1).expect("read"), None);
        assert_eq!(read(&tree, b"k", value.len() - 1).expect("read"), None);
        tree.remove(chunk_key(b"k", 1)).expect("remove");
        assert_eq!(read(&tree, b"k", value.len()).expect("read"), None);
        assert_eq!(read(&tree, b"other", 10).expect("read"), None);
    }

    #[test]
    fn chunk_keys_are_ordered_per_value_and_outside_record_prefixes() {
        let a0 = chunk_key(b"i-some-item", 0);
        let a1 = chunk_key(b"i-some-item", 1);
        let a256 = chunk_key(b"i-some-item", 256);
        assert!(a0 < a1 && a1 < a256);
        assert_eq!(a0[0], CHUNK_PREFIX);
        assert_ne!(a0[..17], chunk_key(b"i-other-item", 0)[..17]);
        assert_eq!(count(0), 0);
        assert_eq!(count(CHUNK), 1);
        assert_eq!(count(CHUNK + 1), 2);
        let value = vec![7u8; 3 * CHUNK + 5];
        let parts: Vec<&[u8]> = split(&value).collect();
        assert_eq!(parts.len(), 4);
        assert_eq!(parts[3].len(), 5);
    }
}

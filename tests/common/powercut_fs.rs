//! A file system that loses power: an in-memory FUSE file system that tracks, next to what
//! its users see, what a disk would still hold after a power cut, and can be "cut" at any
//! instant.
//!
//! # The model
//!
//! Every inode has two states:
//!
//! - **now**: what `read`, `stat` and `readdir` see (the page cache of a real kernel).
//! - **durable**: what survives a power cut (what the drive holds).
//!
//! They are linked by exactly these rules (POSIX's, as Linux file systems implement them):
//!
//! - A regular file's durable contents and size are its contents and size as of the last
//!   `fsync` or `fdatasync` of that file, through any file descriptor (Linux syncs a file's
//!   dirty pages whichever descriptor wrote them). A write on a descriptor opened with
//!   `O_SYNC`/`O_DSYNC` (or a `pwritev2(RWF_DSYNC)`) syncs the file when it returns.
//! - A directory's durable entries (name -> inode) are its entries as of the last `fsync`
//!   of that directory. So a created, renamed, linked or unlinked name is durable only
//!   once its directory was fsynced; a file whose name never became durable is lost with
//!   its contents, however often the file itself was fsynced.
//! - Nothing else makes anything durable: `sync_file_range` (sled 0.34's "flush") never
//!   reaches a FUSE file system as a sync (it only starts and waits for page write-back,
//!   and every file here is opened `direct_io`, so it has no pages to write back), nor do
//!   `close`, `flush` or time passing.
//!
//! Files are opened `direct_io`: every `write(2)` arrives here as it happens (no page cache
//! or write-back cache in between), and every `fsync(2)`/`fdatasync(2)` arrives as a FUSE
//! `FSYNC` (`FSYNCDIR` for a directory).
//!
//! [`PowerCutFs::cut`] is the power cut: under the lock every operation takes, it marks the
//! file system dead (every later operation, a sync included, fails with `EIO`, so nothing
//! can be acknowledged on the strength of a sync that came after the cut), runs the
//! caller's action (SIGKILL of the server) in the same critical section, and captures the
//! durable tree. [`Image::materialise`] writes that tree into a real directory: the disk as
//! a restarted machine would find it.
//!
//! [`PowerCutFs::fail`] throws a switch that makes the disk fail without a cut: while it
//! is thrown, [`Failure::Full`] answers every operation that needs space (a write, a
//! creation, growing a file) and every sync with `ENOSPC`, as a full disk does, and
//! [`Failure::Syncs`] answers only `fsync`/`fdatasync` (files and directories) with `EIO`,
//! as a failing drive does after the writes went into the page cache. Reads, listings,
//! removals and renames keep working. Throwing it back makes the disk healthy again.
//!
//! # Simplifications (each documented in docs/durability.md too)
//!
//! - Everything present when the file system is mounted (the initial image) is durable.
//! - Durability is per file and per directory, never partial: a cut keeps either the whole
//!   state of the last sync or nothing newer. Real drives can also keep part of the unsynced
//!   writes (any subset of pages, torn sectors); this model only ever keeps the synced state,
//!   which is the state every correct program must survive, not every state it might meet.
//! - Metadata other than names and sizes (modes, owners, times) is not tracked for
//!   durability; the materialised image uses the current mode.
//! - A rename between two directories is two independent directory changes (each durable
//!   when its own directory is fsynced); a journaling file system would make it atomic.
//!   The server renames only within one directory.
//! - `syncfs(2)` and `sync(2)` do not reach a FUSE file system (the kernel sends no request
//!   for them), so a program relying on them would be reported as losing data here.
//! - No symbolic links, device nodes or extended attributes.

#![allow(dead_code)]

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, MountOption,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

/// File contents are kept in pages shared between the "now" and "durable" states: a sync
/// clones the page table (cheap reference counts), a later write copies only the page it
/// changes.
const PAGE: usize = 4096;
type Page = Arc<[u8; PAGE]>;

/// How long the kernel may cache names and attributes. Only this file system changes them
/// and every change goes through the kernel, so caching cannot show stale data.
const TTL: Duration = Duration::from_secs(60);

/// The contents of a regular file: its size and its non-zero pages (missing pages read as
/// zeros).
#[derive(Clone, Default)]
pub struct Content {
    len: u64,
    pages: BTreeMap<u64, Page>,
}

impl Content {
    fn from_bytes(bytes: &[u8]) -> Content {
        let mut c = Content::default();
        c.write(0, bytes);
        c
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, size: usize) -> Vec<u8> {
        let end = self.len.min(offset.saturating_add(size as u64));
        if offset >= end {
            return Vec::new();
        }
        let mut out = vec![0u8; (end - offset) as usize];
        let mut pos = offset;
        while pos < end {
            let (index, within) = (pos / PAGE as u64, (pos % PAGE as u64) as usize);
            let n = ((PAGE - within) as u64).min(end - pos) as usize;
            if let Some(page) = self.pages.get(&index) {
                let at = (pos - offset) as usize;
                out[at..at + n].copy_from_slice(&page[within..within + n]);
            }
            pos += n as u64;
        }
        out
    }

    pub fn to_vec(&self) -> Vec<u8> {
        self.read(0, self.len as usize)
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let (index, within) = (pos / PAGE as u64, (pos % PAGE as u64) as usize);
            let n = (PAGE - within).min(data.len() - done);
            let page = self.pages.entry(index).or_insert_with(|| Arc::new([0u8; PAGE]));
            // copies the page if the durable state still shares it
            Arc::make_mut(page)[within..within + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        self.len = self.len.max(offset + data.len() as u64);
    }

    /// Zeros `[offset, offset + len)` (within the current size).
    fn zero(&mut self, offset: u64, len: u64) {
        let end = self.len.min(offset.saturating_add(len));
        let mut pos = offset;
        while pos < end {
            let (index, within) = (pos / PAGE as u64, (pos % PAGE as u64) as usize);
            let n = ((PAGE - within) as u64).min(end - pos) as usize;
            if within == 0 && n == PAGE {
                self.pages.remove(&index);
            } else if let Some(page) = self.pages.get_mut(&index) {
                Arc::make_mut(page)[within..within + n].fill(0);
            }
            pos += n as u64;
        }
    }

    /// `ftruncate`: shrinking drops the bytes past `len`, growing reads as zeros.
    fn set_len(&mut self, len: u64) {
        if len < self.len {
            self.zero(len, self.len - len);
            let first_gone = len.div_ceil(PAGE as u64);
            self.pages.retain(|&index, _| index < first_gone);
        }
        self.len = len;
    }
}

/// What an inode is.
enum Body {
    File {
        now: Content,
        durable: Content,
    },
    Dir {
        now: BTreeMap<OsString, u64>,
        durable: BTreeMap<OsString, u64>,
        /// The directory that holds this one now (for `..`).
        parent: u64,
    },
}

struct Node {
    body: Body,
    /// Permission bits.
    perm: u16,
    uid: u32,
    gid: u32,
    /// Names that refer to this inode now (plus one for a directory's own `.`).
    nlink: u32,
    mtime: SystemTime,
    ctime: SystemTime,
}

/// Counts of what the file system was asked, for the reports.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub writes: u64,
    pub bytes_written: u64,
    pub fsyncs: u64,
    pub fdatasyncs: u64,
    pub dsync_writes: u64,
    pub dir_fsyncs: u64,
    /// Operations that arrived after the cut (answered `EIO`).
    pub after_cut: u64,
    /// Operations failed by the switch of [`PowerCutFs::fail`].
    pub failed: u64,
}

/// How the disk fails while the switch of [`PowerCutFs::fail`] is thrown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// A full disk: what needs space (writes, creations, growing a file) and every sync
    /// fail with `ENOSPC`.
    Full,
    /// A failing drive: every `fsync`/`fdatasync` fails with `EIO`; writes go through.
    Syncs,
}

/// What an operation asks of the disk, for the switch.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Needs {
    Space,
    Sync,
}

struct State {
    /// Inode `n` is `nodes[n - 1]`; inode 1 is the root. Inodes are never reused while
    /// mounted: an unlinked file may still be named in a durable directory.
    nodes: Vec<Node>,
    /// Set by the cut: every operation after it fails.
    dead: bool,
    /// The switch of [`PowerCutFs::fail`].
    failing: Option<Failure>,
    stats: Stats,
}

impl State {
    /// `Err` when the switch makes an operation that `needs` this fail.
    fn disk(&mut self, needs: Needs) -> Result<(), Errno> {
        let errno = match (self.failing, needs) {
            (Some(Failure::Full), _) => Errno::ENOSPC,
            (Some(Failure::Syncs), Needs::Sync) => Errno::EIO,
            _ => return Ok(()),
        };
        self.stats.failed += 1;
        Err(errno)
    }

    fn node(&self, ino: u64) -> Result<&Node, Errno> {
        self.nodes.get((ino as usize).wrapping_sub(1)).ok_or(Errno::ENOENT)
    }

    fn node_mut(&mut self, ino: u64) -> Result<&mut Node, Errno> {
        self.nodes.get_mut((ino as usize).wrapping_sub(1)).ok_or(Errno::ENOENT)
    }

    fn add_node(&mut self, body: Body, perm: u16, uid: u32, gid: u32) -> u64 {
        let nlink = match body {
            Body::Dir { .. } => 2,
            Body::File { .. } => 1,
        };
        let t = SystemTime::now();
        self.nodes.push(Node {
            body,
            perm,
            uid,
            gid,
            nlink,
            mtime: t,
            ctime: t,
        });
        self.nodes.len() as u64
    }

    fn entries(&self, dir: u64) -> Result<&BTreeMap<OsString, u64>, Errno> {
        match &self.node(dir)?.body {
            Body::Dir { now, .. } => Ok(now),
            Body::File { .. } => Err(Errno::ENOTDIR),
        }
    }

    fn entries_mut(&mut self, dir: u64) -> Result<&mut BTreeMap<OsString, u64>, Errno> {
        let node = self.node_mut(dir)?;
        node.mtime = SystemTime::now();
        match &mut node.body {
            Body::Dir { now, .. } => Ok(now),
            Body::File { .. } => Err(Errno::ENOTDIR),
        }
    }

    fn file_mut(&mut self, ino: u64) -> Result<&mut Content, Errno> {
        let node = self.node_mut(ino)?;
        node.mtime = SystemTime::now();
        match &mut node.body {
            Body::File { now, .. } => Ok(now),
            Body::Dir { .. } => Err(Errno::EISDIR),
        }
    }

    fn attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let node = self.node(ino)?;
        let (kind, size) = match &node.body {
            Body::File { now, .. } => (FileType::RegularFile, now.len),
            Body::Dir { now, .. } => (FileType::Directory, now.len() as u64),
        };
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: node.mtime,
            mtime: node.mtime,
            ctime: node.ctime,
            crtime: node.ctime,
            kind,
            perm: node.perm,
            nlink: node.nlink,
            uid: node.uid,
            gid: node.gid,
            rdev: 0,
            blksize: PAGE as u32,
            flags: 0,
        })
    }

    /// Makes the file's or directory's current state its durable state.
    fn sync(&mut self, ino: u64) -> Result<(), Errno> {
        match &mut self.node_mut(ino)?.body {
            Body::File { now, durable } => *durable = now.clone(),
            Body::Dir { now, durable, .. } => *durable = now.clone(),
        }
        Ok(())
    }

    /// Creates a file or directory named `name` in `parent`.
    fn create(&mut self, req: &Request, parent: u64, name: &OsStr, mode: u32, umask: u32) -> Result<u64, Errno> {
        if self.entries(parent)?.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        let perm = (mode & !umask & 0o7777) as u16;
        let body = match mode & libc::S_IFMT {
            libc::S_IFDIR => Body::Dir {
                now: BTreeMap::new(),
                durable: BTreeMap::new(),
                parent,
            },
            libc::S_IFREG | 0 => Body::File {
                now: Content::default(),
                durable: Content::default(),
            },
            _ => return Err(Errno::EPERM),
        };
        let is_dir = matches!(body, Body::Dir { .. });
        let ino = self.add_node(body, perm, req.uid(), req.gid());
        self.entries_mut(parent)?.insert(name.to_owned(), ino);
        if is_dir {
            self.node_mut(parent)?.nlink += 1;
        }
        Ok(ino)
    }

    /// Drops one name of `ino` (its inode stays: a durable directory may still name it).
    fn unlinked(&mut self, ino: u64) -> Result<(), Errno> {
        let node = self.node_mut(ino)?;
        node.nlink = node.nlink.saturating_sub(1);
        node.ctime = SystemTime::now();
        Ok(())
    }

    fn is_dir(&self, ino: u64) -> Result<bool, Errno> {
        Ok(matches!(self.node(ino)?.body, Body::Dir { .. }))
    }

    fn remove(&mut self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let ino = *self.entries(parent)?.get(name).ok_or(Errno::ENOENT)?;
        match (self.is_dir(ino)?, dir) {
            (true, false) => return Err(Errno::EISDIR),
            (false, true) => return Err(Errno::ENOTDIR),
            (true, true) if !self.entries(ino)?.is_empty() => return Err(Errno::ENOTEMPTY),
            _ => {}
        }
        self.entries_mut(parent)?.remove(name);
        self.unlinked(ino)?;
        if dir {
            self.unlinked(ino)?; // its `.`
            self.node_mut(parent)?.nlink -= 1;
        }
        Ok(())
    }

    fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            return Err(Errno::EINVAL);
        }
        let ino = *self.entries(parent)?.get(name).ok_or(Errno::ENOENT)?;
        self.entries(new_parent)?;
        if let Some(&old) = self.entries(new_parent)?.get(new_name) {
            if old == ino {
                return Ok(());
            }
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            let dir = self.is_dir(old)?;
            if dir != self.is_dir(ino)? {
                return Err(if dir { Errno::EISDIR } else { Errno::ENOTDIR });
            }
            self.remove(new_parent, new_name, dir)?;
        }
        self.entries_mut(parent)?.remove(name);
        self.entries_mut(new_parent)?.insert(new_name.to_owned(), ino);
        if let Body::Dir { parent: p, .. } = &mut self.node_mut(ino)?.body {
            *p = new_parent;
        }
        if self.is_dir(ino)? {
            self.node_mut(parent)?.nlink -= 1;
            self.node_mut(new_parent)?.nlink += 1;
        }
        self.node_mut(ino)?.ctime = SystemTime::now();
        Ok(())
    }

    /// The tree reachable from the root through `durable` (or current) directory entries.
    fn tree(&self, durable: bool) -> Vec<ImageEntry> {
        let mut out = Vec::new();
        let mut todo = vec![(PathBuf::new(), 1u64)];
        while let Some((path, dir)) = todo.pop() {
            let Ok(Node {
                body: Body::Dir { now, durable: d, .. },
                ..
            }) = self.node(dir)
            else {
                continue;
            };
            for (name, &ino) in if durable { d } else { now } {
                let path = path.join(name);
                let Ok(node) = self.node(ino) else { continue };
                let kind = match &node.body {
                    Body::Dir { .. } => {
                        todo.push((path.clone(), ino));
                        Kind::Dir
                    }
                    Body::File { now, durable: d } => Kind::File(if durable { d.clone() } else { now.clone() }),
                };
                out.push(ImageEntry {
                    path,
                    ino,
                    perm: node.perm,
                    kind,
                });
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out
    }
}

/// One file or directory of an [`Image`], by its path relative to the root.
#[derive(Clone)]
pub struct ImageEntry {
    pub path: PathBuf,
    pub ino: u64,
    pub perm: u16,
    pub kind: Kind,
}

#[derive(Clone)]
pub enum Kind {
    Dir,
    File(Content),
}

/// A whole tree: what survived a cut, or what was visible at that moment.
pub struct Image {
    pub entries: Vec<ImageEntry>,
}

impl Image {
    /// Writes the tree under `dir` (an existing, empty directory). Names of one inode
    /// become hard links.
    pub fn materialise(&self, dir: &Path) -> io::Result<()> {
        let mut written: HashMap<u64, PathBuf> = HashMap::new();
        for e in &self.entries {
            let path = dir.join(&e.path);
            match &e.kind {
                Kind::Dir => std::fs::create_dir(&path)?,
                Kind::File(content) => match written.get(&e.ino) {
                    Some(first) => std::fs::hard_link(first, &path)?,
                    None => {
                        std::fs::write(&path, content.to_vec())?;
                        written.insert(e.ino, path.clone());
                    }
                },
            }
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(e.perm as u32))?;
        }
        Ok(())
    }

    /// How `visible` (the tree at the cut) differs from this durable tree: one line per
    /// file or directory whose name or contents a restart will not find as they were.
    pub fn losses_against(&self, visible: &Image) -> Vec<String> {
        let durable: HashMap<&Path, &ImageEntry> = self.entries.iter().map(|e| (e.path.as_path(), e)).collect();
        let mut lines = Vec::new();
        for e in &visible.entries {
            match (durable.get(e.path.as_path()), &e.kind) {
                (None, Kind::Dir) => lines.push(format!("{}/: directory entry not durable", e.path.display())),
                (None, Kind::File(c)) => lines.push(format!(
                    "{}: directory entry not durable ({} bytes lost)",
                    e.path.display(),
                    c.len()
                )),
                (Some(d), Kind::File(c)) => {
                    let Kind::File(dc) = &d.kind else { continue };
                    if dc.len() != c.len() || dc.to_vec() != c.to_vec() {
                        lines.push(format!(
                            "{}: contents not durable (durable {} bytes, visible {} bytes)",
                            e.path.display(),
                            dc.len(),
                            c.len()
                        ));
                    }
                }
                (Some(_), Kind::Dir) => {}
            }
        }
        lines
    }
}

/// What a cut captured.
pub struct Cut {
    /// What survives: materialise it and restart on it.
    pub durable: Image,
    /// What the programs saw at the cut (for the loss report).
    pub visible: Image,
    pub stats: Stats,
}

/// The FUSE side: answers the kernel's requests from the shared state.
struct Fs {
    state: Arc<Mutex<State>>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Fs {
    /// Runs `op` on the live state; after the cut every operation fails with `EIO`.
    fn with<T>(&self, op: impl FnOnce(&mut State) -> Result<T, Errno>) -> Result<T, Errno> {
        let mut state = lock(&self.state);
        if state.dead {
            state.stats.after_cut += 1;
            return Err(Errno::EIO);
        }
        op(&mut state)
    }
}

/// Files are opened `direct_io`, so that writes reach this file system as they happen.
const OPEN_FLAGS: FopenFlags = FopenFlags::FOPEN_DIRECT_IO;

impl Filesystem for Fs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.with(|s| {
            let ino = *s.entries(parent.0)?.get(name).ok_or(Errno::ENOENT)?;
            s.attr(ino)
        }) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.with(|s| s.attr(ino.0)) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        match self.with(|s| {
            if let Some(size) = size {
                if size > s.attr(ino.0)?.size {
                    s.disk(Needs::Space)?;
                }
                s.file_mut(ino.0)?.set_len(size);
            }
            let node = s.node_mut(ino.0)?;
            if let Some(mode) = mode {
                node.perm = (mode & 0o7777) as u16;
            }
            node.uid = uid.unwrap_or(node.uid);
            node.gid = gid.unwrap_or(node.gid);
            match mtime {
                Some(TimeOrNow::SpecificTime(t)) => node.mtime = t,
                Some(TimeOrNow::Now) => node.mtime = SystemTime::now(),
                None => {}
            }
            node.ctime = SystemTime::now();
            s.attr(ino.0)
        }) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(Errno::EPERM);
        }
        match self.with(|s| {
            s.disk(Needs::Space)?;
            let ino = s.create(req, parent.0, name, mode, umask)?;
            s.attr(ino)
        }) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        match self.with(|s| {
            s.disk(Needs::Space)?;
            let ino = s.create(req, parent.0, name, libc::S_IFDIR | mode, umask)?;
            s.attr(ino)
        }) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.with(|s| s.remove(parent.0, name, false)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.with(|s| s.remove(parent.0, name, true)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        match self.with(|s| s.rename(parent.0, name, newparent.0, newname, flags)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        match self.with(|s| {
            s.disk(Needs::Space)?;
            if s.is_dir(ino.0)? {
                return Err(Errno::EPERM);
            }
            if s.entries(newparent.0)?.contains_key(newname) {
                return Err(Errno::EEXIST);
            }
            s.entries_mut(newparent.0)?.insert(newname.to_owned(), ino.0);
            let node = s.node_mut(ino.0)?;
            node.nlink += 1;
            node.ctime = SystemTime::now();
            s.attr(ino.0)
        }) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.with(|s| {
            // the kernel truncates through setattr; this covers an O_TRUNC passed anyway
            if flags.0 & libc::O_TRUNC != 0 {
                s.file_mut(ino.0)?.set_len(0);
            }
            s.attr(ino.0).map(|_| ())
        }) {
            Ok(()) => reply.opened(FileHandle(0), OPEN_FLAGS),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(Errno::EPERM);
        }
        match self.with(|s| {
            s.disk(Needs::Space)?;
            let ino = s.create(req, parent.0, name, mode, umask)?;
            s.attr(ino)
        }) {
            Ok(attr) => reply.created(&TTL, &attr, Generation(0), FileHandle(0), OPEN_FLAGS),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.with(|s| match &s.node(ino.0)?.body {
            Body::File { now, .. } => Ok(now.read(offset, size as usize)),
            Body::Dir { .. } => Err(Errno::EISDIR),
        }) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.with(|s| {
            s.disk(Needs::Space)?;
            s.file_mut(ino.0)?.write(offset, data);
            s.stats.writes += 1;
            s.stats.bytes_written += data.len() as u64;
            // `flags` are the descriptor's flags, with O_DSYNC added for RWF_DSYNC; O_SYNC
            // includes the O_DSYNC bit
            if flags.0 & libc::O_DSYNC != 0 {
                s.sync(ino.0)?;
                s.stats.dsync_writes += 1;
            }
            Ok(data.len() as u32)
        }) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        // close(2): not a sync
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        match self.with(|s| {
            s.disk(Needs::Sync)?;
            s.sync(ino.0)?;
            if datasync {
                s.stats.fdatasyncs += 1;
            } else {
                s.stats.fsyncs += 1;
            }
            Ok(())
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let listing = self.with(|s| {
            let Body::Dir { now, parent, .. } = &s.node(ino.0)?.body else {
                return Err(Errno::ENOTDIR);
            };
            let mut all = vec![
                (ino.0, FileType::Directory, OsString::from(".")),
                (*parent, FileType::Directory, OsString::from("..")),
            ];
            for (name, &child) in now {
                let kind = if s.is_dir(child)? {
                    FileType::Directory
                } else {
                    FileType::RegularFile
                };
                all.push((child, kind, name.clone()));
            }
            Ok(all)
        });
        match listing {
            Ok(all) => {
                for (i, (child, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(child), i as u64 + 1, kind, &name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        match self.with(|s| {
            s.disk(Needs::Sync)?;
            s.sync(ino.0)?;
            s.stats.dir_fsyncs += 1;
            Ok(())
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // a full disk has no free blocks
        let free = if lock(&self.state).failing == Some(Failure::Full) {
            0
        } else {
            1 << 23
        };
        reply.statfs(1 << 24, free, free, 1 << 20, 1 << 19, PAGE as u32, 255, PAGE as u32);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        match self.with(|s| {
            if mode & libc::FALLOC_FL_PUNCH_HOLE == 0 {
                s.disk(Needs::Space)?;
            }
            let content = s.file_mut(ino.0)?;
            if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 {
                content.zero(offset, length);
            } else if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
                return Err(Errno::EOPNOTSUPP);
            } else if mode & libc::FALLOC_FL_KEEP_SIZE == 0 && offset + length > content.len {
                content.set_len(offset + length);
            }
            Ok(())
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

/// The mounted file system, seen from the test.
pub struct PowerCutFs {
    state: Arc<Mutex<State>>,
    session: Option<fuser::BackgroundSession>,
    mountpoint: PathBuf,
}

impl PowerCutFs {
    /// Mounts a power-cut file system at `mountpoint` (an existing, empty directory) whose
    /// initial contents, all durable, are a copy of the tree under `initial` (empty when
    /// `None`). Needs `/dev/fuse` and the right to mount (root or CAP_SYS_ADMIN); uses the
    /// mount(2) system call directly, no `fusermount` or libfuse.
    pub fn mount(mountpoint: &Path, initial: Option<&Path>) -> io::Result<PowerCutFs> {
        let mut state = State {
            nodes: Vec::new(),
            dead: false,
            failing: None,
            stats: Stats::default(),
        };
        let root = state.add_node(
            Body::Dir {
                now: BTreeMap::new(),
                durable: BTreeMap::new(),
                parent: 1,
            },
            0o755,
            0,
            0,
        );
        assert_eq!(root, INodeNo::ROOT.0);
        if let Some(initial) = initial {
            load(&mut state, root, initial, &mut HashMap::new())?;
        }
        let state = Arc::new(Mutex::new(state));
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("pigeonhole-powercut".into()),
            MountOption::Subtype("powercut".into()),
            MountOption::RW,
            MountOption::NoAtime,
        ];
        let session = fuser::spawn_mount(Fs { state: state.clone() }, mountpoint, &config)?;
        Ok(PowerCutFs {
            state,
            session: Some(session),
            mountpoint: mountpoint.to_owned(),
        })
    }

    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    pub fn stats(&self) -> Stats {
        lock(&self.state).stats
    }

    /// Throws the switch: from now on the disk fails as `failure` says (`None`: it is
    /// healthy again). Takes effect for the next operation.
    pub fn fail(&self, failure: Option<Failure>) {
        lock(&self.state).failing = failure;
    }

    /// The tree as programs see it now (the disk of a restart that had no power cut).
    pub fn visible(&self) -> Image {
        Image {
            entries: lock(&self.state).tree(false),
        }
    }

    /// The power cut. In one critical section that no file system operation can interleave
    /// with: marks the file system dead (every later operation fails with `EIO`), runs
    /// `at_cut` (kill the server with SIGKILL), and captures the durable tree and, for the
    /// report, the visible one.
    pub fn cut(&self, at_cut: impl FnOnce()) -> Cut {
        let mut state = lock(&self.state);
        assert!(!state.dead, "the power was already cut");
        state.dead = true;
        at_cut();
        Cut {
            durable: Image {
                entries: state.tree(true),
            },
            visible: Image {
                entries: state.tree(false),
            },
            stats: state.stats,
        }
    }

    /// Unmounts (after the processes using it are gone) and stops the FUSE thread.
    pub fn unmount(mut self) {
        if let Some(session) = self.session.take() {
            if let Err(e) = session.umount_and_join() {
                eprintln!("unmounting {}: {e}; detaching it", self.mountpoint.display());
                detach(&self.mountpoint);
            }
        }
    }
}

impl Drop for PowerCutFs {
    fn drop(&mut self) {
        // a test that failed half-way: detach the mount so that nothing hangs on it
        if let Some(session) = self.session.take() {
            lock(&self.state).dead = true;
            detach(&self.mountpoint);
            drop(session);
        }
    }
}

/// Lazy unmount (`umount2(MNT_DETACH)`).
fn detach(mountpoint: &Path) {
    use std::os::unix::ffi::OsStrExt;
    if let Ok(path) = std::ffi::CString::new(mountpoint.as_os_str().as_bytes()) {
        #[expect(unsafe_code, reason = "std has no safe umount2(2)")]
        // SAFETY: umount2 reads a valid NUL-terminated path; no other preconditions.
        unsafe {
            libc::umount2(path.as_ptr(), libc::MNT_DETACH)
        };
    }
}

/// Copies the real tree under `dir` into the directory inode `into`, durable.
fn load(state: &mut State, into: u64, dir: &Path, links: &mut HashMap<(u64, u64), u64>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = std::fs::symlink_metadata(entry.path())?;
        let perm = (meta.permissions().mode() & 0o7777) as u16;
        let ino = if meta.is_dir() {
            let ino = state.add_node(
                Body::Dir {
                    now: BTreeMap::new(),
                    durable: BTreeMap::new(),
                    parent: into,
                },
                perm,
                meta.uid(),
                meta.gid(),
            );
            state.nodes[into as usize - 1].nlink += 1;
            load(state, ino, &entry.path(), links)?;
            ino
        } else if meta.is_file() {
            if let Some(&ino) = links.get(&(meta.dev(), meta.ino())) {
                state.nodes[ino as usize - 1].nlink += 1;
                ino
            } else {
                let content = Content::from_bytes(&std::fs::read(entry.path())?);
                let ino = state.add_node(
                    Body::File {
                        durable: content.clone(),
                        now: content,
                    },
                    perm,
                    meta.uid(),
                    meta.gid(),
                );
                links.insert((meta.dev(), meta.ino()), ino);
                ino
            }
        } else {
            return Err(io::Error::other(format!(
                "{}: only files and directories can be loaded",
                entry.path().display()
            )));
        };
        if let Body::Dir { now, .. } = &mut state.nodes[into as usize - 1].body {
            now.insert(entry.file_name(), ino);
        }
    }
    // everything loaded is durable
    state.sync(into).map_err(|e| io::Error::other(format!("{e:?}")))
}

#[cfg(test)]
mod tests {
    use super::Content;

    #[test]
    fn content_pages() {
        let mut c = Content::default();
        c.write(4090, &[1u8; 10]);
        assert_eq!(c.len(), 4100);
        let synced = c.clone();
        c.write(4095, &[2]);
        assert_eq!(synced.read(4095, 1), [1]);
        assert_eq!(c.read(4094, 3), [1, 2, 1]);
        c.set_len(4093);
        c.set_len(4100);
        assert_eq!(c.read(4090, 10), [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]);
        c.zero(4090, 2);
        assert_eq!(c.read(4088, 6), [0, 0, 0, 0, 1, 0]);
        assert_eq!(c.to_vec().len(), 4100);
    }
}

//! Large message bodies of the SQLite cache, appended to segment files beside
//! the database instead of stored in its rows.
//!
//! Why: SQLite writes a 32 KB row as nine WAL frames (two `pwrite`s each)
//! and copies them again at the checkpoint: about 120 µs of CPU per message
//! on the benchmark machine, where one append of the same bytes costs about
//! 10 µs (docs/benchmarks/relay-bridge.md, "The cache"). Signed envelopes of
//! up to about 45 KB are the bridge's usual traffic (SPEC §6.3), so this is
//! most of what caching costs. Rows keep `(body_file, body_offset)`.
//!
//! A frame is `[length u32 LE][CRC-32 u32 LE][body]`. The files are not
//! synced, like the database under `synchronous=NORMAL`: after a power loss a
//! row may outlive its frame, and a frame that does not check is skipped on
//! read, never returned. A file is deleted once no row names it.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

/// Bodies shorter than this stay in the row: for them the row is cheap and
/// a file read on catch-up would cost more than it saves.
pub const INLINE_MAX: usize = 4096;

/// A segment file is closed for appends past this size or after an hour of
/// message keys, so expired bodies are deleted within about an hour of the
/// cache duration.
const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
const SEGMENT_SPAN_US: i64 = 3600 * 1_000_000;

const HEADER: usize = 8;

/// Frames are gathered up to this much per `write`: few syscalls, and a
/// buffer that stays warm (one buffer for a whole batch of 512 × 32 KB
/// made every batch fault in 16 MB of fresh memory).
const WRITE_CHUNK: usize = 256 * 1024;

/// Where a body was written: (file number, offset of its frame).
pub type BodyRef = (i64, i64);

#[derive(Debug)]
struct Current {
    n: i64,
    file: File,
    len: u64,
    first_key: i64,
}

/// The segment files of one cache.
#[derive(Debug, Clone)]
pub struct Bodies {
    dir: PathBuf,
    cur: Arc<Mutex<Option<Current>>>,
    next: Arc<Mutex<i64>>,
}

fn name(n: i64) -> String {
    format!("seg-{n:012}.bin")
}

fn number(file_name: &str) -> Option<i64> {
    file_name
        .strip_prefix("seg-")?
        .strip_suffix(".bin")?
        .parse()
        .ok()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Bodies {
    /// The segment files in `dir` (created if missing). Appends always go
    /// to a new file: an old one may end in a torn frame.
    pub fn open(dir: &Path) -> Result<Bodies> {
        std::fs::create_dir_all(dir)?;
        let mut last = 0;
        for e in std::fs::read_dir(dir)? {
            if let Some(n) = e?.file_name().to_str().and_then(number) {
                last = last.max(n);
            }
        }
        Ok(Bodies {
            dir: dir.to_owned(),
            cur: Arc::new(Mutex::new(None)),
            next: Arc::new(Mutex::new(last + 1)),
        })
    }

    /// The directory beside a SQLite database URL's file, or None for an
    /// in-memory database or another backend.
    pub fn dir_for(url: &str) -> Option<PathBuf> {
        let path = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))?;
        let path = path.split('?').next()?;
        if path.is_empty() || path.contains(":memory:") {
            return None;
        }
        let p = Path::new(path);
        let stem = p.file_name()?.to_str()?;
        Some(p.with_file_name(format!("{stem}.bodies")))
    }

    /// Appends `bodies` (with the key of their batch's first message), all
    /// in one write; returns where each went. Blocking file I/O.
    pub fn append(&self, first_key: i64, bodies: &[&[u8]]) -> Result<Vec<BodyRef>> {
        let mut buf = Vec::with_capacity(WRITE_CHUNK * 2);
        let mut cur = lock(&self.cur);
        let rotate = match &*cur {
            None => true,
            Some(c) => c.len >= SEGMENT_BYTES || first_key - c.first_key >= SEGMENT_SPAN_US,
        };
        if rotate {
            let n = {
                let mut next = lock(&self.next);
                let n = *next;
                *next += 1;
                n
            };
            let file = OpenOptions::new()
                .create_new(true)
                .append(true)
                .open(self.dir.join(name(n)))?;
            *cur = Some(Current {
                n,
                file,
                len: 0,
                first_key,
            });
        }
        let Some(c) = cur.as_mut() else {
            return Err(Error::Corrupt("no body segment open".into()));
        };
        let mut refs = Vec::with_capacity(bodies.len());
        for (i, b) in bodies.iter().enumerate() {
            let len =
                u32::try_from(b.len()).map_err(|_| Error::Corrupt("body over 4 GiB".into()))?;
            refs.push((
                c.n,
                i64::try_from(c.len + buf.len() as u64).unwrap_or(i64::MAX),
            ));
            buf.extend_from_slice(&len.to_le_bytes());
            buf.extend_from_slice(&crc32fast::hash(b).to_le_bytes());
            buf.extend_from_slice(b);
            if buf.len() >= WRITE_CHUNK || i + 1 == bodies.len() {
                if let Err(e) = c.file.write_all(&buf) {
                    // The file's end is unknown now: the next batch starts
                    // a new one.
                    *cur = None;
                    return Err(e.into());
                }
                c.len += buf.len() as u64;
                buf.clear();
            }
        }
        Ok(refs)
    }

    /// The body at `at`, of the `len` bytes its row recorded, or None if
    /// its frame is missing or does not check (a file cut short by a
    /// crash). Blocking file I/O.
    pub fn read(&self, at: BodyRef, len: usize) -> Option<Vec<u8>> {
        self.reader().read(at, len)
    }

    /// Reads many bodies, keeping each file open once (a catch-up reads up
    /// to `MAX_CATCH_UP` of them).
    pub fn reader(&self) -> Reader<'_> {
        Reader {
            dir: &self.dir,
            open: HashMap::new(),
        }
    }

    /// The segment files closed for appends (all but the open one): only
    /// these may be deleted, since appends go to the open one alone and
    /// a closed file never gains a row. Blocking file I/O.
    pub fn closed(&self) -> Result<Vec<i64>> {
        let open = lock(&self.cur).as_ref().map(|c| c.n);
        let mut found = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            if let Some(n) = e?.file_name().to_str().and_then(number)
                && Some(n) != open
            {
                found.push(n);
            }
        }
        Ok(found)
    }

    /// Deletes closed segment file `n` (no row names it any more).
    /// Blocking file I/O.
    pub fn delete(&self, n: i64) -> Result<()> {
        if lock(&self.cur).as_ref().is_some_and(|c| c.n == n) {
            return Err(Error::Corrupt(format!("body file {n} is open")));
        }
        std::fs::remove_file(self.dir.join(name(n)))?;
        Ok(())
    }

    /// The segment files there are (for tests and `/metrics`).
    pub fn files(&self) -> Result<usize> {
        let mut n = 0;
        for e in std::fs::read_dir(&self.dir)? {
            if e?.file_name().to_str().and_then(number).is_some() {
                n += 1;
            }
        }
        Ok(n)
    }
}

/// Open segment files of one batch of reads.
pub struct Reader<'a> {
    dir: &'a Path,
    open: HashMap<i64, Option<File>>,
}

impl Reader<'_> {
    /// As [`Bodies::read`].
    pub fn read(&mut self, at: BodyRef, want: usize) -> Option<Vec<u8>> {
        let dir = self.dir;
        let file = self
            .open
            .entry(at.0)
            .or_insert_with(|| File::open(dir.join(name(at.0))).ok())
            .as_ref()?;
        let off = u64::try_from(at.1).ok()?;
        let mut h = [0u8; HEADER];
        file.read_exact_at(&mut h, off).ok()?;
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        // Checked before any allocation: a torn header reads as garbage.
        if len != want {
            return None;
        }
        let mut body = vec![0u8; len];
        file.read_exact_at(&mut body, off + HEADER as u64).ok()?;
        (crc32fast::hash(&body) == crc).then_some(body)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn frames_round_trip_and_a_bad_one_is_skipped() {
        let d = tempfile::tempdir().unwrap();
        let b = Bodies::open(d.path()).unwrap();
        let refs = b.append(0, &[b"one", &[7u8; 5000]]).unwrap();
        assert_eq!(b.read(refs[0], 3).unwrap(), b"one");
        assert_eq!(b.read(refs[1], 5000).unwrap(), vec![7u8; 5000]);
        // Not the length the row recorded: not read at all.
        assert!(b.read(refs[1], 100).is_none());
        assert!(b.read(refs[1], 5001).is_none());
        // One flipped byte in the body: the CRC refuses it.
        let path = d.path().join(name(refs[1].0));
        let mut bytes = std::fs::read(&path).unwrap();
        let at = refs[1].1 as usize + HEADER + 10;
        bytes[at] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(b.read(refs[1], 5000).is_none());
        // Cut short: missing.
        std::fs::write(&path, &bytes[..refs[1].1 as usize + 20]).unwrap();
        assert!(b.read(refs[1], 5000).is_none());
        assert_eq!(b.read(refs[0], 3).unwrap(), b"one");
    }

    #[test]
    fn segments_rotate_by_key_span_and_unused_ones_go() {
        let d = tempfile::tempdir().unwrap();
        let b = Bodies::open(d.path()).unwrap();
        let a = b.append(0, &[b"a"]).unwrap()[0];
        let c = b.append(SEGMENT_SPAN_US, &[b"c"]).unwrap()[0];
        assert_ne!(a.0, c.0, "an hour of keys later, a new file");
        assert_eq!(b.files().unwrap(), 2);
        // Only the first is closed; the open one cannot be deleted.
        assert_eq!(b.closed().unwrap(), [a.0]);
        assert!(b.delete(c.0).is_err());
        b.delete(a.0).unwrap();
        assert!(b.read(a, 1).is_none());
        assert_eq!(b.read(c, 1).unwrap(), b"c");
        // Reopened, appends go to a new file after the last one.
        let b2 = Bodies::open(d.path()).unwrap();
        let e = b2.append(SEGMENT_SPAN_US, &[b"e"]).unwrap()[0];
        assert!(e.0 > c.0);
        assert_eq!(b2.read(c, 1).unwrap(), b"c");
    }

    #[test]
    fn dir_beside_the_database_file() {
        assert_eq!(
            Bodies::dir_for("sqlite:///var/lib/x/cache.db?mode=rwc"),
            Some(PathBuf::from("/var/lib/x/cache.db.bodies"))
        );
        assert_eq!(Bodies::dir_for("sqlite::memory:"), None);
        assert_eq!(Bodies::dir_for("postgres://h/db"), None);
    }
}

//! Durable shard checkpoints of the stream event source mappings: for each
//! stream and shard, the sequence number of the last record processed
//! (delivered successfully, filtered out, or sent to the on-failure
//! destination), and whether the shard was read to its end. A restarted
//! runner resumes each shard after its checkpoint (AFTER_SEQUENCE_NUMBER)
//! and does not poll ended shards again.
//!
//! File shape (`checkpoints.json` in the stack directory):
//! ```json
//! {"version": 1, "streams": {"<stream arn>": {"<shard id>":
//!     {"sequence_number": "1100000000017454423042", "ended": false,
//!      "updated": "2026-11-22T00:13:49.717Z"}}}}
//! ```
//! Streams are keyed by ARN, which names the table's stream creation time:
//! a recreated table never resumes from an old stream's checkpoint.
//! Written atomically: a temporary file in the same directory, synced, then
//! renamed over the old one.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use chrono::{SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

/// Version of the file shape.
pub const VERSION: u32 = 1;

/// One shard's checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ShardCheckpoint {
    /// The last record processed; `None` if the shard ended before any.
    pub sequence_number: Option<String>,
    /// The shard is closed and was read to its end.
    #[serde(default)]
    pub ended: bool,
    /// When written, RFC 3339 (for people).
    #[serde(default)]
    pub updated: String,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointFile {
    /// [`VERSION`].
    pub version: u32,
    /// Stream ARN → shard id → checkpoint.
    pub streams: BTreeMap<String, BTreeMap<String, ShardCheckpoint>>,
}

impl Default for CheckpointFile {
    fn default() -> Self {
        CheckpointFile {
            version: VERSION,
            streams: BTreeMap::new(),
        }
    }
}

impl CheckpointFile {
    /// Read `path`; a missing file is an empty one.
    pub fn load(path: &Path) -> std::io::Result<CheckpointFile> {
        match std::fs::read(path) {
            Ok(bytes) => {
                let f: CheckpointFile = serde_json::from_slice(&bytes).map_err(|e| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
                })?;
                if f.version != VERSION {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("checkpoint file version {} (expected {VERSION})", f.version),
                    ));
                }
                Ok(f)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(CheckpointFile::default()),
            Err(e) => Err(e),
        }
    }

    /// Write to `path` atomically: temp file in the same directory, fsync,
    /// rename.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&dir)?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "checkpoints.json".into());
        let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
        let mut bytes = serde_json::to_vec_pretty(self)?;
        bytes.push(b'\n');
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        // The rename itself is durable once the directory is synced.
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// The checkpoint of one shard.
    pub fn get(&self, stream: &str, shard: &str) -> Option<&ShardCheckpoint> {
        self.streams.get(stream)?.get(shard)
    }
}

/// The runner's checkpoints: in memory, written through to the file.
#[derive(Debug)]
pub struct Checkpoints {
    path: PathBuf,
    file: Mutex<CheckpointFile>,
}

impl Checkpoints {
    /// Load from `path`. An unreadable file is moved aside (`.corrupt`) and
    /// the runner starts without checkpoints: records are then delivered
    /// again, which the engine tolerates (at-least-once, as on AWS).
    pub fn open(path: PathBuf) -> (Checkpoints, Option<String>) {
        let (file, warning) = match CheckpointFile::load(&path) {
            Ok(f) => (f, None),
            Err(e) => {
                let aside = path.with_extension("json.corrupt");
                let _ = std::fs::rename(&path, &aside);
                (
                    CheckpointFile::default(),
                    Some(format!(
                        "cannot read {}: {e}; moved to {}, starting without checkpoints",
                        path.display(),
                        aside.display()
                    )),
                )
            }
        };
        (
            Checkpoints {
                path,
                file: Mutex::new(file),
            },
            warning,
        )
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The checkpoint of one shard, if any.
    pub fn get(&self, stream: &str, shard: &str) -> Option<ShardCheckpoint> {
        self.lock().get(stream, shard).cloned()
    }

    /// Record that `shard` was processed up to `sequence_number` (and,
    /// with `ended`, read to its end), and write the file. Unchanged
    /// checkpoints are not written again.
    pub fn set(
        &self,
        stream: &str,
        shard: &str,
        sequence_number: Option<&str>,
        ended: bool,
    ) -> std::io::Result<()> {
        let mut f = self.lock();
        let entry = f
            .streams
            .entry(stream.to_string())
            .or_default()
            .entry(shard.to_string())
            .or_default();
        let seq = sequence_number
            .map(str::to_string)
            .or_else(|| entry.sequence_number.clone());
        if entry.sequence_number == seq && entry.ended == ended && !entry.updated.is_empty() {
            return Ok(());
        }
        entry.sequence_number = seq;
        entry.ended = ended;
        entry.updated = Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true);
        // Written under the lock: writers never race on the temp file.
        f.save(&self.path)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CheckpointFile> {
        self.file.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("wb-ckpt-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn round_trip_through_the_file() {
        let dir = temp_dir();
        let path = dir.join("checkpoints.json");
        let (c, warning) = Checkpoints::open(path.clone());
        assert!(warning.is_none());
        assert_eq!(c.get("arn:s1", "shard-a"), None);
        c.set("arn:s1", "shard-a", Some("105"), false).unwrap();
        c.set("arn:s1", "shard-b", None, true).unwrap();
        c.set("arn:s2", "shard-a", Some("7"), false).unwrap();
        // An ended shard keeps its last sequence number.
        c.set("arn:s2", "shard-a", None, true).unwrap();

        let (again, _) = Checkpoints::open(path.clone());
        let a = again.get("arn:s1", "shard-a").unwrap();
        assert_eq!(a.sequence_number.as_deref(), Some("105"));
        assert!(!a.ended);
        let b = again.get("arn:s1", "shard-b").unwrap();
        assert_eq!(b.sequence_number, None);
        assert!(b.ended);
        let s2 = again.get("arn:s2", "shard-a").unwrap();
        assert_eq!(s2.sequence_number.as_deref(), Some("7"));
        assert!(s2.ended);
        assert_eq!(
            CheckpointFile::load(&path).unwrap(),
            *again.file.lock().unwrap()
        );
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["checkpoints.json"]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn missing_file_is_empty_and_corrupt_file_is_moved_aside() {
        let dir = temp_dir();
        let path = dir.join("checkpoints.json");
        assert_eq!(
            CheckpointFile::load(&path).unwrap(),
            CheckpointFile::default()
        );
        std::fs::write(&path, b"{\"version\": 1, \"streams\": ").unwrap();
        let (c, warning) = Checkpoints::open(path.clone());
        assert!(warning.unwrap().contains("corrupt"));
        assert_eq!(c.get("a", "b"), None);
        assert!(dir.join("checkpoints.json.corrupt").exists());
        assert!(!path.exists());
        std::fs::remove_dir_all(dir).unwrap();
    }
}

//! Files a run reads and writes: the one reader of a checkpoint file, atomic
//! replacement that cannot be redirected by a planted symlink and leaves
//! nothing behind on failure, and the lock that keeps a second trainer out of
//! a run folder.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device};
use nrgpt_core::Checkpoint;

/// Reads a checkpoint file (f32 or quantized) as f32 on the CPU; the error
/// names the file and whether reading or checking it failed. A file written
/// before checksums loads with a note on stderr.
pub fn read_checkpoint(path: &Path) -> Result<Checkpoint> {
    let bytes = crate::read::bytes(path, crate::read::CHECKPOINT_LIMIT, "the checkpoint")?;
    let ck = Checkpoint::from_bytes(&bytes, DType::F32, &Device::Cpu).with_context(|| format!("loading {}", path.display()))?;
    if let Some(note) = ck.integrity.note() {
        eprintln!("note: {} is {note}", path.display());
    }
    Ok(ck)
}

/// Where [`write_atomic`] stages `path`: `NAME.tmp` beside it.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Writes `bytes` to `path` via a temp file and a rename, so a crash leaves
/// either the old file or the new one, never half of one. The temp file is
/// created exclusively (O_EXCL: a symlink planted there is not followed) and
/// removed again if anything fails; every error names the file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path(path);
    // a stale temp from a killed run, or a planted link: unlinking removes
    // the entry itself, never what a symlink points to
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("removing the stale {}", tmp.display()))
        }
        _ => {}
    }
    let result = stage_and_rename(&tmp, path, bytes);
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn stage_and_rename(tmp: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(tmp)
        .with_context(|| format!("creating {} (exclusively)", tmp.display()))?;
    f.write_all(bytes).with_context(|| format!("writing {} bytes to {}", bytes.len(), tmp.display()))?;
    f.sync_all().with_context(|| format!("syncing {}", tmp.display()))?;
    drop(f);
    std::fs::rename(tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

/// An exclusive lock on a run folder, held while the value lives. It is an
/// OS file lock, so a killed trainer's lock goes with its process and a
/// `--resume` after a crash is never refused.
pub struct RunLock {
    _file: File,
}

impl RunLock {
    pub fn acquire(dir: &Path) -> Result<Self> {
        let path = dir.join("lock");
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening the run lock {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => Ok(Self { _file: file }),
            Err(TryLockError::WouldBlock) => {
                bail!("another trainer is using {} (it holds {}): wait for it, or use another --out", dir.display(), path.display())
            }
            Err(TryLockError::Error(e)) => Err(e).with_context(|| format!("locking {}", path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nrgpt-files-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[cfg(unix)]
    #[test]
    fn a_planted_symlink_is_not_followed() {
        let d = dir("symlink");
        let victim = d.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let ckpt = d.join("ckpt.safetensors");
        std::os::unix::fs::symlink(&victim, tmp_path(&ckpt)).unwrap();
        write_atomic(&ckpt, b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious", "the symlink's target was overwritten");
        assert_eq!(std::fs::read(&ckpt).unwrap(), b"new");
        assert!(!tmp_path(&ckpt).exists());
    }

    #[test]
    fn a_failed_rename_leaves_no_temp_and_names_the_paths() {
        let d = dir("rename");
        // a directory in the way: the rename fails after the temp is written
        let out = d.join("model.safetensors");
        std::fs::create_dir_all(out.join("inside")).unwrap();
        let err = format!("{:#}", write_atomic(&out, b"data").unwrap_err());
        assert!(err.contains("renaming") && err.contains("model.safetensors.tmp"), "{err}");
        assert!(!tmp_path(&out).exists(), "the temp file was left behind");
        let err = format!("{:#}", write_atomic(&d.join("no/such/dir/x"), b"data").unwrap_err());
        assert!(err.contains("no/such/dir/x.tmp"), "{err}");
    }

    #[test]
    fn a_second_lock_on_a_run_is_refused_until_the_first_is_dropped() {
        let d = dir("lock");
        let first = RunLock::acquire(&d).unwrap();
        let err = RunLock::acquire(&d).err().expect("a second lock was granted").to_string();
        assert!(err.contains("another trainer") && err.contains("lock"), "{err}");
        drop(first);
        RunLock::acquire(&d).unwrap();
    }
}

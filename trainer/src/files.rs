//! Files the tools read and write: the one reader of a checkpoint file, the
//! reader of every other input file (regular files only), the one atomic
//! writer ([`atomic`]), and the lock that keeps a second trainer out of a run
//! folder.

use std::fs::{File, FileType, OpenOptions, TryLockError};
use std::path::Path;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device};
use nrgpt_core::Checkpoint;

mod atomic;
pub use atomic::{tmp_path, write_atomic};

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

/// What a file type is, for the message refusing it.
fn kind(t: &FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() || t.is_block_device() {
            return "a device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "a file of another kind"
    }
}

/// Opens an input file, refusing anything but a regular file by name. The
/// type is checked before `open`, which blocks on a FIFO until a writer
/// comes, and again on the open handle in case the path was swapped between.
pub fn open_regular(path: &Path) -> Result<File> {
    let refuse = |t: &FileType| bail!("{} is {}, not a regular file", path.display(), kind(t));
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_file() {
        return refuse(&meta.file_type());
    }
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let meta = file.metadata().with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_file() {
        return refuse(&meta.file_type());
    }
    Ok(file)
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
        let file =
            OpenOptions::new().write(true).create(true).truncate(false).open(&path).with_context(|| format!("opening the run lock {}", path.display()))?;
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
    use std::path::PathBuf;

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

    #[cfg(unix)]
    #[test]
    fn fifos_devices_and_directories_are_refused_by_name_without_blocking() {
        let d = dir("kinds");
        let fifo = d.join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        // no writer ever comes: opening it would block forever
        for (path, kind) in [(fifo.as_path(), "is a FIFO"), (Path::new("/dev/zero"), "is a device"), (d.as_path(), "is a directory")] {
            let err = format!("{:#}", crate::read::bytes(path, 1 << 20, "the input").unwrap_err());
            assert!(err.contains(&path.display().to_string()) && err.contains(kind) && err.contains("not a regular file"), "{err}");
        }
        let text = d.join("latin1.txt");
        std::fs::write(&text, b"ab\xe9c").unwrap();
        let err = crate::read::text(&text, 1 << 20, "the text").unwrap_err().to_string();
        assert!(err.contains("latin1.txt") && err.contains("byte 2"), "{err}");
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

//! The one writer of every file the tools write: atomic replacement that
//! cannot be redirected by a planted symlink and leaves nothing behind on
//! failure. Only std and anyhow, so `xtask` compiles this very file too
//! (`#[path]`) instead of keeping a second writer.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

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
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e).with_context(|| format!("removing the stale {}", tmp.display())),
        _ => {}
    }
    let result = stage_and_rename(&tmp, path, bytes);
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn stage_and_rename(tmp: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = OpenOptions::new().write(true).create_new(true).open(tmp).with_context(|| format!("creating {} (exclusively)", tmp.display()))?;
    f.write_all(bytes).with_context(|| format!("writing {} bytes to {}", bytes.len(), tmp.display()))?;
    f.sync_all().with_context(|| format!("syncing {}", tmp.display()))?;
    drop(f);
    std::fs::rename(tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

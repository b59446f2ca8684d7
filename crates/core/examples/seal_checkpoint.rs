//! Adds the digest to checkpoints written before checksums, keeping every
//! tensor and metadata entry bit for bit (no f32 source needed):
//!
//!     cargo run --release -p nrgpt-core --example seal_checkpoint -- www/models/default.safetensors ...
//!
//! Each file is replaced via a temp file beside it. A file the reader refuses
//! is left alone: sealing vouches for the bytes as they are, so only seal a
//! file you trust.

use std::path::Path;

use nrgpt_core::format::digest::{seal, DIGEST_KEY};
use nrgpt_core::format::header::open;
use nrgpt_core::format::{Integrity, PackedCheckpoint};

type Result<T> = std::result::Result<T, String>;

/// The bytes after the safetensors header: every tensor's data, in file order.
fn data_section(bytes: &[u8]) -> &[u8] {
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("an opened file has a header length"));
    &bytes[8 + n as usize..]
}

fn seal_file(path: &Path) -> Result<String> {
    let ctx = |e: nrgpt_core::Error| format!("{}: {e}", path.display());
    let bytes = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let before = PackedCheckpoint::from_bytes(&bytes).map_err(ctx)?;
    let (st, mut md) = open(&bytes).map_err(ctx)?;
    let tensors = st.tensors();
    seal(&mut md, &tensors).map_err(ctx)?;
    let out = safetensors::serialize(tensors, Some(md.clone())).map_err(|e| format!("{}: {e}", path.display()))?;

    // the proof: same tensors (names, dtypes, shapes, bytes) and metadata, plus the digest
    let (st2, md2) = open(&out).map_err(ctx)?;
    let mut old_md = md2.clone();
    old_md.remove(DIGEST_KEY);
    let (_, md1) = open(&bytes).map_err(ctx)?;
    let mut md1 = md1;
    md1.remove(DIGEST_KEY);
    if old_md != md1 {
        return Err(format!("{}: the metadata changed", path.display()));
    }
    for (name, t) in st.tensors() {
        let u = st2.tensor(&name).map_err(|e| format!("{}: `{name}` is gone: {e}", path.display()))?;
        if (t.dtype(), t.shape(), t.data()) != (u.dtype(), u.shape(), u.data()) {
            return Err(format!("{}: tensor `{name}` changed", path.display()));
        }
    }
    if st2.len() != st.len() || data_section(&out) != data_section(&bytes) {
        return Err(format!("{}: the data section changed", path.display()));
    }
    let after = PackedCheckpoint::from_bytes(&out).map_err(ctx)?;
    if after.integrity != Integrity::Verified {
        return Err(format!("{}: the sealed file does not verify", path.display()));
    }

    let tmp = path.with_extension("safetensors.tmp");
    std::fs::write(&tmp, &out).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("renaming {} to {}: {e}", tmp.display(), path.display()))?;
    Ok(format!(
        "{}: {} tensors, data section identical ({} bytes); {} -> {} bytes; was {:?}, now {:?}",
        path.display(),
        st.len(),
        data_section(&out).len(),
        bytes.len(),
        out.len(),
        before.integrity,
        after.integrity
    ))
}

fn main() {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() {
        eprintln!("usage: seal_checkpoint FILE.safetensors...");
        std::process::exit(2);
    }
    let mut failed = false;
    for p in &paths {
        match seal_file(Path::new(p)) {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("error: {e}");
                failed = true;
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
}

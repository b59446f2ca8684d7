//! `trainer export`: turns a training checkpoint into the file the page
//! downloads: the model alone (no optimizer state, no training metadata),
//! optionally quantized.

use std::path::Path;

use anyhow::{Context, Result};
use nrgpt_core::model::num_params;
use nrgpt_core::format::Scheme;

use crate::files::{read_checkpoint, write_atomic};

/// What an export wrote.
pub struct Exported {
    /// Size of the written file.
    pub bytes: usize,
    pub params: usize,
}

impl Exported {
    /// The file's size against the model's raw f32 weights (4 bytes a parameter).
    pub fn ratio_to_f32(&self) -> f64 {
        self.bytes as f64 / (4 * self.params) as f64
    }
}

/// Reads the checkpoint at `input` (f32 or already quantized) and writes its
/// model at `scheme` to `out`, atomically.
pub fn export(input: &Path, out: &Path, scheme: Scheme) -> Result<Exported> {
    let ck = read_checkpoint(input)?;
    let packed = ck.to_quant_bytes(scheme).with_context(|| format!("packing {} as {scheme}", input.display()))?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    write_atomic(out, &packed)?;
    Ok(Exported { bytes: packed.len(), params: num_params(&ck.config) })
}

//! The checksum every checkpoint carries, so "it loaded" means "it is the
//! file that was written": metadata entry `digest` holds a SHA-256 per
//! tensor (over its name, dtype, shape and bytes) and per metadata entry
//! (the config, the vocabulary, the train state, ...). Per entry rather
//! than one whole-file hash, so a mismatch names the tensor or entry that
//! changed; together they cover every byte the reader interprets, and a
//! tensor or entry added or dropped is a mismatch too.
//!
//! A digest catches damage (a flipped bit, a truncated copy, a hand edit),
//! not a forger: anyone can recompute it, so every bound of
//! [`crate::bounds`] is still checked after it. A file without one loads
//! as [`Integrity::Unverified`] only if it holds nothing but the entries
//! written before checksums.

use std::collections::BTreeMap;

use safetensors::{Dtype, SafeTensors, View};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::header::Metadata;
use crate::{Error, Result};

/// The metadata key of the digest (it covers every other entry).
pub const DIGEST_KEY: &str = "digest";

/// Every metadata entry a writer made before checksums: a file without a
/// digest holds only these, so one whose `digest` key was damaged (a bit
/// flip makes `dibest`) is refused, not taken for an old file.
const BEFORE_CHECKSUMS: [&str; 6] = ["format", "config", "vocab", "quant", "block", "train_state"];

/// How a loaded file was checked against its digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Integrity {
    /// Every tensor and metadata entry matched the file's digest. A
    /// checkpoint built in memory is `Verified` too: its writer digests it.
    Verified,
    /// The file has no digest: written before checksums existed.
    Unverified,
}

impl Integrity {
    /// The note a reader shows next to the model (none for a verified file).
    pub fn note(self) -> Option<&'static str> {
        match self {
            Integrity::Verified => None,
            Integrity::Unverified => Some("unverified: written before checksums"),
        }
    }
}

/// The `digest` entry: hex SHA-256 per metadata entry and per tensor.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Entry {
    sha256: Sums,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Sums {
    metadata: BTreeMap<String, String>,
    tensors: BTreeMap<String, String>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Length-prefixed fields, so no two different inputs hash the same bytes.
fn field(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

fn meta_sum(key: &str, value: &str) -> String {
    let mut h = Sha256::new();
    field(&mut h, b"nrgpt-web metadata");
    field(&mut h, key.as_bytes());
    field(&mut h, value.as_bytes());
    hex(&h.finalize())
}

fn tensor_sum(name: &str, dtype: Dtype, shape: &[usize], data: &[u8]) -> String {
    let mut h = Sha256::new();
    field(&mut h, b"nrgpt-web tensor");
    field(&mut h, name.as_bytes());
    field(&mut h, dtype.to_string().as_bytes());
    h.update((shape.len() as u64).to_le_bytes());
    shape.iter().for_each(|&d| h.update((d as u64).to_le_bytes()));
    field(&mut h, data);
    hex(&h.finalize())
}

/// Adds the `digest` entry for `tensors` and every other entry of `md`
/// (replacing any). It vouches for nothing but the bytes it is given: the
/// writers call it on what they wrote, and a file written before checksums
/// is sealed as it is (`examples/seal_checkpoint.rs`) once it loads.
pub fn seal<V: View>(md: &mut Metadata, tensors: &[(String, V)]) -> Result<()> {
    md.remove(DIGEST_KEY);
    let metadata = md.iter().map(|(k, v)| (k.clone(), meta_sum(k, v))).collect();
    let tensors = tensors.iter().map(|(n, t)| (n.clone(), tensor_sum(n, t.dtype(), t.shape(), &t.data()))).collect();
    md.insert(DIGEST_KEY.into(), serde_json::to_string(&Entry { sha256: Sums { metadata, tensors } })?);
    Ok(())
}

/// What failed: the subject (`tensor `x``, `metadata `config``) and how.
fn mismatch(subject: String, why: &'static str) -> Error {
    Error::Digest { subject, why }
}

/// Checks every tensor and metadata entry of an opened file against its
/// digest. Sorted by name, so the error names the same subject every time.
pub(crate) fn verify(st: &SafeTensors, md: &Metadata) -> Result<Integrity> {
    let Some(entry) = md.get(DIGEST_KEY) else {
        let mut keys: Vec<&String> = md.keys().collect();
        keys.sort();
        return match keys.into_iter().find(|k| !BEFORE_CHECKSUMS.contains(&k.as_str())) {
            Some(key) => {
                Err(Error::Checkpoint(format!("metadata `{key}` was never written without a `{DIGEST_KEY}`, and this file has none: it was damaged or edited")))
            }
            None => Ok(Integrity::Unverified),
        };
    };
    let Entry { sha256: sums } = serde_json::from_str(entry).map_err(|e| Error::Checkpoint(format!("metadata `{DIGEST_KEY}` does not parse: {e}")))?;
    let mut keys: Vec<&String> = md.keys().filter(|k| *k != DIGEST_KEY).collect();
    keys.sort();
    for key in keys {
        match sums.metadata.get(key) {
            None => return Err(mismatch(format!("metadata `{key}`"), "it is not in the digest")),
            Some(want) if *want != meta_sum(key, &md[key]) => return Err(mismatch(format!("metadata `{key}`"), "its hash differs")),
            Some(_) => {}
        }
    }
    if let Some(key) = sums.metadata.keys().find(|k| !md.contains_key(*k)) {
        return Err(mismatch(format!("metadata `{key}`"), "it is in the digest but not in the file"));
    }
    let mut names = st.names();
    names.sort();
    for name in &names {
        let t = st.tensor(name)?;
        match sums.tensors.get(*name) {
            None => return Err(mismatch(format!("tensor `{name}`"), "it is not in the digest")),
            Some(want) if *want != tensor_sum(name, t.dtype(), t.shape(), t.data()) => return Err(mismatch(format!("tensor `{name}`"), "its hash differs")),
            Some(_) => {}
        }
    }
    if let Some(name) = sums.tensors.keys().find(|n| !names.contains(&n.as_str())) {
        return Err(mismatch(format!("tensor `{name}`"), "it is in the digest but not in the file"));
    }
    Ok(Integrity::Verified)
}

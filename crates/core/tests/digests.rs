//! Checksummed checkpoints: damage that stays inside every bound (a flipped
//! weight byte, an in-range config edit) is refused by the digest, naming
//! what changed, and a file written before digests loads with a note.

mod common;

use std::ops::Range;

use candle_core::{DType, Device};
use common::{f32_bytes, quant_bytes, Parts};
use nrgpt_core::format::digest::DIGEST_KEY;
use nrgpt_core::format::{Integrity, PackedCheckpoint, Scheme};
use nrgpt_core::{Arch, Checkpoint};
use serde_json::{json, Value};

/// Both entry points refuse `bytes` with the same error; returns its text.
fn refused(bytes: &[u8]) -> String {
    let a = Checkpoint::from_bytes(bytes, DType::F32, &Device::Cpu).err().expect("Checkpoint::from_bytes accepted a damaged file").to_string();
    let b = PackedCheckpoint::from_bytes(bytes).expect_err("PackedCheckpoint accepted a damaged file").to_string();
    assert_eq!(a, b, "the two entry points disagree");
    a
}

/// Where tensor `name`'s bytes lie in the file (safetensors: u64 header length, JSON header, data).
fn tensor_range(bytes: &[u8], name: &str) -> Range<usize> {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let off = &header[name]["data_offsets"];
    let (a, b) = (off[0].as_u64().unwrap() as usize, off[1].as_u64().unwrap() as usize);
    8 + n + a..8 + n + b
}

/// The damage is in bounds: the same tensors under a fresh digest load.
fn loads_when_resealed(bytes: &[u8]) {
    PackedCheckpoint::from_bytes(&Parts::of(bytes).to_bytes()).expect("the damage should stay inside the reader's bounds");
}

#[test]
fn a_flipped_byte_inside_a_weight_is_refused_naming_the_tensor() {
    let cases = [
        // the low mantissa byte of an f32 weight: a change in the 7th digit
        (f32_bytes(Arch::NrgptFf2w), "block.ff.w1", 4 * 37),
        (f32_bytes(Arch::Ebt), "layers.0.attn.wq", 4 * 5),
        // one int8 code: any byte is another code in -128..=127
        (quant_bytes(Arch::NrgptFf2w, Scheme::Int8), "block.ff.w1.q", 41),
        (quant_bytes(Arch::Gpt, Scheme::Int4), "layers.0.mlp.w2.q", 9),
    ];
    for (file, name, at) in cases {
        let range = tensor_range(&file, name);
        assert!(at < range.len(), "{name}");
        let mut bad = file.clone();
        bad[range.start + at] ^= 0x01;
        loads_when_resealed(&bad);
        let err = refused(&bad);
        assert!(err.contains(&format!("tensor `{name}`")) && err.contains("digest"), "{err}");
    }
}

#[test]
fn an_in_range_config_edit_is_refused() {
    let edits: [(Arch, &str, Value); 5] = [
        (Arch::NrgptFf2w, "steps", json!(3)),
        (Arch::Ebt, "ebt_noise", json!(2.5)),
        (Arch::Ebt, "activation", json!("relu")),
        (Arch::Gpt, "n_head", json!(4)),
        (Arch::NrgptFf2w, "eps", json!(1e-3)),
    ];
    for (arch, field, value) in edits {
        let mut p = Parts::of(&f32_bytes(arch));
        p.edit_config(|c| {
            assert_ne!(c[field], value, "{field}: the edit must change it");
            c.insert(field.into(), value.clone());
            // the head split stays consistent: 4 heads of width 4 instead of 2 of 8
            if field == "n_head" {
                c.insert("head_dim".into(), json!(4));
            }
        });
        let bad = p.to_bytes_unsealed();
        loads_when_resealed(&bad);
        let err = refused(&bad);
        assert!(err.contains("metadata `config`") && err.contains("digest"), "{field}: {err}");
    }
}

#[test]
fn a_digit_changed_in_place_is_refused() {
    // the same edit made with a hex editor: the header keeps its length
    let file = f32_bytes(Arch::NrgptFf2w);
    let text = String::from_utf8_lossy(&file).into_owned();
    let at = text.find(r#"\"steps\":2"#).expect("the config names its steps") + r#"\"steps\":"#.len();
    let mut bad = file.clone();
    bad[at] = b'5';
    loads_when_resealed(&bad);
    assert!(refused(&bad).contains("metadata `config`"));
}

#[test]
fn entries_added_dropped_or_swapped_are_refused() {
    let file = f32_bytes(Arch::NrgptFf2w);
    let mut p = Parts::of(&file);
    p.meta.insert("train_state".into(), "{\"iter\":9}".into());
    assert!(refused(&p.to_bytes_unsealed()).contains("metadata `train_state`"));
    let mut p = Parts::of(&file);
    p.meta.insert("note".into(), "hi".into());
    assert!(refused(&p.to_bytes_unsealed()).contains("metadata `note` does not match the file's digest (it is not in the digest)"));
    let mut p = Parts::of(&file);
    p.meta.remove("train_state");
    assert!(refused(&p.to_bytes_unsealed()).contains("(it is in the digest but not in the file)"));
    // two same-shaped tensors trade places
    let mut p = Parts::of(&file);
    let (a, b) = (p.tensors["opt.m.head.b"].clone(), p.tensors["opt.v.head.b"].clone());
    p.tensors.insert("opt.m.head.b".into(), b);
    p.tensors.insert("opt.v.head.b".into(), a);
    assert!(refused(&p.to_bytes_unsealed()).contains("tensor `opt.m.head.b`"));
    let mut p = Parts::of(&file);
    p.meta.insert(DIGEST_KEY.into(), "{\"sha256\":".into());
    assert!(refused(&p.to_bytes_unsealed()).contains("metadata `digest` does not parse"));
}

#[test]
fn a_damaged_digest_key_does_not_pass_for_an_old_file() {
    // one flipped bit turns `digest` into `dibest`: the file then has no
    // digest, but an entry no writer made before checksums
    let file = quant_bytes(Arch::Gpt, Scheme::Int8);
    let at = String::from_utf8_lossy(&file).find("\"digest\"").unwrap() + 3;
    let mut bad = file.clone();
    bad[at] ^= 0x05;
    assert_eq!(bad[at], b'b');
    let err = refused(&bad);
    assert!(err.contains("metadata `dibest`") && err.contains("damaged"), "{err}");
}

#[test]
fn a_file_without_a_digest_loads_with_the_note() {
    for file in [f32_bytes(Arch::NrgptFf2w), quant_bytes(Arch::Ebt, Scheme::Int8)] {
        assert_eq!(PackedCheckpoint::from_bytes(&file).unwrap().integrity, Integrity::Verified);
        let mut p = Parts::of(&file);
        p.meta.remove(DIGEST_KEY).expect("the writers digest every file");
        let old = p.to_bytes_unsealed();
        let (packed, full) = (PackedCheckpoint::from_bytes(&old).unwrap(), Checkpoint::from_bytes(&old, DType::F32, &Device::Cpu).unwrap());
        assert_eq!((packed.integrity, full.integrity), (Integrity::Unverified, Integrity::Unverified));
        assert_eq!(full.integrity.note(), Some("unverified: written before checksums"));
        assert_eq!(Integrity::Verified.note(), None);
        // the digest never leaks into the free-form metadata a trainer writes back
        assert!(!full.meta.contains_key(DIGEST_KEY));
    }
}

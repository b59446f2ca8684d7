//! Structure-aware fuzzing of the checkpoint reader (f32 and quantized) and
//! the tokenizer reader, on stable Rust with proptest as the generator: each
//! input is a seed file from `tests/fuzz_corpus/` with 1-4 mutations applied
//! at the level of its structure (a value, a dtype, a shape, a name, a config
//! field, a metadata entry) or of its raw bytes (a flip, a truncation).
//!
//! Half the inputs are sealed again after the mutations (a fresh digest, as
//! a writer of bad tensors would make), so the reader's own rules must
//! refuse them; the other half keep the seed's digest (damage after
//! writing), so anything that changed must be refused by the digest.
//!
//! Property: the readers never panic, and what they accept is sound: the
//! config validates, every value is within its bound, a language model
//! built from it gives finite logits, and a file that kept its seed's
//! digest is the seed itself. `NRGPT_FUZZ_SECS` sets the budget
//! (default 60 s), `NRGPT_FUZZ_CHECKPOINTS` a count of checkpoint inputs
//! instead (the long run: 1000000), `NRGPT_FUZZ_SEED` replays a run;
//! inputs that fail are written to `target/fuzz-failures/` (add them to
//! the corpus as regressions).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use candle_core::{DType, Device, Tensor};
use common::{Parts, Raw};
use nrgpt_core::bounds::MAX_ABS_WEIGHT;
use nrgpt_core::format::{digest, Integrity, PackedCheckpoint, Scheme};
use nrgpt_core::layout::WeightLayout;
use nrgpt_core::{Arch, Checkpoint, ForwardOpts, Model, Vocab};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use safetensors::Dtype;
use serde_json::{json, Value};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_corpus")
}

/// The seed files, made by the shared test helpers (`NRGPT_BLESS=1` rewrites them).
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("nrgpt-ff2w.f32.safetensors", common::f32_bytes(Arch::NrgptFf2w)),
        ("gpt.int8.safetensors", common::quant_bytes(Arch::Gpt, Scheme::Int8)),
        ("ebt.int4.safetensors", common::quant_bytes(Arch::Ebt, Scheme::Int4)),
        ("nrgpt-ff1.f16.safetensors", common::quant_bytes(Arch::NrgptFf1, Scheme::F16)),
    ]
}

#[test]
fn the_checked_in_corpus_is_current() {
    let tok = std::fs::read_to_string(corpus_dir().join("tokenizer.json")).unwrap();
    Vocab::from_tokenizer_json(&tok).unwrap();
    for (name, bytes) in seeds() {
        let path = corpus_dir().join(name);
        if std::env::var_os("NRGPT_BLESS").is_some() {
            std::fs::write(&path, &bytes).unwrap();
        }
        let stored = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e} (NRGPT_BLESS=1 writes it)", path.display()));
        // compared taken apart: the header's key order is not fixed
        let (a, b) = (Parts::of(&stored), Parts::of(&bytes));
        assert!(a.meta == b.meta && a.tensors == b.tensors, "{name} is stale: rerun with NRGPT_BLESS=1");
        assert_eq!(PackedCheckpoint::from_bytes(&stored).unwrap().integrity, Integrity::Verified, "{name}");
    }
    let legacy = std::fs::read(corpus_dir().join(LEGACY_SEED)).unwrap();
    assert_eq!(PackedCheckpoint::from_bytes(&legacy).unwrap().integrity, Integrity::Unverified, "{LEGACY_SEED} has no digest");
}

#[derive(Debug, Clone)]
enum Mutation {
    SetValue { tensor: usize, elem: usize, value: f32 },
    FlipBits { tensor: usize, byte: usize, mask: u8 },
    Dtype { tensor: usize, dtype: usize },
    Shape { tensor: usize, dims: Vec<usize> },
    Remove { tensor: usize },
    Copy { tensor: usize, name: usize },
    Config { field: usize, value: usize },
    Meta { key: usize, value: usize },
    Truncate { at: usize },
    RawFlip { at: usize, mask: u8 },
}

const DTYPES: [Dtype; 8] = [Dtype::F32, Dtype::F16, Dtype::BF16, Dtype::F64, Dtype::U32, Dtype::I32, Dtype::U8, Dtype::I64];
const FIELDS: [&str; 15] = [
    "arch",
    "vocab_size",
    "d_model",
    "n_head",
    "head_dim",
    "steps",
    "layers",
    "ebt_noise",
    "block_size",
    "ff_mult",
    "norm",
    "eta",
    "activation",
    "eps",
    "extra_field",
];
const KEYS: [&str; 6] = ["format", "quant", "block", "vocab", "config", "train_state"];

fn config_values() -> Vec<Value> {
    vec![
        json!(0),
        json!(1),
        json!(2),
        json!(3),
        json!(16),
        json!(65536),
        json!(1u64 << 31),
        json!(1u64 << 32),
        json!(1u64 << 53),
        json!(1u64 << 63),
        json!(u64::MAX),
        json!(-1),
        json!(0.5),
        json!(-0.5),
        json!(1e300),
        json!("gpt"),
        json!("gpt-rec"),
        json!("ebt"),
        json!("nrgpt-ff1"),
        json!("nrgpt-ff2w"),
        json!("free"),
        json!("rms-norm"),
        json!("relu"),
        json!("bogus"),
        Value::Null,
        json!([1]),
        json!({}),
        json!(true),
    ]
}

fn meta_values() -> Vec<String> {
    [
        "nrgpt-web/f32/v1",
        "nrgpt-web/quant/v1",
        "int8",
        "int4",
        "f16",
        "f32",
        "int3",
        "32",
        "31",
        "",
        "\"ab\"",
        "\"aa\"",
        "\"\\n !',.:;?abcdefghijklmnopqrstuvwxyz\"",
        "{}",
        "{\"arch\":\"gpt\"}",
        "not json",
        "\u{0}",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn special_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        Just(f32::NAN),
        Just(f32::INFINITY),
        Just(f32::NEG_INFINITY),
        Just(3e38f32),
        Just(MAX_ABS_WEIGHT),
        Just(1001.0f32),
        Just(-0.0f32),
        Just(1e-45f32),
        Just(100.0f32),
        Just(-13.0f32),
        any::<f32>()
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let u = any::<usize>;
    prop_oneof![
        3 => (u(), u(), special_f32()).prop_map(|(tensor, elem, value)| Mutation::SetValue { tensor, elem, value }),
        2 => (u(), u(), 1u8..).prop_map(|(tensor, byte, mask)| Mutation::FlipBits { tensor, byte, mask }),
        1 => (u(), u()).prop_map(|(tensor, dtype)| Mutation::Dtype { tensor, dtype }),
        1 => (u(), prop::collection::vec(0usize..40, 0..4)).prop_map(|(tensor, dims)| Mutation::Shape { tensor, dims }),
        1 => u().prop_map(|tensor| Mutation::Remove { tensor }),
        1 => (u(), u()).prop_map(|(tensor, name)| Mutation::Copy { tensor, name }),
        3 => (u(), u()).prop_map(|(field, value)| Mutation::Config { field, value }),
        1 => (u(), u()).prop_map(|(key, value)| Mutation::Meta { key, value }),
        1 => u().prop_map(|at| Mutation::Truncate { at }),
        1 => (u(), 1u8..).prop_map(|(at, mask)| Mutation::RawFlip { at, mask }),
    ]
}

/// A file written before checksums (no digest), kept as it was written.
const LEGACY_SEED: &str = "legacy/nrgpt-ff2w.f32.safetensors";

/// A damaged file: seed `seed` with `muts` applied, then `sealed` again or with the seed's digest.
fn mutate(seed: &[u8], muts: &[Mutation], sealed: bool) -> Vec<u8> {
    let mut p = Parts::of(seed);
    let mut raw: Vec<(usize, Option<u8>)> = Vec::new(); // (position, Some(mask) flip | None truncate)
    for m in muts {
        let names: Vec<String> = p.tensors.keys().cloned().collect();
        let pick = |i: usize| names.get(i % names.len().max(1)).cloned();
        match m.clone() {
            Mutation::SetValue { tensor, elem, value } => {
                if let Some(r) = pick(tensor).and_then(|n| p.tensors.get_mut(&n)) {
                    let size = r.dtype.bitsize() / 8;
                    if r.bytes.len() >= size && size > 0 {
                        let at = elem % (r.bytes.len() / size) * size;
                        let b = match r.dtype {
                            Dtype::F16 => half::f16::from_f32(value).to_le_bytes().to_vec(),
                            _ => value.to_le_bytes().to_vec(),
                        };
                        let n = size.min(b.len());
                        r.bytes[at..at + n].copy_from_slice(&b[..n]);
                    }
                }
            }
            Mutation::FlipBits { tensor, byte, mask } => {
                if let Some(r) = pick(tensor).and_then(|n| p.tensors.get_mut(&n)).filter(|r| !r.bytes.is_empty()) {
                    let at = byte % r.bytes.len();
                    r.bytes[at] ^= mask;
                }
            }
            Mutation::Dtype { tensor, dtype } => {
                if let Some(r) = pick(tensor).and_then(|n| p.tensors.get_mut(&n)) {
                    r.dtype = DTYPES[dtype % DTYPES.len()];
                    let numel: usize = r.shape.iter().product();
                    r.bytes.resize(numel * r.dtype.bitsize() / 8, 0);
                }
            }
            Mutation::Shape { tensor, dims } => {
                if let Some(r) = pick(tensor).and_then(|n| p.tensors.get_mut(&n)) {
                    let numel: usize = dims.iter().product();
                    r.shape = dims;
                    r.bytes.resize(numel * r.dtype.bitsize() / 8, 0);
                }
            }
            Mutation::Remove { tensor } => {
                if let Some(n) = pick(tensor) {
                    p.tensors.remove(&n);
                }
            }
            Mutation::Copy { tensor, name } => {
                if let (Some(src), Some(dst)) = (pick(tensor), pick(name)) {
                    let r: Raw = p.tensors[&src].clone();
                    // onto another tensor's name, or a new one beside it
                    let dst = if name % 3 == 0 {
                        format!("{dst}.q")
                    } else if name % 3 == 1 {
                        format!("opt.m.{dst}")
                    } else {
                        dst
                    };
                    p.tensors.insert(dst, r);
                }
            }
            Mutation::Config { field, value } => {
                let vals = config_values();
                if p.meta.contains_key("config") && serde_json::from_str::<Value>(&p.meta["config"]).is_ok_and(|v| v.is_object()) {
                    p.edit_config(|c| {
                        c.insert(FIELDS[field % FIELDS.len()].into(), vals[value % vals.len()].clone());
                    });
                }
            }
            Mutation::Meta { key, value } => {
                let vals = meta_values();
                p.meta.insert(KEYS[key % KEYS.len()].into(), vals[value % vals.len()].clone());
            }
            Mutation::Truncate { at } => raw.push((at, None)),
            Mutation::RawFlip { at, mask } => raw.push((at, Some(mask))),
        }
    }
    let mut bytes = if sealed { p.to_bytes() } else { p.to_bytes_unsealed() };
    for (at, op) in raw {
        if bytes.is_empty() {
            break;
        }
        // the header is the interesting part: aim most raw damage there
        let header = match bytes.get(..8) {
            Some(len) => 8 + u64::from_le_bytes(len.try_into().unwrap()).min(bytes.len() as u64) as usize,
            None => bytes.len(),
        };
        let at = if at % 4 == 0 { at % bytes.len() } else { at % header.min(bytes.len()) };
        match op {
            Some(mask) => bytes[at] ^= mask,
            None => bytes.truncate(at),
        }
    }
    bytes
}

/// What a loader's acceptance must mean. `Err` describes a broken promise.
/// `seed`: the digested file `bytes` was made from while keeping its digest.
fn check_checkpoint(bytes: &[u8], seed: Option<&[u8]>) -> Result<bool, String> {
    let packed = PackedCheckpoint::from_bytes(bytes);
    let full = Checkpoint::from_bytes(bytes, DType::F32, &Device::Cpu);
    if packed.is_ok() != full.is_ok() {
        return Err(format!("the readers disagree: packed {:?}, full {:?}", packed.err(), full.err().map(|e| e.to_string())));
    }
    let (Ok(p), Ok(ck)) = (packed, full) else { return Ok(false) };
    if let Some(seed) = seed {
        let (got, want) = (Parts::of(bytes), Parts::of(seed));
        if got.meta != want.meta || got.tensors != want.tensors {
            return Err("accepted a changed file under its old digest".into());
        }
    }
    if p.integrity != ck.integrity || (p.integrity == Integrity::Unverified) != bytes_lack_digest(bytes) {
        return Err(format!("integrity {:?} / {:?} does not say whether the file has a digest", p.integrity, ck.integrity));
    }
    p.config.validate().map_err(|e| format!("accepted a config that does not validate: {e}"))?;
    if p.layout != WeightLayout::new(&p.config) || p.tensors.len() != p.layout.specs.len() {
        return Err("accepted tensors that are not the config's layout".into());
    }
    for (i, spec) in p.layout.specs.iter().enumerate() {
        let v = p.values(i);
        if v.len() != spec.numel() || v.iter().any(|x| x.is_nan() || x.abs() > MAX_ABS_WEIGHT) {
            return Err(format!("accepted `{}` with {} values, some out of bounds", spec.name, v.len()));
        }
    }
    if ck.config.arch != Arch::Ebt {
        let model = Model::new(&ck.config, &ck.weights).map_err(|e| format!("accepted, but no model: {e}"))?;
        let n = ck.config.block_size.min(3);
        let ids = Tensor::from_vec((0..n as u32).map(|i| i % ck.config.vocab_size as u32).collect(), (1, n), &Device::Cpu).unwrap();
        let logits: Vec<f32> = model.forward(&ids, ForwardOpts::default()).map_err(|e| e.to_string())?.logits.flatten_all().unwrap().to_vec1().unwrap();
        if logits.iter().any(|x| !x.is_finite()) {
            return Err("accepted a model whose logits are not finite".into());
        }
    }
    Ok(true)
}

fn bytes_lack_digest(bytes: &[u8]) -> bool {
    !Parts::of(bytes).meta.contains_key(digest::DIGEST_KEY)
}

#[derive(Debug, Clone)]
enum TokMutation {
    SetId { token: usize, value: usize },
    Remove { token: usize },
    Insert { token: usize, value: usize },
    Replace { path: usize, value: usize },
    RawFlip { at: usize, mask: u8 },
    Truncate { at: usize },
}

fn tok_mutation() -> impl Strategy<Value = TokMutation> {
    let u = any::<usize>;
    prop_oneof![
        (u(), u()).prop_map(|(token, value)| TokMutation::SetId { token, value }),
        u().prop_map(|token| TokMutation::Remove { token }),
        (u(), u()).prop_map(|(token, value)| TokMutation::Insert { token, value }),
        (u(), u()).prop_map(|(path, value)| TokMutation::Replace { path, value }),
        (u(), 1u8..).prop_map(|(at, mask)| TokMutation::RawFlip { at, mask }),
        u().prop_map(|at| TokMutation::Truncate { at }),
    ]
}

/// `model.vocab` when the mutations so far left it an object.
fn vocab_mut(v: &mut Value) -> Option<&mut serde_json::Map<String, Value>> {
    v.get_mut("model")?.get_mut("vocab")?.as_object_mut()
}

fn mutate_tokenizer(seed: &str, muts: &[TokMutation]) -> String {
    let mut v: Value = serde_json::from_str(seed).unwrap();
    let tokens = ["a", "ab", "", "é", "🦀", "\n", "\u{0}", "aa", "Z"];
    let mut vals = config_values();
    vals.extend([json!(64), json!(65), json!(66)]);
    let mut text: Option<Vec<u8>> = None;
    for m in muts {
        let keys: Vec<String> = v["model"]["vocab"].as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default();
        let key = |i: usize| keys.get(i % keys.len().max(1)).cloned();
        match m.clone() {
            TokMutation::SetId { token, value } => {
                if let (Some(k), Some(o)) = (key(token), vocab_mut(&mut v)) {
                    o.insert(k, vals[value % vals.len()].clone());
                }
            }
            TokMutation::Remove { token } => {
                if let (Some(k), Some(o)) = (key(token), vocab_mut(&mut v)) {
                    o.remove(&k);
                }
            }
            TokMutation::Insert { token, value } => {
                if let Some(o) = vocab_mut(&mut v) {
                    o.insert(tokens[token % tokens.len()].into(), vals[value % vals.len()].clone());
                }
            }
            TokMutation::Replace { path, value } => {
                let val = vals[value % vals.len()].clone();
                match path % 3 {
                    0 => {
                        if let Some(o) = v.as_object_mut() {
                            o.insert("model".into(), val);
                        }
                    }
                    1 => {
                        if let Some(m) = v.get_mut("model").and_then(Value::as_object_mut) {
                            m.insert("vocab".into(), val);
                        }
                    }
                    _ => v = val,
                }
            }
            TokMutation::RawFlip { at, mask } => {
                let t = text.get_or_insert_with(|| v.to_string().into_bytes());
                if !t.is_empty() {
                    let i = at % t.len();
                    t[i] ^= mask;
                }
            }
            TokMutation::Truncate { at } => {
                let t = text.get_or_insert_with(|| v.to_string().into_bytes());
                t.truncate(at % (t.len() + 1));
            }
        }
    }
    let bytes = text.unwrap_or_else(|| v.to_string().into_bytes());
    String::from_utf8_lossy(&bytes).into_owned()
}

fn check_tokenizer(json: &str) -> Result<bool, String> {
    let Ok(vocab) = Vocab::from_tokenizer_json(json) else { return Ok(false) };
    let ids: Vec<u32> = (0..vocab.len() as u32).collect();
    let text = vocab.decode(&ids);
    if vocab.encode(&text).map_err(|e| e.to_string())? != ids {
        return Err("accepted a vocabulary that does not round-trip".into());
    }
    Ok(true)
}

fn save_failure(name: &str, bytes: &[u8], why: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/fuzz-failures");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    eprintln!("fuzz finding: {why}; input written to {}", path.display());
    path
}

#[test]
fn fuzz_the_loaders_for_a_fixed_budget() {
    let secs: u64 = std::env::var("NRGPT_FUZZ_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let count: Option<usize> = std::env::var("NRGPT_FUZZ_CHECKPOINTS").ok().and_then(|s| s.parse().ok());
    let seed: u64 = std::env::var("NRGPT_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(Config::default(), TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes));
    let mut files: Vec<Vec<u8>> = seeds().into_iter().map(|(n, _)| std::fs::read(corpus_dir().join(n)).unwrap()).collect();
    files.push(std::fs::read(corpus_dir().join(LEGACY_SEED)).unwrap());
    let tokenizer = std::fs::read_to_string(corpus_dir().join("tokenizer.json")).unwrap();
    let ck_input = (0..files.len(), prop::collection::vec(mutation(), 1..5), any::<bool>());
    let tok_input = prop::collection::vec(tok_mutation(), 1..5);

    let t0 = Instant::now();
    let (mut tried, mut accepted, mut tok_tried, mut tok_accepted) = (0usize, 0usize, 0usize, 0usize);
    let (mut stale, mut stale_accepted) = (0usize, 0usize);
    let mut failures = Vec::new();
    while count.map_or(t0.elapsed() < Duration::from_secs(secs), |n| tried < n) {
        // three checkpoints to one tokenizer: the checkpoint reader is the larger surface
        if tried % 3 == 2 {
            let muts = tok_input.new_tree(&mut runner).unwrap().current();
            let json = mutate_tokenizer(&tokenizer, &muts);
            match std::panic::catch_unwind(|| check_tokenizer(&json)) {
                Ok(Ok(ok)) => tok_accepted += ok as usize,
                Ok(Err(why)) => failures.push(save_failure(&format!("tokenizer-{tok_tried}.json"), json.as_bytes(), &why)),
                Err(_) => failures.push(save_failure(&format!("tokenizer-{tok_tried}.json"), json.as_bytes(), "panic")),
            }
            tok_tried += 1;
        }
        let (i, muts, sealed) = ck_input.new_tree(&mut runner).unwrap().current();
        let bytes = mutate(&files[i], &muts, sealed);
        // the seed whose digest the file still carries
        let seed = (!sealed && !bytes_lack_digest(&files[i])).then_some(&files[i][..]);
        stale += seed.is_some() as usize;
        match std::panic::catch_unwind(|| check_checkpoint(&bytes, seed)) {
            Ok(Ok(ok)) => {
                accepted += ok as usize;
                stale_accepted += (ok && seed.is_some()) as usize;
            }
            Ok(Err(why)) => failures.push(save_failure(&format!("ckpt-{tried}.safetensors"), &bytes, &format!("{why} after {muts:?}"))),
            Err(_) => failures.push(save_failure(&format!("ckpt-{tried}.safetensors"), &bytes, &format!("panic after {muts:?}"))),
        }
        tried += 1;
    }
    let s = t0.elapsed().as_secs_f64();
    println!(
        "fuzz (seed {seed}): {tried} checkpoints ({accepted} accepted; {stale} kept their seed's digest, {stale_accepted} of them accepted unchanged) and {tok_tried} tokenizers ({tok_accepted} accepted) in {s:.1} s, {:.0} inputs/s, {} findings",
        (tried + tok_tried) as f64 / s,
        failures.len()
    );
    assert!(tried > 0 && accepted > 0 && tok_accepted > 0, "the mutator never left a file valid: it tests nothing deep");
    assert!(failures.is_empty(), "{} findings: {failures:?}", failures.len());
}

/// Every file in `fuzz_corpus/regressions/` (past findings) is refused or loads soundly.
#[test]
fn past_findings_stay_fixed() {
    let Ok(dir) = std::fs::read_dir(corpus_dir().join("regressions")) else { return };
    for entry in dir {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let r = if path.extension().is_some_and(|e| e == "json") { check_tokenizer(&String::from_utf8_lossy(&bytes)) } else { check_checkpoint(&bytes, None) };
        r.unwrap_or_else(|why| panic!("{}: {why}", path.display()));
    }
}

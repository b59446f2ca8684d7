//! Every checkpoint the page offers (www/models/manifest.json) is what the
//! manifest says it is, loads, and is a trained model: its loss on the start
//! of the validation split is near the whole-split loss the manifest records.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use nrgpt_core::model::num_params;
use nrgpt_core::bounds::memory;
use nrgpt_core::format::Integrity;
use nrgpt_core::Checkpoint;
use serde::Deserialize;
use trainer::data::Corpus;
use trainer::eval::full_loss;
use trainer::net::{Net, Thinking};

#[derive(Deserialize)]
struct Entry {
    name: String,
    file: String,
    arch: String,
    params: usize,
    size: u64,
    /// Whole val split, `trainer eval` on this very file.
    val_loss: f64,
}

#[derive(Deserialize)]
struct Manifest {
    models: Vec<Entry>,
}

fn root(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

#[test]
fn manifest_entries_are_the_trained_models_they_claim() {
    let manifest: Manifest = serde_json::from_str(&std::fs::read_to_string(root("www/models/manifest.json")).unwrap()).unwrap();
    assert!(manifest.models.iter().any(|m| m.name == "default"), "the page loads the entry named default first");
    for m in &manifest.models {
        let path = root("www/models").join(&m.file);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(bytes.len() as u64, m.size, "{}: size in the manifest", m.name);
        assert!(bytes.len() <= 1_000_000, "{}: shipped checkpoints stay <= 1 MB", m.name);
        let ck = Checkpoint::from_bytes(&bytes, DType::F32, &Device::Cpu).unwrap();
        // every shipped file carries its digest; the EBT is re-exported by its own run (issue 39)
        if m.name != "ebt" {
            assert_eq!(ck.integrity, Integrity::Verified, "{}: no digest (examples/seal_checkpoint.rs adds one)", m.name);
        }
        assert_eq!(ck.config.arch.name(), m.arch, "{}: arch", m.name);
        assert_eq!(num_params(&ck.config), m.params, "{}: params", m.name);
        memory::decode(&ck.config).check(memory::PAGE).unwrap_or_else(|e| panic!("{}: {e}", m.name));
        let corpus = Corpus::load(&root("data/tinyshakespeare/input.txt"), &ck.vocab).unwrap();
        // 16k characters: the start of the split is a little easier or harder
        // than the whole, never by 0.15 nats on these models
        let part = &corpus.val[..16_384];
        let net = Net::new(&ck.config, &ck.weights).unwrap();
        let loss = full_loss(&net, part, 32, Thinking::default(), &mut |_, _| {}).unwrap();
        assert!((loss - m.val_loss).abs() < 0.15, "{}: loss {loss:.4} on 16k val chars vs {:.4} recorded", m.name, m.val_loss);
        assert!(loss < 2.5, "{}: an untrained model scores ~4.2; got {loss:.4}", m.name);
    }
}

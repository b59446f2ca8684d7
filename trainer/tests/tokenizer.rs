//! The committed tokenizer.json is what the `tokenizers` crate makes from the
//! corpus, and the core's reader encodes exactly as the `tokenizers` crate does.

use nrgpt_core::Vocab;
use std::str::FromStr;

use tokenizers::Tokenizer;
use trainer::vocab_file::tokenizer_json;

fn root(p: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

#[test]
fn committed_tokenizer_matches_corpus_and_core_reader() {
    let text = std::fs::read_to_string(root("data/tinyshakespeare/input.txt")).unwrap();
    let committed = std::fs::read_to_string(root("www/tokenizer.json")).unwrap();
    let vocab = Vocab::from_text(&text).unwrap();
    assert_eq!(vocab.len(), 65);
    assert_eq!(tokenizer_json(&vocab).unwrap(), committed, "www/tokenizer.json is stale: run `trainer vocab`");

    let core = Vocab::from_tokenizer_json(&committed).unwrap();
    let hf = Tokenizer::from_str(&committed).unwrap();
    let sample: String = text.chars().take(20_000).collect();
    let ours = core.encode(&sample).unwrap();
    let theirs = hf.encode(sample.as_str(), false).unwrap().get_ids().to_vec();
    assert_eq!(ours, theirs);
    assert_eq!(hf.decode(&theirs, false).unwrap(), sample, "Fuse decoder must round-trip");
}

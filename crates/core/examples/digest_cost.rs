//! What verifying a checkpoint's digest costs at load: the one reader on a
//! file as shipped and on the same file without its digest (best of 30 each):
//!
//!     cargo run --release -p nrgpt-core --example digest_cost [-- FILE]   (default: www/models/default.safetensors)

use std::time::{Duration, Instant};

use nrgpt_core::format::digest::DIGEST_KEY;
use nrgpt_core::format::header::open;
use nrgpt_core::format::{Integrity, PackedCheckpoint};

fn best_of(n: usize, bytes: &[u8]) -> (Duration, Integrity) {
    let mut best = Duration::MAX;
    let mut integrity = Integrity::Unverified;
    for _ in 0..n {
        let t = Instant::now();
        integrity = PackedCheckpoint::from_bytes(bytes).expect("the file loads").integrity;
        best = best.min(t.elapsed());
    }
    (best, integrity)
}

fn main() {
    let path = std::env::args().nth(1).unwrap_or_else(|| "www/models/default.safetensors".into());
    let sealed = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let (st, mut md) = open(&sealed).expect("a safetensors file");
    md.remove(DIGEST_KEY);
    let bare = safetensors::serialize(st.tensors(), Some(md)).expect("serialising");
    let (with, a) = best_of(30, &sealed);
    let (without, b) = best_of(30, &bare);
    assert_eq!((a, b), (Integrity::Verified, Integrity::Unverified), "{path} should carry a digest");
    println!(
        "{path} ({} bytes): load {:.2} ms verified, {:.2} ms without the digest: verification {:.2} ms",
        sealed.len(),
        with.as_secs_f64() * 1e3,
        without.as_secs_f64() * 1e3,
        (with.as_secs_f64() - without.as_secs_f64()) * 1e3
    );
}

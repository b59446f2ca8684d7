//! A long `sample` shows what it writes as it writes it: the characters reach
//! stdout one by one (a kill keeps them), and a progress line reaches stderr
//! once the run has taken a few seconds.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn root(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

/// Collects what `pipe` delivers, as it arrives.
fn collect(mut pipe: impl Read + Send + 'static) -> Arc<Mutex<Vec<u8>>> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let sink = got.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        while let Ok(n @ 1..) = pipe.read(&mut buf) {
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    got
}

/// Waits until `done` holds of `got`, failing after `limit`.
fn wait_for(child: &mut Child, got: &Mutex<Vec<u8>>, limit: Duration, what: &str, done: impl Fn(&str) -> bool) -> String {
    let t0 = Instant::now();
    loop {
        let text = String::from_utf8_lossy(&got.lock().unwrap()).into_owned();
        if done(&text) {
            return text;
        }
        if t0.elapsed() > limit {
            child.kill().unwrap();
            panic!("no {what} after {limit:?}; so far: {text:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_long_sample_streams_its_characters_and_shows_progress() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .current_dir(root(""))
        .args(["sample", "--ckpt", "www/models/small.safetensors", "--prompt", "ROMEO:", "--len", "100000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = collect(child.stdout.take().unwrap());
    let err = collect(child.stderr.take().unwrap());
    // the whole run takes many minutes: its first characters must not wait for the end
    let text = wait_for(&mut child, &out, Duration::from_secs(30), "streamed characters", |t| t.chars().count() >= "ROMEO:".len() + 20);
    assert!(text.starts_with("ROMEO:"), "{text:?}");
    let progress = wait_for(&mut child, &err, Duration::from_secs(30), "progress line", |t| t.contains("sample: "));
    assert!(progress.contains("of 100000 characters in") && progress.contains("s left"), "{progress}");
    child.kill().unwrap();
    child.wait().unwrap();
}

//! SIGKILL at many moments (random ones, and the instant a checkpoint's temp
//! file appears, i.e. mid-write), resume after each, and the run still ends
//! with the very model an uninterrupted run makes, bit for bit.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use candle_core::{DType, Device};
use nrgpt_core::rng::Rng64;
use nrgpt_core::Checkpoint;

fn root(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nrgpt-kill-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

const RUN: &[&str] = &[
    "--d-model",
    "32",
    "--heads",
    "2",
    "--steps",
    "2",
    "--block",
    "32",
    "--batch",
    "16",
    "--lr",
    "1e-2",
    "--warmup",
    "20",
    "--eval-iters",
    "2",
    "--eval-every",
    "10",
    "--iters",
    "300",
    "--dropout",
    "0.1",
];

fn spawn(out: &Path, resume: bool) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_trainer"));
    c.current_dir(root("")).arg("train").arg("--out").arg(out).arg("--quiet").stderr(Stdio::null());
    if resume {
        c.arg("--resume");
    } else {
        c.args(RUN);
    }
    c.spawn().unwrap()
}

/// Every tensor of a checkpoint as raw f32 bits, by name.
fn tensors(out: &Path) -> Vec<(String, Vec<u32>)> {
    let ck = Checkpoint::from_bytes(&std::fs::read(out.join("ckpt.safetensors")).unwrap(), DType::F32, &Device::Cpu).unwrap();
    ck.weights
        .iter()
        .chain(&ck.extra)
        .map(|(n, t)| (n.clone(), t.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|x| x.to_bits()).collect()))
        .collect()
}

#[test]
fn killed_at_random_moments_and_mid_write_the_run_ends_bit_exact() {
    let whole = tmp("whole");
    let t_whole = Instant::now();
    assert!(spawn(&whole, false).wait().unwrap().success());
    // random kills within the first 30% of an uninterrupted run's time: on an
    // idle machine the run is shorter than any fixed window would assume
    let whole_ms = t_whole.elapsed().as_secs_f64() * 1e3;

    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let mut rng = Rng64::new(seed);
    let broken = tmp("broken");
    let ckpt_tmp = broken.join("ckpt.safetensors.tmp");
    let (mut kills, mut mid_write, mut runs) = (0, 0, 0);
    let t0 = Instant::now();
    loop {
        runs += 1;
        let mut child = spawn(&broken, broken.join("ckpt.safetensors").exists());
        if kills >= 12 {
            assert!(child.wait().unwrap().success(), "the final resume failed");
            break;
        }
        // even tries: a random moment; odd tries: as soon as a checkpoint is being written
        let deadline = Instant::now() + Duration::from_millis(((0.02 + 0.28 * rng.uniform()) * whole_ms) as u64);
        let at_write = runs % 2 == 0;
        let mut wrote = false;
        let finished = loop {
            if let Some(st) = child.try_wait().unwrap() {
                assert!(st.success(), "a trainer failed on its own after {kills} kills");
                break true;
            }
            if at_write && ckpt_tmp.exists() {
                wrote = true;
                break false;
            }
            if !at_write && Instant::now() >= deadline {
                break false;
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        if finished {
            break;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        kills += 1;
        // counted only if the temp file was still there after the kill: the write had not finished
        if wrote && ckpt_tmp.exists() {
            mid_write += 1;
        }
        assert!(t0.elapsed() < Duration::from_secs(600), "the kill loop took too long");
    }
    println!("kill test (seed {seed}): {kills} SIGKILLs ({mid_write} with a checkpoint half written), {runs} trainer runs");
    assert!(kills >= 4, "only {kills} kills landed before the run finished");
    let (a, b) = (tensors(&whole), tensors(&broken));
    assert_eq!(a.len(), b.len());
    for ((na, va), (nb, vb)) in a.iter().zip(&b) {
        assert_eq!(na, nb);
        assert!(va == vb, "`{na}` differs from the uninterrupted run's");
    }
}

//! Project tasks, so a fresh machine needs exactly two commands:
//! `cargo xtask serve` (the demo) and `cargo xtask test` (the whole suite).
//! Each step says what it does before it does it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

const WASM_TARGET: &str = "wasm32-unknown-unknown";
/// The shipped default checkpoint.
const DEFAULT_MODEL: &str = "www/models/default.safetensors";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

fn say(msg: &str) {
    eprintln!("\n==> {msg}");
}

fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("    $ {}", format!("{cmd:?}").replace('"', ""));
    let st = cmd.current_dir(root()).status().with_context(|| format!("starting {cmd:?}"))?;
    if !st.success() {
        bail!("{cmd:?} failed with {st}");
    }
    Ok(())
}

fn output(cmd: &mut Command) -> Option<String> {
    let o = cmd.output().ok()?;
    o.status.success().then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Adds the wasm32 target through rustup when it is missing.
fn ensure_wasm_target() -> Result<()> {
    let installed = output(Command::new("rustup").args(["target", "list", "--installed"])).unwrap_or_default();
    if installed.lines().any(|l| l.trim() == WASM_TARGET) {
        return Ok(());
    }
    say(&format!("installing the Rust target {WASM_TARGET} (rustup target add)"));
    run(Command::new("rustup").args(["target", "add", WASM_TARGET]))
}

fn is_root() -> bool {
    output(Command::new("id").arg("-u")).is_some_and(|o| o.trim() == "0")
}

/// Mesa's software Vulkan (lavapipe) so the WGSL tests have an adapter on a
/// machine without a GPU. Installed with apt-get when root; the GPU tests fail
/// (never skip) when no adapter exists.
fn ensure_lavapipe() -> Result<()> {
    let icd = Path::new("/usr/share/vulkan/icd.d");
    let present = std::fs::read_dir(icd).map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with("lvp_icd"))).unwrap_or(false);
    if present {
        return Ok(());
    }
    if !is_root() {
        say("Mesa lavapipe is missing and this is not root: install `mesa-vulkan-drivers` (Debian) for the GPU tests");
        return Ok(());
    }
    say("installing Mesa lavapipe (software Vulkan) for the GPU tests: apt-get install mesa-vulkan-drivers libvulkan1");
    run(Command::new("apt-get").args(["-o", "DPkg::Lock::Timeout=600", "update", "-qq"]))?;
    run(Command::new("apt-get").args(["-o", "DPkg::Lock::Timeout=600", "install", "-y", "-qq", "mesa-vulkan-drivers", "libvulkan1"]).env("DEBIAN_FRONTEND", "noninteractive"))
}

fn test() -> Result<()> {
    let t0 = std::time::Instant::now();
    ensure_wasm_target()?;
    ensure_lavapipe()?;
    say("checking that the core crate builds for wasm32 (the browser build)");
    run(Command::new("cargo").args(["build", "--release", "-p", "nrgpt-web", "--target", WASM_TARGET]))?;
    say("running every test of the workspace (gradient checks, descent, causality, trainer, resume, engine parity on wgpu)");
    run(Command::new("cargo").args(["test", "--workspace", "--", "--test-threads", "1"]))?;
    say(&format!("all tests passed in {:.0} s", t0.elapsed().as_secs_f64()));
    Ok(())
}

fn serve() -> Result<()> {
    // Until the web page lands, the demo is the trainer sampling the shipped model.
    say(&format!("sampling Shakespeare from the shipped checkpoint {DEFAULT_MODEL}"));
    run(Command::new("cargo").args([
        "run", "--release", "-p", "trainer", "--", "sample", "--ckpt", DEFAULT_MODEL, "--len", "500", "--prompt", "ROMEO:\n",
    ]))
}

fn main() -> Result<()> {
    let task = std::env::args().nth(1).unwrap_or_default();
    match task.as_str() {
        "test" => test(),
        "serve" => serve(),
        _ => bail!("usage: cargo xtask <test|serve>\n  test   install what is missing, then run the whole test suite\n  serve  run the demo with the shipped default checkpoint"),
    }
}

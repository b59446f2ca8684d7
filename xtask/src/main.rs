//! Project tasks, so a fresh machine needs exactly two commands:
//! `cargo xtask serve` (the demo) and `cargo xtask test` (the whole suite).
//! Each step says what it does before it does it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

// the trainer's one writer of files, compiled here too: xtask does not
// depend on the trainer (it would build candle for every xtask command)
#[path = "../../trainer/src/files/atomic.rs"]
mod atomic;
mod bench;
mod ebt_bench;
mod science;
mod dist;
mod lint;
mod listops;
mod plot;
mod serve;
mod widgets;

const WASM_TARGET: &str = "wasm32-unknown-unknown";
/// The shipped default checkpoint.
const DEFAULT_MODEL: &str = "www/models/default.safetensors";
/// Must equal the `wasm-bindgen` crate version pinned in Cargo.toml.
const WASM_BINDGEN_VERSION: &str = "0.2.130";
/// wasm-bindgen's output (git-ignored), loaded by index.html and www/worker.js.
const PKG_DIR: &str = "www/pkg";
/// Settings of the browser test's reference generation.
const TEST_PROMPT: &str = "ROMEO:\n";
const TEST_LEN: usize = 100;
/// The long-prompt check: this many characters of the validation split, many windows long.
const LONG_PROMPT_CHARS: usize = 5_000;
const LONG_TEST_LEN: usize = 20;
const TEST_TEMPERATURE: &str = "0.8";
const TEST_TOP_K: &str = "20";
const TEST_SEED: &str = "42";
/// The EBT the page offers (manifest entry "ebt"); the browser test makes it
/// think `EBT_TEST_STEPS` steps with `EBT_TEST_SAMPLES` candidates, on a short
/// text since every guess thinks on the CPU.
const EBT_MODEL: &str = "www/models/ebt.safetensors";
const EBT_TEST_LEN: usize = 40;
const EBT_TEST_STEPS: usize = 4;
const EBT_TEST_SAMPLES: usize = 4;
/// ... with Langevin noise of this std before every step (the page's default).
const EBT_TEST_LANGEVIN: &str = "1";
/// The blog demo: its widgets' settings are the posters' and the widget test's.
const BLOG_DEMO: &str = "www/blog-demo.html";
/// The widget test's own pages (a pair, a lazy one, a host stylesheet), served at /fixtures/.
const WIDGET_FIXTURES: &str = "tests/browser/fixtures";
const DIST_DIR: &str = "dist";
/// The widget test's next release: dist/ rebuilt with another model behind the default's URL.
const DIST_NEXT_DIR: &str = "target/dist-next";
const NEXT_DEFAULT_MODEL: &str = "www/models/small.safetensors";

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

pub fn say(msg: &str) {
    eprintln!("\n==> {msg}");
}

pub fn run(cmd: &mut Command) -> Result<()> {
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
    run(Command::new("apt-get")
        .args(["-o", "DPkg::Lock::Timeout=600", "install", "-y", "-qq", "mesa-vulkan-drivers", "libvulkan1"])
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

/// Installs wasm-bindgen-cli at the crate's version when it is missing or differs.
fn ensure_wasm_bindgen() -> Result<()> {
    let want = format!("wasm-bindgen {WASM_BINDGEN_VERSION}");
    let have = output(Command::new("wasm-bindgen").arg("--version")).unwrap_or_default();
    if have.trim() == want {
        return Ok(());
    }
    say(&format!("installing wasm-bindgen-cli {WASM_BINDGEN_VERSION} (found: {:?}); takes a few minutes", have.trim()));
    // Not --locked: its lock file wants crates the registry here does not serve.
    run(Command::new("cargo").args(["install", "wasm-bindgen-cli", "--version", WASM_BINDGEN_VERSION]))
}

/// Builds the page's wasm (release) and writes the JS glue into www/pkg.
fn build_web() -> Result<()> {
    ensure_wasm_target()?;
    ensure_wasm_bindgen()?;
    say("building the page and its worker for wasm32 (release)");
    run(Command::new("cargo").args(["build", "--release", "-p", "nrgpt-web", "--lib", "--target", WASM_TARGET]))?;
    say(&format!("generating the JS bindings into {PKG_DIR} (wasm-bindgen --target web)"));
    let wasm = format!("target/{WASM_TARGET}/release/nrgpt_web.wasm");
    run(Command::new("wasm-bindgen").args(["--target", "web", "--no-typescript", "--out-dir", PKG_DIR, &wasm]))?;
    if !root().join(DEFAULT_MODEL).is_file() {
        eprintln!("    warning: {DEFAULT_MODEL} is missing: the page will say it cannot fetch the model");
    }
    Ok(())
}

/// Each phase's wall time, printed when the suite ends (or a phase fails),
/// so the next regression in the suite's time is seen where it is.
struct Phases {
    t0: std::time::Instant,
    done: Vec<(&'static str, f64)>,
}

impl Phases {
    fn run(&mut self, name: &'static str, f: impl FnOnce() -> Result<()>) -> Result<()> {
        let t = std::time::Instant::now();
        let r = f();
        self.done.push((name, t.elapsed().as_secs_f64()));
        if r.is_err() {
            self.print("failed");
        }
        r
    }

    fn print(&self, how: &str) {
        say(&format!("the suite {how} in {:.0} s; its phases:", self.t0.elapsed().as_secs_f64()));
        for (name, secs) in &self.done {
            eprintln!("  {secs:>6.0} s  {name}");
        }
    }
}

fn test() -> Result<()> {
    let mut p = Phases { t0: std::time::Instant::now(), done: Vec::new() };
    p.run("lint (README, fmt, clippy)", lint::lint)?;
    p.run("installs (wasm32 target, lavapipe)", || {
        ensure_wasm_target()?;
        ensure_lavapipe()
    })?;
    p.run("wasm32 build", || {
        say("checking that the core crate builds for wasm32 (the browser build)");
        run(Command::new("cargo").args(["build", "--release", "-p", "nrgpt-web", "--target", WASM_TARGET]))
    })?;
    p.run("cargo test --workspace", || {
        say("running every test of the workspace (gradient checks, descent, causality, trainer, resume, engine parity on wgpu)");
        run(Command::new("cargo").args(["test", "--workspace", "--", "--test-threads", "1"]))
    })?;
    p.run("bench smoke run", || {
        say("smoke run of the benchmark (tiny models; the real one is `cargo xtask bench`)");
        bench::bench(true)
    })?;
    p.run("science smoke run", || {
        say("smoke run of the science bench (the real one is `cargo xtask bench --science`)");
        science::science(true, false)
    })?;
    p.run("browser tests (page, widget, ListOps)", browser_test)?;
    p.print("passed");
    Ok(())
}

fn is_root() -> bool {
    output(Command::new("id").arg("-u")).is_some_and(|s| s.trim() == "0")
}

/// Debian's chromium (playwright cannot download its own browsers here).
fn ensure_chromium() -> Result<()> {
    if Path::new("/usr/bin/chromium").exists() {
        return Ok(());
    }
    if !is_root() {
        bail!("the browser test needs /usr/bin/chromium: install it with `sudo apt-get install -y chromium`");
    }
    say("installing Debian's chromium for the browser test (apt-get)");
    run(Command::new("apt-get").arg("update"))?;
    run(Command::new("apt-get").args(["install", "-y", "chromium"]))
}

/// The page must print exactly what the CPU reference prints for the same
/// settings; `extra` are the model's own flags (an EBT's steps and candidates).
fn native_reference(ckpt: &str, prompt: &str, len: usize, extra: &[&str]) -> Result<String> {
    // the test-profile trainer is already built by `cargo test`: no extra release build in CI
    say(&format!("generating the native reference text for {ckpt} (trainer sample, same settings as the page)"));
    let len = len.to_string();
    let mut cmd = Command::new("cargo");
    cmd.args(["run", "-q", "-p", "trainer", "--", "sample", "--ckpt", ckpt, "--prompt", prompt])
        .args(["--len", &len, "--temperature", TEST_TEMPERATURE, "--top-k", TEST_TOP_K, "--seed", TEST_SEED])
        .args(extra);
    let out = cmd.current_dir(root()).output().context("running trainer sample")?;
    if !out.status.success() {
        bail!("trainer sample failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8(out.stdout).context("trainer sample printed non-UTF-8")?;
    // println! added one newline after prompt + generated text
    Ok(text.strip_suffix('\n').unwrap_or(&text).to_string())
}

/// A prompt far longer than any model's window: the start of the validation split.
fn long_prompt() -> Result<String> {
    let path = root().join("data/tinyshakespeare/input.txt");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let val: String = text.chars().skip(text.chars().count() * 9 / 10).take(LONG_PROMPT_CHARS).collect();
    Ok(val)
}

/// The page's test, then the widget's and the ListOps tab's even when one failed (they test different things).
fn browser_test() -> Result<()> {
    let page = browser_test_run(false);
    let widget = widget_test();
    let listops = listops::browser_test();
    page.and(widget).and(listops)
}

/// The browser test with its report captured (the bench reads the page speed from it).
pub fn browser_test_output() -> Result<String> {
    browser_test_run(true)
}

fn browser_test_run(capture: bool) -> Result<String> {
    for (ckpt, what) in [(DEFAULT_MODEL, "the default checkpoint"), (EBT_MODEL, "the EBT checkpoint")] {
        if !root().join(ckpt).is_file() {
            bail!("the browser test needs {what} {ckpt}");
        }
    }
    build_web()?;
    ensure_chromium()?;
    let dir = root().join("tests/browser");
    say("installing the browser driver (npm: playwright-core)");
    let npm_cmd = if dir.join("package-lock.json").is_file() { "ci" } else { "install" };
    run(Command::new("npm").args([npm_cmd, "--no-audit", "--no-fund", "--prefix", "tests/browser"]))?;
    let expected = native_reference(DEFAULT_MODEL, TEST_PROMPT, TEST_LEN, &[])?;
    let long_prompt = long_prompt()?;
    let long_expected = native_reference(DEFAULT_MODEL, &long_prompt, LONG_TEST_LEN, &[])?;
    // files, not the environment: a failed run prints its environment
    let out_dir = root().join("tests/browser/out");
    std::fs::create_dir_all(&out_dir)?;
    let long_files = (out_dir.join("long-prompt.txt"), out_dir.join("long-expected.txt"));
    atomic::write_atomic(&long_files.0, long_prompt.as_bytes())?;
    atomic::write_atomic(&long_files.1, long_expected.as_bytes())?;
    let (ebt_steps, ebt_samples) = (EBT_TEST_STEPS.to_string(), EBT_TEST_SAMPLES.to_string());
    let ebt_expected = native_reference(
        EBT_MODEL,
        TEST_PROMPT,
        EBT_TEST_LEN,
        &["--steps", &ebt_steps, "--samples", &ebt_samples, "--verify", "min", "--langevin", EBT_TEST_LANGEVIN],
    )?;
    let listener = serve::bind(0)?;
    let url = format!("http://{}/", listener.local_addr()?);
    let page_root = root();
    std::thread::spawn(move || serve::serve(listener, page_root));
    say(&format!("browser test against {url} (headless chromium, with WebGPU and with the CPU fallback; the default model and the EBT)"));
    let prompt = TEST_PROMPT;
    let mut node = Command::new("node");
    node.args(["--test", "--test-reporter=spec", "tests/browser/page.test.mjs"])
        .env("PAGE_URL", &url)
        .env("CKPT", root().join(DEFAULT_MODEL))
        .env("PROMPT", prompt)
        .env("LEN", TEST_LEN.to_string())
        .env("TEMPERATURE", TEST_TEMPERATURE)
        .env("TOP_K", TEST_TOP_K)
        .env("SEED", TEST_SEED)
        .env("EXPECTED_TEXT", &expected)
        .env("LONG_PROMPT_FILE", &long_files.0)
        .env("LONG_LEN", LONG_TEST_LEN.to_string())
        .env("LONG_EXPECTED_FILE", &long_files.1)
        .env("EBT_CKPT", root().join(EBT_MODEL))
        .env("EBT_LEN", EBT_TEST_LEN.to_string())
        .env("EBT_STEPS", &ebt_steps)
        .env("EBT_SAMPLES", &ebt_samples)
        .env("EBT_LANGEVIN", EBT_TEST_LANGEVIN)
        .env("EBT_EXPECTED_TEXT", &ebt_expected)
        .env("OUT_DIR", dir.join("out"));
    if !capture {
        return run(&mut node).map(|_| String::new());
    }
    let out = node.current_dir(root()).stderr(std::process::Stdio::inherit()).output().context("starting node")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{text}");
    if !out.status.success() {
        bail!("the browser test failed ({})", out.status);
    }
    Ok(text)
}

/// Every widget of the blog demo and of the widget test's pages, with its settings.
fn test_widgets() -> Result<Vec<widgets::Widget>> {
    let mut pages = vec![root().join(BLOG_DEMO)];
    for e in std::fs::read_dir(root().join(WIDGET_FIXTURES)).context("listing the widget fixtures")? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "html") {
            pages.push(p);
        }
    }
    pages.sort();
    let mut all = Vec::new();
    for p in pages {
        all.extend(widgets::widgets_in(&root(), &p)?);
    }
    Ok(all)
}

/// The widget test: `dist/` on a plain static server inside the test (node),
/// each widget's text against `trainer sample`'s for its settings.
fn widget_test() -> Result<()> {
    let hash = make_dist()?;
    let next = make_next_dist()?;
    let mut expected = serde_json::Map::new();
    let mut by_settings = std::collections::HashMap::new();
    for w in test_widgets()? {
        let args = w.sample_args().join(" ");
        if !by_settings.contains_key(&args) {
            say(&format!("native reference for {} (trainer sample {args})", w.key));
            by_settings.insert(args.clone(), w.reference(&root(), None)?);
        }
        expected.insert(w.key.clone(), by_settings[&args].clone().into());
    }
    say(&format!("widget test: dist/ (build {hash}; the next release {next}) on a static server, headless chromium with and without WebGPU"));
    run(Command::new("node")
        .args(["--test", "--test-reporter=spec", "--test-concurrency=1", "tests/browser/widget.test.mjs"])
        .env("DIST_DIR", root().join(DIST_DIR))
        .env("DIST_NEXT_DIR", root().join(DIST_NEXT_DIR))
        .env("FIXTURES_DIR", root().join(WIDGET_FIXTURES))
        .env("WIDGET_EXPECTED", serde_json::Value::Object(expected).to_string())
        .env("OUT_DIR", root().join("tests/browser/out")))
}

/// Builds the page and writes dist/.
fn make_dist() -> Result<String> {
    build_web()?;
    say(&format!("writing the static site into {DIST_DIR}/"));
    let hash = dist::write(&root(), &root().join(DIST_DIR))?;
    eprintln!("    build {hash}: serve {DIST_DIR}/ with any static server; the blog demo is {DIST_DIR}/{BLOG_DEMO}");
    Ok(hash)
}

/// The release after dist/ as a host would publish it: the same sources with
/// a re-trained default model (NEXT_DEFAULT_MODEL's bytes under its name),
/// built by the same `dist::write`; returns its build hash.
fn make_next_dist() -> Result<String> {
    let src = root().join("target/dist-next-src");
    if src.exists() {
        std::fs::remove_dir_all(&src).context("removing the old target/dist-next-src")?;
    }
    let mut files = vec![root().join("index.html")];
    dist::files_under(&root().join("www"), &mut files)?;
    for f in files {
        let dest = src.join(f.strip_prefix(root())?);
        std::fs::create_dir_all(dest.parent().context("a file has a folder")?)?;
        std::fs::copy(&f, &dest).with_context(|| format!("copying {}", f.display()))?;
    }
    std::fs::copy(root().join(NEXT_DEFAULT_MODEL), src.join(DEFAULT_MODEL)).context("re-training the default (a copy)")?;
    dist::write(&src, &root().join(DIST_NEXT_DIR))
}

/// Records each blog-demo widget's poster (`trainer sample --trace`) into
/// www/, and puts its text in the widget's fallback for readers without scripts.
fn posters() -> Result<()> {
    let page = root().join(BLOG_DEMO);
    let mut html = std::fs::read_to_string(&page).with_context(|| format!("reading {BLOG_DEMO}"))?;
    for w in widgets::widgets_in(&root(), &page)? {
        let Some(poster) = w.attrs.get("poster") else { continue };
        let file = page.parent().context("the demo is in www/")?.join(poster);
        say(&format!("recording {}'s poster into {}", w.key, file.display()));
        let text = w.reference(&root(), Some(&file))?;
        let id = w.key.rsplit('#').next().unwrap_or_default();
        html = widgets::with_fallback(&html, id, &format!("{}{text}", w.attrs["prompt"]))?;
    }
    atomic::write_atomic(&page, html.as_bytes())
}

fn serve(port: u16) -> Result<()> {
    build_web()?;
    let listener = serve::bind(port)?;
    let url = format!("http://{}/", listener.local_addr()?);
    say(&format!("serving the page on {url} (Ctrl+C to stop)"));
    println!("{url}");
    serve::serve(listener, root());
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let task = args.first().map(String::as_str).unwrap_or_default();
    match task {
        "test" => test(),
        "serve" => {
            let port = match args.iter().position(|a| a == "--port") {
                Some(i) => args.get(i + 1).and_then(|p| p.parse().ok()).context("--port needs a number")?,
                None => 8080,
            };
            serve(port)
        }
        "lint" => lint::lint(),
        "test-browser" => browser_test(),
        "test-listops" => listops::browser_test(),
        "test-widget" => {
            ensure_chromium()?;
            run(Command::new("npm").args(["ci", "--no-audit", "--no-fund", "--prefix", "tests/browser"]))?;
            widget_test()
        }
        "dist" => make_dist().map(drop),
        "posters" => posters(),
        "bench" if args.iter().any(|a| a == "--ebt") => ebt_bench::ebt_bench(),
        "bench" if args.iter().any(|a| a == "--science") => science::science(args.iter().any(|a| a == "--smoke"), args.iter().any(|a| a == "--report")),
        "bench" => bench::bench(args.iter().any(|a| a == "--smoke")),
        "torch-check" => bench::torch_check(),
        _ => bail!(
            "usage: cargo xtask <test|lint|serve|test-browser|test-widget|test-listops|dist|posters|bench|torch-check>\n  test          install what is missing, then run the whole test suite (lint first)\n  lint          the README's size, no pub type name twice, cargo fmt --check, cargo clippy -D warnings\n  serve         build the page and serve it on http://127.0.0.1:8080 (--port N to change)\n  test-browser  only the browser tests: the page, the widget, the ListOps tab (builds the page, drives headless chromium)\n  test-widget   only the widget test: dist/ on a static server, the blog demo, CSP, host styles, sharing (one GPU device), lazy loading, iframe fit, updates never stale\n  test-listops  only the ListOps tab's browser test (the shipped www/models/listops.safetensors against trainer listops-answer)\n  dist          build the static site into dist/ (page, widget, wasm, worker, models, blog demo)\n  posters       record the blog demo widgets' posters (trainer sample --trace) into www/posters/\n  bench         measure quality, trainer speed, decode and page speed; write BENCH.md (--smoke: a tiny run that checks the bench works)\n                --ebt: the shipped EBT against its targets (val, thinking, Best-of-N, energy vs loss)\n                --science: NRGPT vs GPT at an equal budget, lr search, ablation (hours; resumable; --report: only rewrite the report)\n  torch-check   only the bench's check that the PyTorch EBT twin computes our trainer's loss and gradient norm"
        ),
    }
}

//! The ListOps tab's browser test: the shipped ListOps model answers an
//! expression in the page exactly as `trainer listops-answer` does natively.

use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::{build_web, ensure_chromium, root, run, say, serve};

/// The shipped ListOps checkpoint (the tab loads it).
pub const LISTOPS_MODEL: &str = "www/models/listops.safetensors";
/// The expression the test types (nested; the reference's own example).
const TEST_EXPR: &str = "X(M(0 3 1) 8 6)";

/// `trainer listops-answer --json` on the test expression.
fn native_answer() -> Result<String> {
    say(&format!("native reference: trainer listops-answer on {TEST_EXPR}"));
    let out = Command::new("cargo")
        .args(["run", "-q", "-p", "trainer", "--", "--json", "listops-answer", "--ckpt", LISTOPS_MODEL, "--expr", TEST_EXPR])
        .current_dir(root())
        .output()
        .context("running trainer listops-answer")?;
    if !out.status.success() {
        bail!("trainer listops-answer failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout).context("trainer printed non-UTF-8")?.trim().to_string())
}

pub fn browser_test() -> Result<()> {
    if !root().join(LISTOPS_MODEL).is_file() {
        bail!("the ListOps browser test needs {LISTOPS_MODEL}");
    }
    build_web()?;
    ensure_chromium()?;
    let dir = root().join("tests/browser");
    if !dir.join("node_modules/playwright-core").is_dir() {
        run(Command::new("npm").args(["ci", "--no-audit", "--no-fund", "--prefix", "tests/browser"]))?;
    }
    let expected = native_answer()?;
    let listener = serve::bind(0)?;
    let url = format!("http://{}/", listener.local_addr()?);
    let page_root = root();
    std::thread::spawn(move || serve::serve(listener, page_root));
    say(&format!("ListOps tab test against {url} (headless chromium, CPU engine)"));
    run(Command::new("node")
        .args(["--test", "--test-reporter=spec", "tests/browser/listops.test.mjs"])
        .env("PAGE_URL", &url)
        .env("LISTOPS_EXPR", TEST_EXPR)
        .env("LISTOPS_EXPECTED", &expected)
        .env("OUT_DIR", dir.join("out")))
}

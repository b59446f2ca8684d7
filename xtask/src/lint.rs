//! `cargo xtask lint`, the first phase of `cargo xtask test`: the checks that
//! need no build of the tests. The README's size (issue 36: read in two
//! minutes), no `pub` type name defined twice in the workspace's source,
//! `cargo fmt --check` and `cargo clippy --workspace --all-targets -- -D warnings`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::{output, root, run, say};

/// The README's limits: words as `wc -w` counts them, characters per line.
const README_MAX_WORDS: usize = 900;
const README_MAX_LINE: usize = 100;

/// Folders never searched for source: build output, data, runs, JS packages.
const SKIP_DIRS: [&str; 7] = ["target", ".git", "node_modules", "runs", "data", "dist", "pkg"];
/// Folders whose files are tests or examples, not the workspace's source.
const TEST_DIRS: [&str; 3] = ["tests", "examples", "benches"];

pub fn lint() -> Result<()> {
    let t0 = Instant::now();
    say(&format!("checking the README's size (<= {README_MAX_WORDS} words, lines <= {README_MAX_LINE} characters)"));
    readme_limits(&std::fs::read_to_string(root().join("README.md")).context("reading README.md")?)?;
    say("checking that no pub type name (struct, enum, trait, type, union) is defined twice in non-test source");
    let dups = duplicate_pub_types(&root())?;
    if !dups.is_empty() {
        let list: Vec<String> = dups.iter().map(|(name, files)| format!("  {name}: {}", files.join(", "))).collect();
        bail!("pub type names defined more than once:\n{}", list.join("\n"));
    }
    eprintln!("    none");
    ensure_components()?;
    say("checking the formatting (cargo fmt --all --check; rustfmt.toml)");
    run(Command::new("cargo").args(["fmt", "--all", "--check"]))?;
    say("running clippy on every native target (warnings are errors)");
    run(Command::new("cargo").args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    eprintln!("    lint: {:.0} s", t0.elapsed().as_secs_f64());
    Ok(())
}

/// Adds rustfmt and clippy through rustup when they are missing.
fn ensure_components() -> Result<()> {
    for (tool, component) in [("cargo-fmt", "rustfmt"), ("cargo-clippy", "clippy")] {
        if output(Command::new(tool).arg("--version")).is_none() {
            say(&format!("installing the Rust component {component} (rustup component add)"));
            run(Command::new("rustup").args(["component", "add", component]))?;
        }
    }
    Ok(())
}

fn readme_limits(text: &str) -> Result<()> {
    let words = text.split_whitespace().count();
    let long: Vec<String> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.chars().count() > README_MAX_LINE)
        .map(|(i, l)| format!("line {} has {} characters", i + 1, l.chars().count()))
        .collect();
    if words > README_MAX_WORDS || !long.is_empty() {
        bail!("README.md: {words} words (at most {README_MAX_WORDS}); {}", if long.is_empty() { "no long line".into() } else { long.join(", ") });
    }
    eprintln!("    README.md: {words} words, every line <= {README_MAX_LINE} characters");
    Ok(())
}

/// Every `pub` (or `pub(...)`) struct, enum, trait, type or union name that is
/// defined in more than one place, with where; the same check as
/// `grep -rhoE '^\s*pub(\([a-z]+\))? (struct|enum|trait|type|union) \w+'` over the
/// `.rs` files outside tests/, examples/ and benches/, then `sort | uniq -d`.
fn duplicate_pub_types(root: &Path) -> Result<BTreeMap<String, Vec<String>>> {
    let mut files = Vec::new();
    source_files(root, &mut files)?;
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in &files {
        let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let rel = f.strip_prefix(root).unwrap_or(f).display().to_string();
        for (i, line) in text.lines().enumerate() {
            if let Some(name) = pub_type_name(line) {
                seen.entry(name.to_string()).or_default().push(format!("{rel}:{}", i + 1));
            }
        }
    }
    seen.retain(|_, at| at.len() > 1);
    Ok(seen)
}

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if path.is_dir() {
            if !SKIP_DIRS.contains(&name.as_str()) && !TEST_DIRS.contains(&name.as_str()) && !name.starts_with('.') {
                source_files(&path, out)?;
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The name in `pub struct Name`, `pub(crate) enum Name<T>`, ...; None for other lines.
fn pub_type_name(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("pub")?;
    let rest = match rest.strip_prefix('(') {
        Some(r) => r.split_once(')')?.1,
        None => rest,
    };
    let rest = rest.strip_prefix(' ')?;
    let (kind, rest) = rest.split_once(' ')?;
    if !["struct", "enum", "trait", "type", "union"].contains(&kind) {
        return None;
    }
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_pub_type_names() {
        assert_eq!(pub_type_name("pub struct EnergyGrad {"), Some("EnergyGrad"));
        assert_eq!(pub_type_name("    pub(crate) enum Kind<T> {"), Some("Kind"));
        assert_eq!(pub_type_name("pub type Result<T> = std::result::Result<T, Error>;"), Some("Result"));
        assert_eq!(pub_type_name("pub trait Session: Sized {"), Some("Session"));
        assert_eq!(pub_type_name("pub fn struct_like() {}"), None);
        assert_eq!(pub_type_name("struct Private;"), None);
        assert_eq!(pub_type_name("    pub grad: Tensor,"), None);
    }

    #[test]
    fn readme_limits_count_words_and_characters() {
        assert!(readme_limits("a short readme\n").is_ok());
        assert!(readme_limits(&"word ".repeat(README_MAX_WORDS + 1)).is_err());
        assert!(readme_limits(&"─".repeat(README_MAX_LINE + 1)).is_err());
        assert!(readme_limits(&"─".repeat(README_MAX_LINE)).is_ok());
    }
}

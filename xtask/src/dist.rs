//! `cargo xtask dist`: a self-contained static site in `dist/` (the page, the
//! widget with its worker and wasm, the models, posters, the embed page and
//! the blog demo) that any static file server can publish. Every code asset
//! is requested with `?v=<build hash>`, so a new release never runs stale
//! code from a cache; the manifest names each model with `?v=<its content
//! hash>`, the page's Cache API key (src/web/fetch.rs), so a new model is
//! never served stale from it; the widget fetches models with `no-cache`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// URL strings that name another asset, per file, and what they become.
/// Each must occur exactly once, so a changed file fails the build instead of
/// silently shipping an unversioned URL.
const VERSIONED: [(&str, &str); 12] = [
    ("index.html", "href=\"www/style.css\""),
    ("index.html", "href=\"www/pkg/nrgpt_web.js\""),
    ("index.html", "src=\"www/boot.js\""),
    ("www/boot.js", "'./pkg/nrgpt_web.js'"),
    ("www/nrgpt-widget.js", "const BUILD = 'dev';"),
    ("www/worker.js", "'./pkg/nrgpt_web.js'"),
    ("www/pkg/nrgpt_web.js", "'nrgpt_web_bg.wasm'"),
    ("www/blog-demo.html", "href=\"blog.css\""),
    ("www/blog-demo.html", "src=\"nrgpt-widget.js\""),
    ("www/embed.html", "href=\"embed.css\""),
    ("www/embed.html", "src=\"nrgpt-widget.js\""),
    ("www/embed.html", "src=\"embed.js\""),
];
/// The page's model list: each `file` gets its model's content hash.
const MANIFEST: &str = "www/models/manifest.json";

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a, 64 bits: a cache key, not a security measure.
fn fnv(bytes: &[u8], mut h: u64) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

pub fn files_under(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let p = e?.path();
        if p.is_dir() {
            files_under(&p, out)?;
        } else {
            out.push(p);
        }
    }
    Ok(())
}

/// A content hash as URLs carry it.
fn short_hash(h: u64) -> String {
    format!("{:012x}", h >> 16)
}

/// The manifest with every model's `file` as `file?v=<content hash>`: its Cache API key.
fn versioned_manifest(text: &str, models: &Path) -> Result<String> {
    let mut m: serde_json::Value = serde_json::from_str(text).context("models/manifest.json does not parse")?;
    let entries = m.get_mut("models").and_then(|v| v.as_array_mut()).context("models/manifest.json has no models list")?;
    for e in entries {
        let file = e.get("file").and_then(|f| f.as_str()).context("a manifest entry has no file")?.to_string();
        let bytes = std::fs::read(models.join(&file)).with_context(|| format!("manifest entry {file}: reading the model"))?;
        e["file"] = format!("{file}?v={}", short_hash(fnv(&bytes, FNV_OFFSET))).into();
    }
    Ok(serde_json::to_string_pretty(&m)? + "\n")
}

fn versioned(text: &str, from: &str, hash: &str, file: &str) -> Result<String> {
    let to = if from.starts_with("const BUILD") {
        format!("const BUILD = '{hash}';")
    } else {
        // a quoted URL: put ?v= before the closing quote
        let (body, quote) = from.split_at(from.len() - 1);
        format!("{body}?v={hash}{quote}")
    };
    match text.matches(from).count() {
        1 => Ok(text.replacen(from, &to, 1)),
        n => bail!("{file}: expected {from} once, found it {n} times (update VERSIONED in xtask/src/dist.rs)"),
    }
}

/// Writes `out` from `root` (index.html and www/, with www/pkg already built); returns the build hash.
pub fn write(root: &Path, out: &Path) -> Result<String> {
    let mut files = vec![root.join("index.html")];
    files_under(&root.join("www"), &mut files)?;
    files.sort();
    if !files.iter().any(|f| f.ends_with("pkg/nrgpt_web_bg.wasm")) {
        bail!("www/pkg has no wasm: build the page first");
    }
    let mut h = FNV_OFFSET;
    for f in &files {
        h = fnv(f.strip_prefix(root)?.to_string_lossy().as_bytes(), h);
        h = fnv(&std::fs::read(f).with_context(|| format!("reading {}", f.display()))?, h);
    }
    let hash = short_hash(h);
    if out.exists() {
        std::fs::remove_dir_all(out).with_context(|| format!("removing the old {}", out.display()))?;
    }
    for f in &files {
        let rel = f.strip_prefix(root)?.to_string_lossy().replace('\\', "/");
        let dest = out.join(&rel);
        std::fs::create_dir_all(dest.parent().context("a file has a folder")?)?;
        let edits: Vec<&str> = VERSIONED.iter().filter(|(file, _)| *file == rel).map(|(_, from)| *from).collect();
        if edits.is_empty() && rel != MANIFEST {
            std::fs::copy(f, &dest).with_context(|| format!("copying {rel}"))?;
            continue;
        }
        let mut text = std::fs::read_to_string(f).with_context(|| format!("reading {rel}"))?;
        for from in edits {
            text = versioned(&text, from, &hash, &rel)?;
        }
        if rel == MANIFEST {
            text = versioned_manifest(&text, f.parent().context("the manifest has a folder")?)?;
        }
        crate::atomic::write_atomic(&dest, text.as_bytes())?;
    }
    for file in VERSIONED.iter().map(|(f, _)| *f).chain([MANIFEST]) {
        if !out.join(file).is_file() {
            bail!("{file} is missing from the build");
        }
    }
    Ok(hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_get_the_hash_and_a_changed_file_is_an_error() {
        assert_eq!(versioned("import x from './pkg/nrgpt_web.js';", "'./pkg/nrgpt_web.js'", "abc", "w").unwrap(), "import x from './pkg/nrgpt_web.js?v=abc';");
        assert_eq!(versioned("const BUILD = 'dev';", "const BUILD = 'dev';", "abc", "w").unwrap(), "const BUILD = 'abc';");
        assert_eq!(versioned("<script src=\"embed.js\">", "src=\"embed.js\"", "1", "e").unwrap(), "<script src=\"embed.js?v=1\">");
        assert!(versioned("nothing here", "'nrgpt_web_bg.wasm'", "1", "p").is_err());
        assert_ne!(fnv(b"a", 1), fnv(b"b", 1));
    }

    #[test]
    fn the_manifest_names_each_model_by_its_content() {
        let dir = std::env::temp_dir().join(format!("dist-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = r#"{"models": [{"name": "a", "file": "a.safetensors"}]}"#;
        let file_of = |bytes: &[u8]| {
            std::fs::write(dir.join("a.safetensors"), bytes).unwrap();
            let m: serde_json::Value = serde_json::from_str(&versioned_manifest(text, &dir).unwrap()).unwrap();
            m["models"][0]["file"].as_str().unwrap().to_string()
        };
        let (one, two) = (file_of(b"weights"), file_of(b"weights, re-trained"));
        assert!(one.starts_with("a.safetensors?v=") && two.starts_with("a.safetensors?v="), "{one} {two}");
        assert_ne!(one, two, "a changed model gets a new key");
        assert_eq!(file_of(b"weights"), one);
        std::fs::remove_file(dir.join("a.safetensors")).unwrap();
        assert!(versioned_manifest(text, &dir).is_err(), "a missing model is an error");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

//! The `<nrgpt-widget>` elements of an HTML page, read with their settings so
//! that the page stays the one place they are written: `cargo xtask posters`
//! records each one's poster with `trainer sample --trace`, and the browser
//! test compares each one's text with `trainer sample`'s.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The widget's defaults for attributes a tag leaves out (www/nrgpt-widget.js: `settings`).
const DEFAULTS: [(&str, &str); 5] = [("prompt", "ROMEO:"), ("length", "200"), ("temperature", "0.8"), ("top-k", "0"), ("seed", "1")];

#[derive(Debug, Clone, PartialEq)]
pub struct Widget {
    /// `page.html#id`, the key the browser test looks texts up by.
    pub key: String,
    pub attrs: BTreeMap<String, String>,
    /// The checkpoint on disk its `model` attribute names.
    pub ckpt: PathBuf,
}

fn decode_entities(s: &str) -> String {
    s.replace("&#10;", "\n").replace("&quot;", "\"").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
}

/// Attributes of one start tag's inside (`name="value"`, bare `name`).
fn attributes(inside: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut rest = inside.trim_start();
    while !rest.is_empty() {
        let end = rest.find(|c: char| c.is_whitespace() || c == '=').unwrap_or(rest.len());
        let name = rest[..end].to_ascii_lowercase();
        rest = rest[end..].trim_start();
        let value = if let Some(after) = rest.strip_prefix('=') {
            let after = after.trim_start();
            let Some(quoted) = after.strip_prefix('"') else { bail!("attribute {name}: only double-quoted values are read") };
            let close = quoted.find('"').with_context(|| format!("attribute {name}: no closing quote"))?;
            rest = quoted[close + 1..].trim_start();
            decode_entities(&quoted[..close])
        } else {
            String::new()
        };
        out.insert(name, value);
    }
    Ok(out)
}

/// Every `<nrgpt-widget>` in `html`; `root` is the folder the server serves at `/`.
pub fn widgets_in(root: &Path, html: &Path) -> Result<Vec<Widget>> {
    let text = std::fs::read_to_string(html).with_context(|| format!("reading {}", html.display()))?;
    let rel = html.file_name().context("a page has a file name")?.to_string_lossy().into_owned();
    let mut out = Vec::new();
    for (start, _) in text.match_indices("<nrgpt-widget") {
        let inside = &text[start + "<nrgpt-widget".len()..];
        let end = inside.find('>').with_context(|| format!("{rel}: an unclosed <nrgpt-widget> tag"))?;
        let mut attrs = attributes(&inside[..end]).with_context(|| format!("{rel}: a <nrgpt-widget> tag"))?;
        let id = attrs.get("id").cloned().with_context(|| format!("{rel}: every <nrgpt-widget> needs an id here"))?;
        let model = attrs.get("model").with_context(|| format!("{rel}#{id}: no model attribute"))?;
        // a root-relative URL is relative to the served folder, any other to the page
        let ckpt = match model.strip_prefix('/') {
            Some(p) => root.join(p),
            None => html.parent().unwrap_or(root).join(model),
        };
        for (k, v) in DEFAULTS {
            attrs.entry(k.to_string()).or_insert_with(|| v.to_string());
        }
        out.push(Widget { key: format!("{rel}#{id}"), attrs, ckpt });
    }
    Ok(out)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// `html` with the `<pre class="fallback">` inside widget `id` holding `text`:
/// what a reader without scripts sees in its place.
pub fn with_fallback(html: &str, id: &str, text: &str) -> Result<String> {
    const OPEN: &str = "<pre class=\"fallback\">";
    let start = html.find(&format!("<nrgpt-widget id=\"{id}\"")).with_context(|| format!("no <nrgpt-widget id=\"{id}\">"))?;
    let close = start + html[start..].find("</nrgpt-widget>").with_context(|| format!("widget {id} is not closed"))?;
    let open = start + html[start..close].find(OPEN).with_context(|| format!("widget {id} has no {OPEN}"))? + OPEN.len();
    let end = open + html[open..close].find("</pre>").with_context(|| format!("widget {id}'s fallback is not closed"))?;
    Ok(format!("{}{}{}", &html[..open], escape(text), &html[end..]))
}

impl Widget {
    fn attr(&self, name: &str) -> &str {
        self.attrs.get(name).map(String::as_str).unwrap_or_default()
    }

    /// `trainer sample` with this widget's settings (after `sample`).
    pub fn sample_args(&self) -> Vec<String> {
        let mut a: Vec<String> = vec!["--ckpt".into(), self.ckpt.to_string_lossy().into_owned()];
        for (flag, attr) in [("--prompt", "prompt"), ("--len", "length"), ("--temperature", "temperature"), ("--top-k", "top-k"), ("--seed", "seed")] {
            a.extend([flag.to_string(), self.attr(attr).to_string()]);
        }
        // `sample` reads steps and candidates for an EBT only, as the worker does
        if let Some(steps) = self.attrs.get("steps") {
            a.extend(["--steps".into(), steps.clone()]);
        }
        if let Some(n) = self.attrs.get("candidates") {
            a.extend(["--samples".into(), n.clone(), "--verify".into(), "min".into()]);
        }
        if let Some(noise) = self.attrs.get("langevin") {
            a.extend(["--langevin".into(), noise.clone()]);
        }
        a
    }

    /// The continuation `trainer sample` writes for this widget; with `trace`, also its poster.
    pub fn reference(&self, root: &Path, trace: Option<&Path>) -> Result<String> {
        let mut cmd = Command::new("cargo");
        cmd.args(["run", "-q", "-p", "trainer", "--", "--json", "sample"]).args(self.sample_args());
        if let Some(t) = trace {
            cmd.arg("--trace").arg(t);
        }
        let out = cmd.current_dir(root).output().context("running trainer sample")?;
        if !out.status.success() {
            bail!("trainer sample for {} failed: {}", self.key, String::from_utf8_lossy(&out.stderr));
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("trainer sample --json printed no JSON")?;
        v["text"].as_str().map(str::to_string).context("trainer sample --json has no text")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_fallback_of_one_widget() {
        let html =
            "<nrgpt-widget id=\"a\"><pre class=\"fallback\">old</pre></nrgpt-widget><nrgpt-widget id=\"b\"><pre class=\"fallback\">x</pre></nrgpt-widget>";
        let out = with_fallback(html, "b", "R:\n<a & b>").unwrap();
        assert_eq!(out, html.replace(">x<", ">R:\n&lt;a &amp; b&gt;<"));
        assert!(with_fallback(html, "c", "t").is_err());
    }

    #[test]
    fn reads_a_tag_with_defaults_entities_and_bare_attributes() {
        let dir = std::env::temp_dir().join(format!("widgets-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("www")).unwrap();
        let html = dir.join("www/page.html");
        std::fs::write(&html, "<p>x</p><nrgpt-widget id=\"a\" model=\"models/m.safetensors\"\n  prompt=\"A&amp;B:&#10;\" seed=\"7\" autoplay>\n</nrgpt-widget><nrgpt-widget id=\"b\" model=\"/www/models/n.safetensors\" steps=\"4\" candidates=\"2\" langevin=\"1\">").unwrap();
        let w = widgets_in(&dir, &html).unwrap();
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].key, "page.html#a");
        assert_eq!(w[0].attrs["prompt"], "A&B:\n");
        assert_eq!(w[0].attrs["autoplay"], "");
        assert_eq!(w[0].attrs["length"], "200");
        assert_eq!(w[0].ckpt, dir.join("www/models/m.safetensors"));
        assert_eq!(w[1].ckpt, dir.join("www/models/n.safetensors"));
        let args = w[1].sample_args().join(" ");
        assert!(args.ends_with("--seed 1 --steps 4 --samples 2 --verify min --langevin 1"), "{args}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

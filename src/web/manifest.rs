//! www/models/manifest.json: the checkpoints the page offers.

use serde::{Deserialize, Serialize};
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

pub const MANIFEST_URL: &str = "www/models/manifest.json";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelEntry {
    pub name: String,
    /// Relative to the manifest's folder.
    pub file: String,
    /// One line in plain words: what this model is good for.
    pub summary: String,
    /// The details (size, training), shown on demand.
    pub description: String,
    pub arch: String,
    pub params: usize,
    /// Bytes.
    pub size: u64,
    /// An EBT's measured correlation of a character's final energy with its
    /// loss on val (`cargo xtask bench --ebt`); absent: not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_loss_r: Option<f64>,
}

/// The correlation from which an EBT's energy is shown as a colour: below
/// it the energy says little about which characters are hard.
pub const MEANINGFUL_ENERGY_R: f64 = 0.3;

#[derive(Debug, Clone, Deserialize)]
struct Manifest {
    models: Vec<ModelEntry>,
}

/// Absolute URL of a manifest entry's file (the worker resolves relative
/// URLs against its own script, so it gets absolute ones).
pub fn model_url(entry: &ModelEntry) -> String {
    let base = web_sys::window().and_then(|w| w.document()).and_then(|d| d.base_uri().ok().flatten()).unwrap_or_default();
    let rel = format!("{}/{}", MANIFEST_URL.rsplit_once('/').map(|(d, _)| d).unwrap_or("."), entry.file);
    web_sys::Url::new_with_base(&rel, &base).map(|u| u.href()).unwrap_or(rel)
}

pub async fn load() -> Result<Vec<ModelEntry>, String> {
    let win = web_sys::window().ok_or("no window")?;
    let err = |e: wasm_bindgen::JsValue| format!("could not load the model list {MANIFEST_URL}: {e:?}");
    // revalidated: it names each model's version (dist/), so a stale copy would load an old model
    let init = web_sys::RequestInit::new();
    init.set_cache(web_sys::RequestCache::NoCache);
    let resp: web_sys::Response = JsFuture::from(win.fetch_with_str_and_init(MANIFEST_URL, &init)).await.map_err(err)?.unchecked_into();
    if !resp.ok() {
        return Err(format!("could not load the model list {MANIFEST_URL}: HTTP {}", resp.status()));
    }
    let text = JsFuture::from(resp.text().map_err(err)?).await.map_err(err)?.as_string().unwrap_or_default();
    let m: Manifest = serde_json::from_str(&text).map_err(|e| format!("{MANIFEST_URL} does not parse: {e}"))?;
    if m.models.is_empty() {
        return Err(format!("{MANIFEST_URL} lists no models"));
    }
    Ok(m.models)
}

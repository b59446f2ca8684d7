//! Checkpoint download for the worker: streamed (for the progress bar) and
//! kept in the Cache API under a key that names the file's version, so a
//! re-trained checkpoint is never served stale: the URL's own `?v=<content
//! hash>` where `cargo xtask dist` put one (models/manifest.json), else the
//! server's validator (ETag or Last-Modified). A new version replaces the old
//! entry, and caches of an older key scheme are deleted.

use js_sys::{Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{Cache, ReadableStreamDefaultReader, RequestCache, RequestInit, Response, WorkerGlobalScope};

/// `CACHE_PREFIX` + the key scheme's version.
const CACHE_NAME: &str = "nrgpt-models-v2";
const CACHE_PREFIX: &str = "nrgpt-models-";

fn js_err(e: JsValue) -> String {
    e.as_string().or_else(|| Reflect::get(&e, &"message".into()).ok().and_then(|m| m.as_string())).unwrap_or_else(|| format!("{e:?}"))
}

fn scope() -> WorkerGlobalScope {
    js_sys::global().unchecked_into()
}

async fn fetch(url: &str, method: &str) -> Result<Response, String> {
    let init = RequestInit::new();
    init.set_method(method);
    // The Cache API is our cache; the HTTP cache would only hide new versions.
    init.set_cache(RequestCache::NoStore);
    let resp = JsFuture::from(scope().fetch_with_str_and_init(url, &init))
        .await
        .map_err(|e| format!("could not fetch {url}: {} (is the server running?)", js_err(e)))?;
    let resp: Response = resp.unchecked_into();
    if !resp.ok() {
        return Err(format!("could not fetch {url}: HTTP {} {}", resp.status(), resp.status_text()));
    }
    Ok(resp)
}

/// The URL without its query: every version of a file shares it.
fn unversioned(url: &str) -> &str {
    url.split_once('?').map_or(url, |(base, _)| base)
}

/// The cache key for the version the server has now; None when neither the
/// URL nor the server names a version (then we do not cache).
async fn version_key(url: &str) -> Option<String> {
    let versioned = web_sys::Url::new(url).ok().is_some_and(|u| u.search_params().has("v"));
    if versioned {
        return Some(url.to_string());
    }
    let head = fetch(url, "HEAD").await.ok()?;
    let h = head.headers();
    let tag = h.get("etag").ok().flatten().or_else(|| h.get("last-modified").ok().flatten())?;
    let tag: String = tag.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
    Some(format!("{url}?v={tag}"))
}

/// This version's cache, once caches of older key schemes are deleted.
async fn open_cache() -> Option<Cache> {
    let storage = scope().caches().ok()?; // absent on insecure origins
    if let Ok(names) = JsFuture::from(storage.keys()).await {
        for name in js_sys::Array::from(&names).iter().filter_map(|n| n.as_string()) {
            if name.starts_with(CACHE_PREFIX) && name != CACHE_NAME {
                let _ = JsFuture::from(storage.delete(&name)).await;
            }
        }
    }
    JsFuture::from(storage.open(CACHE_NAME)).await.ok()?.dyn_into().ok()
}

async fn body_bytes(resp: &Response, progress: &dyn Fn(f64, f64)) -> Result<Vec<u8>, String> {
    let total: f64 = resp.headers().get("content-length").ok().flatten().and_then(|s| s.parse().ok()).unwrap_or(0.0);
    let Some(body) = resp.body() else { return Ok(Vec::new()) };
    let reader = ReadableStreamDefaultReader::new(&body).map_err(js_err)?;
    let mut bytes = Vec::with_capacity(total as usize);
    progress(0.0, total);
    loop {
        let chunk = JsFuture::from(reader.read()).await.map_err(|e| format!("download interrupted: {}", js_err(e)))?;
        if Reflect::get(&chunk, &"done".into()).map(|d| d.is_truthy()).unwrap_or(true) {
            break;
        }
        let value: Uint8Array = Reflect::get(&chunk, &"value".into()).map_err(js_err)?.unchecked_into();
        let start = bytes.len();
        bytes.resize(start + value.length() as usize, 0);
        value.copy_to(&mut bytes[start..]);
        progress(bytes.len() as f64, total);
    }
    Ok(bytes)
}

/// Returns the file's bytes and whether they came from the Cache API.
pub async fn fetch_cached(url: &str, progress: impl Fn(f64, f64)) -> Result<(Vec<u8>, bool), String> {
    let key = version_key(url).await;
    let cache = open_cache().await;
    if let (Some(key), Some(cache)) = (&key, &cache) {
        if let Ok(hit) = JsFuture::from(cache.match_with_str(key)).await {
            if let Ok(resp) = hit.dyn_into::<Response>() {
                let buf = JsFuture::from(resp.array_buffer().map_err(js_err)?).await.map_err(js_err)?;
                let bytes = Uint8Array::new(&buf).to_vec();
                progress(bytes.len() as f64, bytes.len() as f64);
                return Ok((bytes, true));
            }
        }
    }
    let resp = fetch(url, "GET").await?;
    let mut bytes = body_bytes(&resp, &progress).await?;
    if let (Some(key), Some(cache)) = (&key, &cache) {
        // Drop older versions of this file, then store this one. Failing to
        // cache (quota, private mode) only costs a download next time.
        if let Ok(keys) = JsFuture::from(cache.keys()).await {
            for req in js_sys::Array::from(&keys).iter() {
                let old = Reflect::get(&req, &"url".into()).ok().and_then(|u| u.as_string()).unwrap_or_default();
                if unversioned(&old) == unversioned(url) {
                    let _ = JsFuture::from(cache.delete_with_str(&old)).await;
                }
            }
        }
        if let Ok(r) = Response::new_with_opt_u8_array(Some(&mut bytes)) {
            let _ = JsFuture::from(cache.put_with_str(key, &r)).await;
        }
    }
    Ok((bytes, false))
}

//! What WebGPU this browser offers, as the page sees it (the worker starts
//! its own adapter): the page reports it next to the backend line.

use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

#[derive(Debug, Clone, PartialEq)]
pub enum GpuProbe {
    Checking,
    /// `navigator.gpu` is absent (browser without WebGPU, or it is disabled).
    NoApi,
    /// The API exists but `requestAdapter()` gave no adapter.
    NoAdapter(String),
    /// An adapter, described as "vendor architecture"; `software` when the
    /// browser says it is a fallback adapter or names a CPU rasteriser.
    Adapter {
        name: String,
        software: bool,
    },
}

impl GpuProbe {
    /// Short machine-readable state, exposed as a data attribute for tests.
    pub fn code(&self) -> &'static str {
        match self {
            GpuProbe::Checking => "checking",
            GpuProbe::NoApi => "no-api",
            GpuProbe::NoAdapter(_) => "no-adapter",
            GpuProbe::Adapter { software: false, .. } => "adapter",
            GpuProbe::Adapter { software: true, .. } => "software-adapter",
        }
    }

    pub fn describe(&self) -> String {
        match self {
            GpuProbe::Checking => "Checking for WebGPU…".into(),
            GpuProbe::NoApi => "This browser exposes no navigator.gpu (no WebGPU), so the CPU path runs.".into(),
            GpuProbe::NoAdapter(why) => format!("The browser has navigator.gpu but it gave no adapter ({why})."),
            GpuProbe::Adapter { name, software: false } => format!("WebGPU adapter found ({name})."),
            GpuProbe::Adapter { name, software: true } => format!("WebGPU adapter found ({name}), a software one that runs on the CPU."),
        }
    }
}

/// Adapter names of GPUs emulated on the CPU: here they run the kernels
/// 20-25x slower than the CPU engine in wasm (docs/figures.md, "Software
/// GPU adapters").
const SOFTWARE_RASTERISERS: [&str; 4] = ["swiftshader", "llvmpipe", "lavapipe", "microsoft basic render"];

fn get(v: &JsValue, key: &str) -> JsValue {
    Reflect::get(v, &key.into()).unwrap_or(JsValue::UNDEFINED)
}

pub async fn probe() -> GpuProbe {
    let Some(win) = web_sys::window() else { return GpuProbe::NoApi };
    let gpu = get(&win.navigator(), "gpu");
    if gpu.is_undefined() || gpu.is_null() {
        return GpuProbe::NoApi;
    }
    let Ok(request) = get(&gpu, "requestAdapter").dyn_into::<Function>() else { return GpuProbe::NoApi };
    let promise = match request.call0(&gpu) {
        Ok(p) => p.unchecked_into::<Promise>(),
        Err(e) => return GpuProbe::NoAdapter(format!("{e:?}")),
    };
    match JsFuture::from(promise).await {
        Ok(a) if !a.is_null() && !a.is_undefined() => {
            let info = get(&a, "info");
            let s = |k| get(&info, k).as_string().filter(|s| !s.is_empty());
            let name = [s("vendor"), s("architecture"), s("description")].into_iter().flatten().collect::<Vec<_>>().join(" ");
            // `isFallbackAdapter` moved from the adapter to its info in newer browsers
            let fallback = get(&a, "isFallbackAdapter").is_truthy() || get(&info, "isFallbackAdapter").is_truthy();
            let software = fallback || SOFTWARE_RASTERISERS.iter().any(|r| name.to_lowercase().contains(r));
            GpuProbe::Adapter { name: if name.is_empty() { "no adapter info".into() } else { name }, software }
        }
        Ok(_) => GpuProbe::NoAdapter("requestAdapter() returned null".into()),
        Err(e) => GpuProbe::NoAdapter(format!("{e:?}")),
    }
}

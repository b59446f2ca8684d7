//! A small static file server for the page (std only): serves index.html and
//! www/ from the repository, on 127.0.0.1 only, with the MIME types browsers
//! insist on (application/wasm for streaming compilation, text/javascript for
//! module workers) and an ETag the worker uses to version its model cache.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::time::UNIX_EPOCH;

use anyhow::{Context, Result};

pub fn mime(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" => "application/json",
        "wasm" => "application/wasm",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "txt" | "md" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// Binds 127.0.0.1:`port` (0 = any free port).
pub fn bind(port: u16) -> Result<TcpListener> {
    TcpListener::bind(("127.0.0.1", port)).with_context(|| format!("binding 127.0.0.1:{port} (is another server running?)"))
}

/// Serves `root` forever, one thread per connection.
pub fn serve(listener: TcpListener, root: PathBuf) {
    for stream in listener.incoming().flatten() {
        let root = root.clone();
        std::thread::spawn(move || {
            let _ = handle(stream, &root);
        });
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Maps a URL path onto a file: only `/`, `/index.html` and `/www/...`, and
/// never outside the root.
fn resolve(root: &Path, url_path: &str) -> Option<PathBuf> {
    let path = percent_decode(url_path.split(['?', '#']).next()?)?;
    let rel = path.trim_start_matches('/');
    let rel = if rel.is_empty() { "index.html" } else { rel };
    let rel = Path::new(rel);
    if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return None;
    }
    if rel != Path::new("index.html") && !rel.starts_with("www") {
        return None;
    }
    let full = root.join(rel);
    full.is_file().then_some(full)
}

fn handle(mut stream: TcpStream, root: &Path) -> Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
    let mut if_none_match = None;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.trim().eq_ignore_ascii_case("if-none-match") {
                if_none_match = Some(v.trim().to_string());
            }
        }
    }
    let reply = |stream: &mut TcpStream, status: &str, headers: &str, body: &[u8]| -> Result<()> {
        write!(stream, "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n", body.len())?;
        stream.write_all(body)?;
        Ok(stream.flush()?)
    };
    if method != "GET" && method != "HEAD" {
        return reply(&mut stream, "405 Method Not Allowed", "Allow: GET, HEAD\r\n", b"");
    }
    let Some(file) = resolve(root, target) else {
        let msg = format!("404: {target} is not part of the page\n");
        let body = if method == "HEAD" { &b""[..] } else { msg.as_bytes() };
        return reply(&mut stream, "404 Not Found", "Content-Type: text/plain; charset=utf-8\r\n", body);
    };
    let meta = std::fs::metadata(&file)?;
    let mtime = meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map(|d| d.as_nanos()).unwrap_or(0);
    let etag = format!("\"{}-{mtime:x}\"", meta.len());
    let headers = format!("Content-Type: {}\r\nETag: {etag}\r\nCache-Control: no-cache\r\n", mime(&file));
    if if_none_match.as_deref() == Some(etag.as_str()) {
        write!(stream, "HTTP/1.1 304 Not Modified\r\nETag: {etag}\r\nConnection: close\r\n\r\n")?;
        return Ok(());
    }
    if method == "HEAD" {
        write!(stream, "HTTP/1.1 200 OK\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n", meta.len())?;
        return Ok(());
    }
    let mut body = Vec::with_capacity(meta.len() as usize);
    std::fs::File::open(&file)?.read_to_end(&mut body)?;
    reply(&mut stream, "200 OK", &headers, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_page() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        assert_eq!(resolve(root, "/"), Some(root.join("index.html")));
        assert_eq!(resolve(root, "/www/style.css?x=1"), Some(root.join("www/style.css")));
        assert_eq!(resolve(root, "/www/../Cargo.toml"), None);
        assert_eq!(resolve(root, "/www/%2e%2e/Cargo.toml"), None);
        assert_eq!(resolve(root, "/Cargo.toml"), None);
        assert_eq!(mime(Path::new("a/b.wasm")), "application/wasm");
        assert_eq!(mime(Path::new("worker.js")), "text/javascript; charset=utf-8");
    }
}

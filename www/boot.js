// Starts the page (index.html): a file, not an inline script, so the page runs
// under a strict CSP (script-src 'self' 'wasm-unsafe-eval'). The worker is
// started with this script's own query (`cargo xtask dist` versions it), so a
// new release never pairs the page with a cached old worker.
import init, { start_page } from './pkg/nrgpt_web.js';

const worker = new URL('worker.js', import.meta.url);
worker.search = new URL(import.meta.url).search;

try {
  await init();
  start_page(worker.href);
} catch (e) {
  const p = document.createElement('p');
  p.className = 'boot error';
  p.append(`Could not start the page: ${e}`, document.createElement('br'), 'Build it with ');
  const code = document.createElement('code');
  code.textContent = 'cargo xtask serve';
  p.append(code, ' (it writes www/pkg/).');
  document.querySelector('#app-root').replaceChildren(p);
  throw e;
}

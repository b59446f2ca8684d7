// The <iframe> embed (www/embed.html): one widget whose attributes come from
// the page's query string, for hosts that strip <script> from posts. The
// frame tells its parent its height, so a parent that listens can fit it.
const ATTRIBUTES = ['model', 'prompt', 'length', 'temperature', 'top-k', 'seed', 'steps', 'candidates',
  'layout', 'theme', 'loading', 'readonly', 'autoplay', 'poster'];

const params = new URLSearchParams(location.search);
const widget = document.createElement('nrgpt-widget');
for (const name of ATTRIBUTES) {
  if (params.has(name)) widget.setAttribute(name, params.get(name));
}
document.body.append(widget);

new ResizeObserver(() => {
  const height = Math.ceil(document.documentElement.getBoundingClientRect().height);
  parent.postMessage({ type: 'nrgpt-embed-height', height, src: location.href }, '*');
}).observe(document.body);

// The <iframe> embed (www/embed.html): one widget whose attributes come from
// the page's query string, for hosts that strip <script> from posts. The
// frame posts its content's height to its parent on load and on every
// resize; www/embed-host.js on the parent (where a script may run) applies it.
const ATTRIBUTES = ['model', 'prompt', 'length', 'temperature', 'top-k', 'seed', 'steps', 'candidates', 'langevin',
  'layout', 'theme', 'loading', 'readonly', 'autoplay', 'poster', 'engine'];

const params = new URLSearchParams(location.search);
const widget = document.createElement('nrgpt-widget');
for (const name of ATTRIBUTES) {
  if (params.has(name)) widget.setAttribute(name, params.get(name));
}
document.body.append(widget);

new ResizeObserver(() => {
  const height = Math.ceil(document.documentElement.getBoundingClientRect().height);
  parent.postMessage({ type: 'nrgpt-embed-height', height, src: location.href }, '*');
}).observe(document.documentElement);

// Small DOM and number helpers. Text goes in as text nodes, never as HTML: table names are user input.

const SVG_NS = "http://www.w3.org/2000/svg";

function build(node, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** An HTML element: el("td", {class: "text"}, "cat_0", ...). */
export const el = (tag, attrs, ...children) => build(document.createElement(tag), attrs, children);

/** An SVG element, likewise. */
export const svg = (tag, attrs, ...children) => build(document.createElementNS(SVG_NS, tag), attrs, children);

/** A number with about three significant digits (12.3, 1.23, 0.0123). */
export function num(value, digits = 3) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (value === 0) return "0";
  const magnitude = Math.floor(Math.log10(Math.abs(value)));
  const decimals = Math.max(0, Math.min(6, digits - 1 - magnitude));
  return value.toLocaleString("en-US", { minimumFractionDigits: decimals, maximumFractionDigits: decimals });
}

export const gib = (bytes) => num(bytes / 1024 ** 3);
export const pct = (share) => `${num(share * 100, 2)}%`;

/** A table: headers, then rows of cells (a cell is a value or an element). */
export function table(headers, rows, attrs = {}) {
  return el(
    "table",
    { class: "data", ...attrs },
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((c) => (c instanceof Node && c.tagName === "TD" ? c : el("td", {}, c)))))),
  );
}

/** Save text as a file through a temporary link (no server round trip). */
export function download(filename, text) {
  const url = URL.createObjectURL(new Blob([text], { type: "application/json" }));
  const link = el("a", { href: url, download: filename, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

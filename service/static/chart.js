// One plan's devices as bars, drawn by hand in SVG: cost on top (compute, then communication
// within the host, then to other hosts), memory against the device's cap below; hovering a
// device lists its parts and its shards.
import { el, gib, num, pct, svg } from "./dom.js";

const COST_H = 230;
const MEMORY_H = 70;
const GAP = 26; // between the two panels
const LEFT = 56;
const TOP = 16;
const BOTTOM = 40;
const RIGHT = 110; // room for the guides' labels

/** Each rank's memory cap in bytes, from the answer's topology (one value or one per rank). */
export function capsOf(topology, n) {
  const gb = topology.device_memory_gb;
  return Array.from({ length: n }, (_, r) => (Array.isArray(gb) ? gb[r] : gb) * 1024 ** 3);
}

function niceStep(max, ticks) {
  const raw = max / ticks;
  const power = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => s >= raw);
}

function axis(top, height, max, unit, width) {
  const step = niceStep(max, 4);
  const out = [];
  for (let v = 0; v <= max + 1e-9; v += step) {
    const y = top + height - (v / max) * height;
    out.push(svg("line", { class: "grid-line", x1: LEFT, x2: width, y1: y, y2: y }));
    out.push(svg("text", { class: "axis", x: LEFT - 6, y: y + 4, "text-anchor": "end" }, unit(v)));
  }
  return out;
}

function hostBands(devices, slot, top, height) {
  const out = [];
  let start = 0;
  devices.forEach((device, r) => {
    const last = r === devices.length - 1 || devices[r + 1].host !== device.host;
    if (!last) return;
    const x = LEFT + start * slot;
    const w = (r + 1 - start) * slot;
    if (device.host % 2 === 1) out.push(svg("rect", { class: "host-band", x, y: top, width: w, height }));
    out.push(svg("text", { class: "axis", x: x + w / 2, y: top + height + 32, "text-anchor": "middle" }, `host ${device.host}`));
    start = r + 1;
  });
  return out;
}

function guide(y, width, cls, label) {
  return [
    svg("line", { class: cls, x1: LEFT, x2: width, y1: y, y2: y }),
    svg("text", { class: "axis", x: width + 4, y: y + 4 }, label),
  ];
}

/** The device's communication per tier ({intra, inter}), or null where the answer does not split it. */
export const tiersOf = (device) => device.communication_by_tier_ms ?? null;

/** "compute a + intra-host b + inter-host c" (or "+ communication c" where it is not split). */
export function partsText(device) {
  const tiers = tiersOf(device);
  const comm = tiers
    ? `intra-host ${num(tiers.intra)} + inter-host ${num(tiers.inter)}`
    : `communication ${num(device.communication_ms)}`;
  return `compute ${num(device.compute_ms)} + ${comm}`;
}

/** Where the answer's communication is declared, not measured, the words that say so (else null). */
export function declaredNote(communication) {
  return communication?.source === "declared" ? "communication declared, not measured" : null;
}

/** The tooltip's content for one device. */
function describe(device, rank, cap, unit, communication) {
  const shards = device.shards.map((s, i) =>
    el("li", {}, device.tables[i] || s.table, ` · ${s.sharding_type} · ${s.rows.toLocaleString()} rows × ${s.columns} cols`),
  );
  const declared = declaredNote(communication);
  return [
    el("b", {}, `rank ${rank}`), ` (host ${device.host}): ${num(device.cost_ms)} ${unit}`,
    el("br"), partsText(device),
    declared && el("br"), declared && el("i", {}, `(${declared})`),
    el("br"), `memory ${gib(device.memory_bytes)} GiB of ${gib(cap)} GiB (${pct(device.memory_bytes / cap)})`,
    el("ul", {}, shards.length ? shards : el("li", {}, "no shards")),
  ];
}

/** The cost bar's segments, bottom up: compute, then communication within the host and to other hosts. */
function costSegments(device, y, x0, w) {
  const tiers = tiersOf(device);
  const tops = tiers
    ? [["compute", device.compute_ms], ["intra", device.compute_ms + tiers.intra], ["inter", device.cost_ms]]
    : [["compute", device.compute_ms], ["comm", device.cost_ms]];
  let base = 0;
  return tops.map(([cls, top]) => {
    const rect = svg("rect", { x: x0, y: y(top), width: w, height: Math.max(0, y(base) - y(top)), class: cls });
    base = top;
    return rect;
  });
}

function bindTip(group, tip, content) {
  group.addEventListener("mousemove", (event) => {
    tip.replaceChildren(...content().filter((part) => part !== null && part !== false));
    tip.hidden = false;
    const x = Math.min(event.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    const y = Math.min(event.clientY + 14, window.innerHeight - tip.offsetHeight - 8);
    tip.style.left = `${x}px`;
    tip.style.top = `${y}px`;
  });
  group.addEventListener("mouseleave", () => { tip.hidden = true; });
}

/** The plan's bars on a cost axis up to `scaleMax`; `best`, the best plan's max, as a line to compare with;
 * `communication`, the answer's (what priced it: the tooltip says where it is declared). */
export function deviceChart(plan, topology, scaleMax, best, unit, tip, width, communication = null) {
  const devices = plan.devices;
  const caps = capsOf(topology, devices.length);
  const slot = Math.max(8, (width - LEFT - RIGHT) / devices.length);
  const right = LEFT + slot * devices.length;
  const memTop = TOP + COST_H + GAP;
  const memMax = Math.max(1, ...devices.map((d, r) => d.memory_bytes / caps[r]));
  const y = (v) => TOP + COST_H - (v / scaleMax) * COST_H;
  const root = svg("svg", { width: right + RIGHT, height: memTop + MEMORY_H + BOTTOM, role: "img", "aria-label": `devices of ${plan.planner}` });
  root.append(
    ...hostBands(devices, slot, TOP, memTop + MEMORY_H - TOP),
    ...axis(TOP, COST_H, scaleMax, (v) => `${+v.toFixed(3)}`, right),
    ...axis(memTop, MEMORY_H, memMax, (v) => `${Math.round(v * 100)}%`, right).filter((_, i) => i % 2 === 0 || memMax <= 1),
    svg("text", { class: "axis", x: 4, y: TOP - 4 }, unit === "ms" ? "cost, ms" : "cost"),
    svg("text", { class: "axis", x: 4, y: memTop - 6 }, "memory of cap"),
    ...guide(y(plan.max_cost_ms), right, "max-line", `max ${num(plan.max_cost_ms)}`),
  );
  if (best < plan.max_cost_ms) root.append(...guide(y(best), right, "best-line", `best ${num(best)}`));
  if (plan.expected_max_ms && plan.expected_max_ms <= scaleMax) {
    root.append(...guide(y(plan.expected_max_ms), right, "expected-line", `expected ${num(plan.expected_max_ms)}`));
  }
  root.append(...guide(memTop + MEMORY_H - (1 / memMax) * MEMORY_H, right, "max-line", "cap"));
  const labelEvery = Math.ceil(devices.length / 48);
  const maxRank = devices.findIndex((d) => d.cost_ms === plan.max_cost_ms);
  devices.forEach((device, rank) => {
    const x = LEFT + rank * slot;
    const w = Math.max(3, slot * 0.7);
    const x0 = x + (slot - w) / 2;
    const share = device.memory_bytes / caps[rank];
    const group = svg(
      "g",
      { class: "device bar", "data-rank": rank, "data-cost": device.cost_ms },
      svg("rect", { x, y: TOP, width: slot, height: memTop + MEMORY_H - TOP, class: "hover" }),
      ...costSegments(device, y, x0, w),
      svg("rect", {
        x: x0, y: memTop + MEMORY_H - (share / memMax) * MEMORY_H, width: w, height: (share / memMax) * MEMORY_H,
        class: share > 0.95 ? "memory full" : "memory",
      }),
      rank % labelEvery === 0 && svg("text", { class: "axis", x: x + slot / 2, y: memTop + MEMORY_H + 14, "text-anchor": "middle" }, rank),
      rank === maxRank && svg("text", { class: "max-mark", x: x + slot / 2, y: y(device.cost_ms) - 4, "text-anchor": "middle" }, "max"),
    );
    bindTip(group, tip, () => describe(device, rank, caps[rank], unit, communication));
    root.append(group);
  });
  return root;
}

/** The chart's legend as [class, label, title]: the communication per tier where the plan's devices
 * split it, one segment where they do not; "declared, not measured" where the answer says so. */
export function legendOf(plan, communication) {
  const declared = declaredNote(communication) ? " (declared, not measured)" : "";
  const why = communication ? communication.description : "";
  const split = plan.devices.every(tiersOf);
  const comm = split
    ? [["intra", `intra-host communication${declared}`, why], ["inter", `inter-host communication${declared}`, why]]
    : [["comm", `communication, not split by tier${declared}`, why]];
  if (split && plan.devices.every((d) => d.communication_by_tier_ms.inter === 0)) comm.pop(); // one host
  return [
    ["compute", "compute", ""],
    ...comm,
    ["memory", "memory of the device's cap", ""],
    ["full", "above 95% of the cap", ""],
  ];
}

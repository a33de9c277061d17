// The answer of POST /v1/plans as tables: the planners side by side, what makes the max, the
// best plan's stats, and the judges' verdicts when the answer carries them.
import { partsText } from "./chart.js";
import { el, gib, num, pct, table } from "./dom.js";

/** One row per planner: predicted max, expected max, planning time; the best marked. Click chooses. */
export function summaryTable(answer, chosen, onChoose) {
  const best = answer.plans.find((p) => p.best);
  const rows = answer.plans.map((plan) => {
    const cells = [
      el("td", { class: "text" },
        el("input", { type: "radio", name: "chosen", value: plan.planner, checked: plan.planner === chosen, "aria-label": plan.planner }),
        plan.planner, plan.best && el("span", { class: "badge" }, "best")),
      num(plan.max_cost_ms),
      num(plan.expected_max_ms),
      plan.best ? "–" : `+${pct(plan.max_cost_ms / best.max_cost_ms - 1)}`,
      pct(plan.imbalance),
      num(plan.plan_time_s),
    ];
    const row = el("tr", { "data-planner": plan.planner, class: plan.planner === chosen ? "chosen" : "", onclick: () => onChoose(plan.planner) }, cells.map((c) => (c instanceof Node ? c : el("td", {}, c))));
    return row;
  });
  const unit = answer.cost_unit === "ms" ? "ms" : "proxy";
  return el("table", { class: "data", id: "summary" },
    el("thead", {}, el("tr", {}, ["planner", `predicted max, ${unit}`, "expected max", "vs best", "imbalance", "planning, s"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
}

/** Which device is the max, what it is made of, and how near each device is to its cap. */
export function maxInfo(plan, caps, unit) {
  const costs = plan.devices.map((d) => d.cost_ms);
  const rank = costs.indexOf(Math.max(...costs));
  const device = plan.devices[rank];
  const mean = costs.reduce((a, b) => a + b, 0) / costs.length;
  const stats = plan.stats;
  const shards = stats
    ? table(["shard", "type", `cost alone, ${unit}`, "of the rank"],
        stats.max_rank_shards.map((s) => [el("td", { class: "text" }, s.shard), s.sharding_type, num(s.cost_alone_ms), pct(s.share_of_rank)]))
    : table(["shard", "type", "rows", "columns"],
        device.shards.map((s, i) => [el("td", { class: "text" }, device.tables[i] || s.table), s.sharding_type, s.rows.toLocaleString(), s.columns]));
  const fullest = plan.devices.map((d, r) => [r, d.memory_bytes / caps[r]]).sort((a, b) => b[1] - a[1])[0];
  return [
    el("h3", {}, "What makes the max"),
    el("p", {},
      `Rank ${rank} (host ${device.host}) at ${num(device.cost_ms)} ${unit}, ${pct(device.cost_ms / mean - 1)} above the mean ${num(mean)}: `,
      `${partsText(device)}. `,
      `Nearest its memory cap: rank ${fullest[0]} at ${pct(fullest[1])}.`),
    stats ? el("p", { class: "hint" }, "Each shard's cost alone; shares need not sum to 1 (costs on a device do not add).") : null,
    shards,
  ];
}

function details(title, content, open = false) {
  return el("details", { open }, el("summary", {}, title), el("div", { class: "scroll" }, content));
}

/** The best plan's stats (stats: true): per rank, per table, imbalance and the critical path. */
export function statsTables(stats) {
  if (!stats) return [];
  const u = stats.cost_unit === "ms" ? "ms" : "proxy";
  const shardsOf = (counts) => Object.entries(counts).map(([k, v]) => `${k}:${v}`).join(" ");
  const ranks = table(
    ["rank", "host", `cost, ${u}`, "compute", "comms", "GiB", "of cap", "ids MiB", "out MiB", "shards"],
    stats.ranks.map((r) => [
      r.rank === stats.max.rank ? `${r.rank}*` : r.rank, r.host, num(r.cost_ms), num(r.compute_ms), num(r.communication_ms),
      gib(r.memory_bytes), pct(r.memory_share), num(r.input_bytes / 2 ** 20), num(r.output_bytes / 2 ** 20), el("td", { class: "text" }, shardsOf(r.shards)),
    ]),
  );
  const tables = table(
    ["table", "type", "ranks", "shards", `cost alone, ${u}`, "compute alone", "comms", "GiB", "pooling"],
    stats.tables.map((t) => [
      t.table, t.sharding_type, el("td", { class: "text" }, t.ranks.join(" ")), t.shards, num(t.cost_alone_ms),
      num(t.compute_alone_ms), num(t.communication_ms), gib(t.memory_bytes), num(t.pooling_factor),
    ]),
  );
  const imb = stats.imbalance;
  const imbalance = table(
    ["", "max / mean - 1", "total variation", "KL divergence"],
    [["cost", imb.cost], ["memory", imb.memory]].map(([name, i]) => [name, pct(i.max_over_mean), num(i.total_variation), num(i.kl_divergence)]),
  );
  const cp = stats.critical_path;
  const critical = el("p", {},
    `Critical path: rank ${cp.rank}, compute ${num(cp.compute_ms)} + communication ${num(cp.communication_ms)} = ${num(cp.total_ms)} ${u}; `,
    `if every phase were synchronised (TorchRec's view), ${num(cp.sum_of_maxima_ms)}.`);
  return [
    el("h2", {}, `Stats of the best plan (${stats.planner})`),
    details("Per rank (* the max)", ranks, true),
    details(`Per table (${stats.tables.length})`, tables),
    details("Imbalance and critical path", [imbalance, critical], true),
  ];
}

const JUDGE_NAMES = {
  autoshard: "AutoShard's cost model",
  torchrec_estimator: "TorchRec's estimator",
  torchrec_estimator_measured_links: "TorchRec's estimator at measured links",
  dmp: "DMP, measured",
};

/** The judges side by side (the answer's `judges`, when it has them): each plan's slowest rank under each. */
export function judges(verdict) {
  if (!verdict) return [];
  if (!Array.isArray(verdict.judges) || !Array.isArray(verdict.plans)) {
    return [el("h2", {}, "Judges"), el("pre", {}, JSON.stringify(verdict, null, 1))];
  }
  const headers = ["plan", ...verdict.judges.map((j) => `${JUDGE_NAMES[j.judge] || j.judge}, ms`)];
  const rows = verdict.plans.map((plan, i) => [
    plan,
    ...verdict.judges.map((j) => el("td", {}, num(j.max_ms[i]), j.prefers === plan ? el("span", { class: "badge" }, "fastest") : null)),
  ]);
  const notes = verdict.judges.filter((j) => j.note).map((j) => el("li", {}, `${JUDGE_NAMES[j.judge] || j.judge}: ${j.note}`));
  return [
    el("h2", {}, "Judges"),
    el("p", {}, verdict.agree ? "The judges agree on the fastest plan." : verdict.disagreement || "The judges disagree."),
    table(headers, rows, { id: "judges-table" }),
    notes.length ? el("ul", { class: "hint" }, notes) : null,
  ];
}

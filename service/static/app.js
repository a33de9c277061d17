// The planning page: read the form, POST /v1/plans (stats and the TorchRec export), show the plans.
// Nothing is stored: the token lives in its field and goes out only as the API's bearer header.
import { ApiError, call, fieldOf, fixes, path } from "./api.js";
import { capsOf, deviceChart, legendOf } from "./chart.js";
import { download, el } from "./dom.js";
import { judges, maxInfo, statsTables, summaryTable } from "./results.js";

const $ = (id) => document.getElementById(id);
const state = { answer: null, text: "", chosen: null, controller: null };
const CLUSTER = ["num_hosts", "devices_per_host", "device_memory_gb", "intra_host_bw_gbps", "inter_host_bw_gbps"];

/** A problem the page finds before asking the service, shown beside its field like the API's. */
class FieldProblem extends Error {
  constructor(field, message, fixList = []) {
    super(message);
    this.field = field;
    this.fixes = fixList;
  }
}

function clearErrors() {
  for (const box of document.querySelectorAll(".error")) box.replaceChildren();
  for (const input of document.querySelectorAll(".invalid")) input.classList.remove("invalid");
}

function showError(field, message, where = "", fixList = []) {
  const box = document.querySelector(`.error[data-for="${field}"]`) || document.querySelector('.error[data-for="general"]');
  box.append(el("p", {}, where && el("code", {}, where), where && ": ", message));
  if (fixList.length) box.append(el("ul", {}, fixList.map((fix) => el("li", {}, "fix: ", fix))));
  $(field)?.classList.add("invalid");
}

function showApiError(error) {
  for (const item of error.detail) showError(fieldOf(error.status, item.loc), item.msg, path(item.loc), fixes(item));
}

const token = () => $("token").value.trim();

// ---- what the service offers: planners, profiles, bundled workloads

function renderPlanners(planners) {
  $("planners").replaceChildren(
    ...planners.map((p) =>
      el("label", { class: p.available ? "" : "off", title: p.reason || p.kind },
        el("input", { type: "checkbox", value: p.name, checked: p.available && p.default, disabled: !p.available }),
        p.name),
    ),
  );
}

function renderProfiles(profiles) {
  $("profile").replaceChildren(
    ...profiles.map((p) => el("option", { value: p.profile, selected: p.default }, p.default ? `${p.profile} (default)` : p.profile)),
  );
}

async function loadCatalogs() {
  for (const field of ["token", "planners", "profile"]) document.querySelector(`.error[data-for="${field}"]`).replaceChildren();
  try {
    const [planners, profiles] = await Promise.all([call("/v1/planners", { token: token() }), call("/v1/profiles", { token: token() })]);
    renderPlanners(planners.data.planners);
    renderProfiles(profiles.data.profiles);
  } catch (error) {
    const why = error.status === 401 ? "type the API token (below) to list them" : "listed once the service answers";
    $("planners").replaceChildren(el("span", { class: "hint" }, why));
    if (error instanceof ApiError) showApiError(error);
    else showError("general", `cannot reach the service: ${error.message}`);
  }
}

function fillCluster(topology) {
  if (!topology) return;
  const hosts = topology.num_hosts || 1;
  const values = { ...topology, num_hosts: hosts, devices_per_host: topology.devices_per_host || topology.num_devices / hosts };
  for (const id of CLUSTER) if (typeof values[id] === "number") $(id).value = values[id];
}

function setWorkload(text) {
  $("workload").value = text;
  describeWorkload();
  try {
    fillCluster(JSON.parse(text).topology); // the file's cluster, if it has one, as a starting point
  } catch {
    // shown when planning
  }
}

function describeWorkload() {
  try {
    const w = JSON.parse($("workload").value);
    const n = w.tables.length;
    $("workload-summary").textContent = `${w.name || "workload"}: ${n} table${n === 1 ? "" : "s"}, batch ${w.batch_size || 2048} per device`;
  } catch {
    $("workload-summary").textContent = "";
  }
}

async function loadPresets() {
  const { data } = await call("/web/presets");
  $("preset").append(...data.presets.map((name) => el("option", { value: name }, name)));
  if (!$("workload").value && data.presets.includes("criteo_terabyte")) {
    $("preset").value = "criteo_terabyte"; // a first plan is one click away
    await choosePreset();
  }
}

async function choosePreset() {
  const name = $("preset").value;
  if (name) setWorkload(JSON.stringify((await call(`/web/presets/${encodeURIComponent(name)}`)).data, null, 1));
}

// ---- the request

function readWorkload() {
  let workload;
  try {
    workload = JSON.parse($("workload").value);
  } catch (error) {
    throw new FieldProblem("workload", `not JSON: ${error.message}`, ["paste or upload a workload file, or pick a preset"]);
  }
  if (!workload || typeof workload !== "object" || Array.isArray(workload)) {
    throw new FieldProblem("workload", "a workload file is a JSON object", ['{"tables": [{"name": "t0", "num_embeddings": 1000, "embedding_dim": 64}]}']);
  }
  const { topology, ...rest } = workload; // the cluster fields take the file's topology's place
  return rest;
}

function requestBody() {
  const topology = {};
  for (const id of CLUSTER) if ($(id).value !== "") topology[id] = Number($(id).value);
  const planners = [...document.querySelectorAll("#planners input:checked")].map((box) => box.value);
  if (!planners.length) throw new FieldProblem("planners", "no planner chosen", ["tick at least one planner"]);
  const budget = $("time_budget_s").value;
  return {
    workload: readWorkload(),
    topology,
    planners,
    profile: $("profile").value || null,
    time_budget_s: budget === "" ? null : Number(budget),
    stats: true,
  };
}

/** With the TorchRec export when the service can make it; without it (and saying so) when it cannot. */
async function requestPlans(body, signal) {
  try {
    return { ...(await call("/v1/plans?format=torchrec", { token: token(), body, signal })), torchrec: true };
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 503 && error.message.includes("format=torchrec"))) throw error;
    return { ...(await call("/v1/plans", { token: token(), body, signal })), torchrec: false };
  }
}

function busy(on, body) {
  $("plan").disabled = on;
  $("cancel").disabled = !on;
  $("progress").hidden = !on;
  clearInterval(state.ticker);
  if (!on) return;
  const started = performance.now();
  const budget = body.time_budget_s || 10;
  const what = `${body.workload.tables?.length ?? 0} tables with ${body.planners.length} planners`;
  state.ticker = setInterval(() => {
    const seconds = (performance.now() - started) / 1000;
    $("budget").value = Math.min(1, seconds / budget);
    $("status").textContent = `Planning ${what}: ${seconds.toFixed(1)} s of a ${budget} s time budget`;
  }, 100);
}

async function plan(event) {
  event.preventDefault();
  clearErrors();
  let body;
  try {
    body = requestBody();
  } catch (problem) {
    if (!(problem instanceof FieldProblem)) throw problem;
    showError(problem.field, problem.message, "", problem.fixes);
    $("status").textContent = "Fix the field marked in red.";
    return;
  }
  const controller = new AbortController();
  state.controller = controller;
  const waitS = (body.time_budget_s || 10) + 30; // the service answers within its budget; this covers the trip
  const timer = setTimeout(() => controller.abort(new DOMException("timed out", "TimeoutError")), waitS * 1000);
  const started = performance.now();
  busy(true, body);
  try {
    const answer = await requestPlans(body, controller.signal);
    show(answer);
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    $("status").textContent = `Planned in ${seconds} s${answer.data.partial ? ": the time budget ran out, some planners did not finish" : ""}.`;
  } catch (error) {
    $("status").textContent = failure(error, controller.signal, waitS);
  } finally {
    clearTimeout(timer);
    busy(false);
  }
}

function failure(error, signal, waitS) {
  if (signal.aborted) {
    return signal.reason?.name === "TimeoutError"
      ? `Timed out: no answer within ${waitS} s. Lower the time budget or plan fewer tables.`
      : "Cancelled: no plan shown (the service still finishes the planning it started).";
  }
  if (!(error instanceof ApiError)) return `No answer from the service: ${error.message}`;
  showApiError(error);
  if (error.status === 504) return "Timed out on the service: no planner finished within the time budget (504).";
  if (error.status === 401) return "The service wants its API token (401): type it in the token field.";
  return `The service refused the request (${error.status}): see the field marked in red.`;
}

// ---- the answer

function show({ data, text, torchrec }) {
  state.answer = data;
  state.text = text;
  state.torchrec = torchrec;
  state.chosen = data.best;
  $("results").hidden = false;
  fill("warnings", data.warnings.map((w) => el("p", { class: "warning" }, w)));
  fill("judges", judges(data.judges));
  fill("stats", statsTables(data.plans.find((p) => p.stats)?.stats));
  render();
}

/** Replace an element's children, skipping the parts a renderer left out (null). */
const fill = (id, nodes) => $(id).replaceChildren(...nodes.filter(Boolean));

/** What depends on the chosen plan: the planners' table, the bars, what makes the max, the download. */

function render() {
  const answer = state.answer;
  const plan = answer.plans.find((p) => p.planner === state.chosen);
  const topo = answer.topology;
  const unit = answer.cost_unit === "ms" ? "ms" : "proxy units";
  $("summary").replaceWith(summaryTable(answer, state.chosen, choose));
  $("summary-note").textContent =
    `${answer.workload.name}: ${answer.workload.tables} tables on ${topo.num_hosts} × ${topo.devices_per_host} devices, ` +
    `profile ${answer.profile ?? "none (proxy costs)"}. Click a planner to see its devices.`;
  const skipped = answer.skipped.map((s) => `${s.planner} (${s.reason})`);
  if (answer.timed_out.length) skipped.push(`timed out: ${answer.timed_out.join(", ")}`);
  $("skipped").textContent = skipped.length ? `Not planned: ${skipped.join("; ")}` : "";
  $("download-torchrec").textContent = `Download ${plan.planner}'s TorchRec plan`;
  $("download-torchrec").disabled = !plan.torchrec;
  $("download-note").textContent = state.torchrec ? "" : "The TorchRec export needs torchrec installed in the service.";
  $("chart-title").textContent = `Devices of ${plan.planner}${plan.best ? " (best)" : ""}`;
  const legend = legendOf(plan, answer.communication);
  $("legend").replaceChildren(...legend.map(([cls, label, title]) => el("span", { title: title || null }, el("i", { class: cls }), label)));
  const best = answer.plans.find((p) => p.best);
  const scaleMax = Math.max(plan.max_cost_ms, plan.expected_max_ms || 0, best.expected_max_ms || 0) * 1.1;
  const width = Math.max(480, $("chart").clientWidth - 4);
  $("chart").replaceChildren(
    deviceChart(plan, topo, scaleMax, best.max_cost_ms, answer.cost_unit === "ms" ? "ms" : "", $("tip"), width, answer.communication),
  );
  fill("max-info", maxInfo(plan, capsOf(topo, plan.devices.length), unit));
}

function choose(planner) {
  state.chosen = planner;
  render();
}

const fileName = (...parts) => `${parts.join("_").replace(/[^\w.-]+/g, "_")}.json`;

/** The file `autoshard plan --format torchrec --out` writes, for the chosen plan. */
function downloadTorchrec() {
  const answer = state.answer;
  const plan = answer.plans.find((p) => p.planner === state.chosen);
  const topo = answer.topology;
  const file = {
    planner: plan.planner,
    world_size: topo.num_devices,
    ...(topo.num_hosts > 1 ? { local_world_size: topo.devices_per_host } : {}),
    workload: answer.workload.name,
    max_cost_ms: plan.max_cost_ms,
    tables: plan.torchrec,
  };
  download(fileName(answer.workload.name, plan.planner, "torchrec"), `${JSON.stringify(file, null, 1)}\n`);
}

function start() {
  $("form").addEventListener("submit", plan);
  $("cancel").addEventListener("click", () => state.controller?.abort());
  $("token").addEventListener("change", loadCatalogs);
  $("preset").addEventListener("change", choosePreset);
  $("workload").addEventListener("input", () => {
    $("preset").value = ""; // edited: no longer the preset
    describeWorkload();
  });
  $("upload").addEventListener("change", async () => {
    const file = $("upload").files[0];
    if (file) setWorkload(await file.text());
  });
  $("download-torchrec").addEventListener("click", downloadTorchrec);
  $("download-json").addEventListener("click", () => download(fileName(state.answer.workload.name, "plans"), state.text));
  window.addEventListener("resize", () => state.answer && render());
  loadPresets().catch((error) => showError("workload", `no presets: ${error.message}`));
  loadCatalogs();
}

start();

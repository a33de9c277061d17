// The service's API, same origin, with the bearer token the user typed (kept in the field only).

/** An error answer: its HTTP status and the API's `detail` items ({loc, msg, type, ctx}). */
export class ApiError extends Error {
  constructor(status, detail) {
    super(detail.map((d) => d.msg).join("; "));
    this.status = status;
    this.detail = detail;
  }
}

/** GET (no body) or POST (a body) a JSON route; throws ApiError for an error answer. */
export async function call(path, { token, body, signal } = {}) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(path, {
    method: body === undefined ? "GET" : "POST",
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
    credentials: "same-origin",
    cache: "no-store",
  });
  const text = await response.text();
  let data = null;
  try {
    data = JSON.parse(text);
  } catch {
    // not JSON: reported below as the status line
  }
  if (!response.ok) {
    let detail = data && data.detail;
    if (!Array.isArray(detail)) detail = [{ loc: [], msg: String(detail || text || response.statusText) }];
    throw new ApiError(response.status, detail);
  }
  return { data, text };
}

const TOPOLOGY_INPUTS = {
  num_hosts: "num_hosts",
  devices_per_host: "devices_per_host",
  num_devices: "devices_per_host",
  device_memory_gb: "device_memory_gb",
  intra_host_bw_gbps: "intra_host_bw_gbps",
  inter_host_bw_gbps: "inter_host_bw_gbps",
};

/** The page field an error's `loc` names: ["body", "topology", "num_hosts"] -> "num_hosts". */
export function fieldOf(status, loc) {
  if (status === 401) return "token";
  const [where, top, sub] = loc || [];
  if (where !== "body") return "general";
  if (top === "topology") return TOPOLOGY_INPUTS[sub] || "topology";
  if (top === "workload") return "workload";
  if (["planners", "profile", "time_budget_s"].includes(top)) return top;
  return "general";
}

/** Where in the request an error is, readable: workload.tables[3].embedding_dim. */
export function path(loc) {
  return (loc || [])
    .slice(1)
    .map((part) => (typeof part === "number" ? `[${part}]` : `.${part}`))
    .join("")
    .replace(/^\./, "");
}

/** The fixes an error item carries (ctx.fix or ctx.fixes), less any the message already says. */
export function fixes(item) {
  const ctx = item.ctx || {};
  const all = [...(Array.isArray(ctx.fixes) ? ctx.fixes : []), ...(typeof ctx.fix === "string" ? [ctx.fix] : [])];
  return all.filter((fix) => !item.msg.includes(fix));
}

// A panel agent typed by openapi-typescript (tests/api/test_generated_typescript.py): its long poll and report.
import type { paths } from "./schema";

type ConfigOp = paths["/v1/panels/{panel_id}/config"]["get"];
type StateOp = paths["/v1/panels/{panel_id}/state"]["put"];
type Config = ConfigOp["responses"][200]["content"]["application/json"];
type Report = StateOp["requestBody"]["content"]["application/json"];
type Stored = StateOp["responses"][200]["content"]["application/json"];
type ConfigHeaders = NonNullable<ConfigOp["parameters"]["header"]>;

export async function pollOnce(base: string, panel: string, held: number): Promise<Config | null> {
  const headers: ConfigHeaders = { "If-None-Match": `"${held}"` };
  const r = await fetch(`${base}/v1/panels/${panel}/config?wait=60`, { headers: headers as Record<string, string> });
  if (r.status === 304) return null;
  const cfg = (await r.json()) as Config;
  const version: number = cfg.version;
  const ports: Array<[number, number]> = cfg.cross_connects.map((c) => [c.ingress, c.egress]);
  const adds: number = cfg.diff.add.length + cfg.planes.active;
  console.log(version, ports.length, adds, cfg.profile.reconfiguration_s.toFixed(1));
  return cfg;
}

export async function report(base: string, panel: string, cfg: Config): Promise<string[]> {
  const body: Report = { applied_version: cfg.version, status: "applied" };
  const r = await fetch(`${base}/v1/panels/${panel}/state`, {
    method: "PUT", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const stored = (await r.json()) as Stored;
  const ready: string[] = stored.fabric_ready_plans;
  const n: number = stored.revisions.length + stored.latest_version;
  console.log(n);
  return ready;
}

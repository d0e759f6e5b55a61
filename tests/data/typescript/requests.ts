// Minimal request bodies (only the required fields) typed by openapi-typescript: defaults stay optional.
import type { paths } from "./schema";
type PlanBody = paths["/v1/plans"]["post"]["requestBody"]["content"]["application/json"];
type FabricBody = paths["/v1/fabrics"]["post"]["requestBody"]["content"]["application/json"];
type Failures = paths["/v1/plans/{plan_id}/failures"]["post"]["requestBody"]["content"]["application/json"];
type Eval = paths["/v1/topologies/evaluate"]["post"]["requestBody"]["content"]["application/json"];
export const plan: PlanBody = { job_id: "j", nodes: 8, degree: 2, alpha_us: 10, bandwidth_gbps: 100,
  workload: { collective: "allreduce", sizes_bytes: [1024] } };
export const fabric: FabricBody = { id: "f", layout: "planes", hosts: 8, ports_per_host: 2 };
export const failures: Failures = { links: [{ arc: "0>1" }] };
export const ev: Eval = { expr: "ring(8)" };

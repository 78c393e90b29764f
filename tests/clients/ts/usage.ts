// A small typed client of the reactsite API, written against the types openapi-typescript generates from the
// served document (tests/clients/test_typescript_types.py puts them in ./api.ts beside this file, then runs tsc).
// Each `@ts-expect-error` is a check too: tsc fails if the line it marks compiles.
import type { components, paths } from "./api";

type Schemas = components["schemas"];
type Run = Schemas["Run"];
type RunDetail = Schemas["RunDetail"];
type Step = Schemas["Step"];
type RunCreate = paths["/api/v1/runs/"]["post"]["requestBody"]["content"]["application/json"];
type Advance = NonNullable<paths["/api/v1/runs/{id}/advance/"]["post"]["requestBody"]>["content"]["application/json"];
type ListQuery = NonNullable<paths["/api/v1/runs/"]["get"]["parameters"]["query"]>;
type RunList = paths["/api/v1/runs/"]["get"]["responses"][200]["content"]["application/json"];

async function call<T>(base: string, token: string, method: string, path: string, body?: unknown): Promise<T> {
  const response = await fetch(base + path, {
    method,
    headers: { Authorization: `Token ${token}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return (await response.json()) as T;
}

export function createRun(base: string, token: string, body: RunCreate): Promise<Run> {
  return call<Run>(base, token, "POST", "/api/v1/runs", body);
}

export function advance(base: string, token: string, id: string, body: Advance): Promise<Run> {
  return call<Run>(base, token, "POST", `/api/v1/runs/${id}/advance`, body);
}

export function listRuns(base: string, token: string, query: ListQuery): Promise<RunList> {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value !== undefined) params.set(key, String(value));
  }
  return call<RunList>(base, token, "GET", `/api/v1/runs?${params}`);
}

// Steps are a union told apart by `kind`: each branch sees its own fields, typed.
export function describe(step: Step): string {
  switch (step.kind) {
    case "model": {
      const calls = step.tool_calls.map((c) => `${c.name}(${JSON.stringify(c.arguments)})`).join(", ");
      const tokens: number = step.usage.total_tokens;
      const finish: "output_truncated" | "content_filtered" | "refused" | "pause_turn" | undefined = step.finish;
      const reflection: boolean | undefined = step.reflection;
      return `model: ${step.final_answer ?? step.thought ?? step.text} ${calls} (${tokens} tokens, ${finish}, ${reflection})`;
    }
    case "tool":
      return `tool ${step.name} [${step.call_id}]: ${step.is_error ? "error: " : ""}${step.output}`;
    case "approval": {
      const who: string = step.reviewer ?? "the system";
      const edited = JSON.stringify(step.original_arguments) !== JSON.stringify(step.arguments);
      return `${step.name} ${step.approved ? "approved" : "denied"} by ${who}${edited ? " (edited)" : ""}: ${step.reason ?? ""}`;
    }
    case "error":
      return `error: ${step.message}`;
    case "summary":
      return `summary of ${step.runs} earlier run(s): ${step.summary ?? step.error ?? ""}`;
    default: {
      const never: never = step; // every kind is handled
      return never;
    }
  }
}

export function trace(run: RunDetail): string[] {
  const when: string = run.created_at;
  return [`${run.id} ${run.status} ${run.stop_reason ?? ""} ${when}`, ...run.steps.map(describe)];
}

// Free-form JSON is an object of anything: an output schema, a call's arguments, a decision's edited arguments.
export const structured: RunCreate = {
  input: "What is 12*7, plus 1?",
  mode: "background",
  tools: ["calculator", "files.read_file"], // any tool name: MCP tools connect after a client is generated
  sensitive_tools: ["calculator"],
  output_schema: { type: "integer", $defs: { deep: { anyOf: [{ type: "string" }, { type: "null" }] } } },
};
export const images: RunCreate = {
  input: [
    { type: "text", text: "What is in this picture?" },
    { type: "image", media_type: "image/png", data: "iVBORw0KGgo=" },
  ],
};
export const approve: Advance = { approval: true, arguments: { expression: "12*7", nested: [1, { a: null }] } };
export const batch: Advance = { decisions: [{ call_id: "c1", approval: false, reason: "not now" }] };
export const doneOnly: ListQuery = { status: "done", stop_reason: "final_answer", limit: 10 };

// @ts-expect-error `status` holds only real values: "" is no status
export const blank: ListQuery = { status: "" };
// @ts-expect-error `mode` is one of sync, step, background
export const badMode: RunCreate = { input: "x", mode: "later" };

export function toolOnly(step: Step): string | null {
  if (step.kind !== "tool") return null;
  // @ts-expect-error a tool step has no final answer
  return step.final_answer;
}

// graft's Pi extension: sends graft's LoRA adapter selection with every
// request Pi makes to graft's provider (the "graft" provider that
// `graft pi install` writes into ~/.pi/agent/models.json); requests to other
// providers are left alone.
//
// The adapter is, in order:
//   1. $GRAFT_ADAPTER: an adapter id, a stack such as "a+b" or "a@0.5+b", or "none";
//   2. the shared selection, the one `graft adapters use` and the web page's
//      "use everywhere" write: graft's state file
//      ($XDG_DATA_HOME/graft/selection.json, else ~/.local/share/graft/...),
//      else the server's GET /v1/adapters/selection;
//   3. neither: the request goes out unchanged (the server's default: the
//      base model, or its --force-adapter).
//
// `/adapter` shows the adapter in use; `/adapter SPEC` (or `none`) sets the
// shared selection through the server, for every client.
//
// Installed by `graft pi install`; graft's documentation: docs/clients.md.
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import type { ExtensionAPI, ExtensionContext } from "@mariozechner/pi-coding-agent";

const PROVIDER = "graft";

function selectionFile(): string {
	const data = process.env.XDG_DATA_HOME || join(homedir(), ".local", "share");
	return join(data, "graft", "selection.json");
}

// The file's adapter; undefined when there is no file. A file that cannot be
// read as graft writes it is an error, never silently skipped.
function fileSelection(): string | undefined {
	let text: string;
	try {
		text = readFileSync(selectionFile(), "utf8");
	} catch (error) {
		if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
		throw error;
	}
	const saved = JSON.parse(text);
	if (typeof saved?.adapter !== "string") {
		throw new Error(`${selectionFile()}: 'adapter' must be a string (write it again with: graft adapters use ID)`);
	}
	return saved.adapter;
}

// graft's root URL: the provider's baseUrl without its /v1.
function serverRoot(ctx: ExtensionContext): string | undefined {
	const base = ctx.model?.baseUrl;
	return base ? base.replace(/\/+$/, "").replace(/\/v1$/, "") : undefined;
}

async function serverRequest(ctx: ExtensionContext, method: string, body?: unknown): Promise<any> {
	const root = serverRoot(ctx);
	if (!root || !ctx.model) throw new Error("the current model is not graft's");
	const headers: Record<string, string> = { "content-type": "application/json" };
	const auth = await ctx.modelRegistry.getApiKeyAndHeaders(ctx.model);
	if (auth.ok) {
		Object.assign(headers, auth.headers ?? {});
		if (auth.apiKey) headers.authorization = `Bearer ${auth.apiKey}`;
	}
	const res = await fetch(`${root}/v1/adapters/selection`, {
		method,
		headers,
		body: body === undefined ? undefined : JSON.stringify(body),
		signal: AbortSignal.timeout(5000),
	});
	const answer = await res.json().catch(() => ({}));
	if (!res.ok) throw new Error(answer?.error?.message ?? `graft answered HTTP ${res.status}`);
	return answer;
}

// The shared selection: the state file here, else the server's.
async function sharedSelection(ctx: ExtensionContext): Promise<string | undefined> {
	const saved = fileSelection();
	if (saved !== undefined) return saved;
	try {
		const answer = await serverRequest(ctx, "GET");
		return typeof answer.adapter === "string" ? answer.adapter : undefined;
	} catch {
		return undefined; // an older graft without the route, or none there: requests go out unchanged
	}
}

async function currentAdapter(ctx: ExtensionContext): Promise<{ adapter?: string; source: string }> {
	const fromEnv = process.env.GRAFT_ADAPTER?.trim();
	if (fromEnv) return { adapter: fromEnv, source: "GRAFT_ADAPTER" };
	const shared = await sharedSelection(ctx);
	if (shared !== undefined) return { adapter: shared, source: "the shared selection" };
	return { source: "the server's default" };
}

export default function graftAdapter(pi: ExtensionAPI) {
	pi.on("before_provider_request", async (event, ctx) => {
		if (ctx.model?.provider !== PROVIDER) return undefined;
		const payload = event.payload;
		if (typeof payload !== "object" || payload === null || Array.isArray(payload)) return undefined;
		const { adapter } = await currentAdapter(ctx);
		if (adapter === undefined) return undefined;
		return { ...(payload as Record<string, unknown>), adapter };
	});

	pi.registerCommand("adapter", {
		description: "graft: show the LoRA adapter in use, or set the shared selection (/adapter ID|a+b|none)",
		handler: async (args, ctx) => {
			const spec = args.trim();
			try {
				if (spec) {
					if (ctx.model?.provider !== PROVIDER) throw new Error("select a graft model first (/model)");
					const answer = await serverRequest(ctx, "PUT", { adapter: spec });
					const note = process.env.GRAFT_ADAPTER ? ` (GRAFT_ADAPTER=${process.env.GRAFT_ADAPTER} still wins here)` : "";
					ctx.ui.notify(`graft's clients now use ${answer.adapter}${note}`, "info");
				} else {
					const { adapter, source } = await currentAdapter(ctx);
					ctx.ui.notify(`graft adapter: ${adapter ?? "(none sent)"} from ${source}`, "info");
				}
			} catch (error) {
				ctx.ui.notify(`graft: ${(error as Error).message}`, "error");
			}
		},
	});
}

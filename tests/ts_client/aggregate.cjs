// The aggregated /mcp through an official TypeScript SDK client: every
// server's tools listed (prefixed, all pages), then each given tool called in
// turn, answering every elicitation the call brings.
//
// Usage: NODE_PATH=.peers/node/node_modules node aggregate.cjs SDK URL TOOL...
//   SDK   v1: @modelcontextprotocol/sdk 1.x (a 2025-11-25 client: initialize,
//             elicitation/create arrives as a request on the call's stream)
//         v2: @modelcontextprotocol/client 2.x pinned to 2026-07-28
//             (server/discover; elicitation arrives in an input_required
//             result, the SDK answers it and retries the call)
//   TOOL  SERVER__NAME:{json arguments}
// Prints one JSON document: protocolVersion, era, tools, calls (name -> the
// result, or {error}), asked (every elicitation message answered).
// CommonJS so that NODE_PATH resolves the packages of the node peer.
"use strict";

const ANSWER = { action: "accept", content: { username: "ada", email: "ada@example.com" } };

function clientFor(sdk, url, asked) {
  const info = { name: `mcp-shim-ts-${sdk}`, version: "1.0.0" };
  const answer = async (request) => {
    asked.push(String(request.params.message));
    return ANSWER;
  };
  if (sdk === "v1") {
    const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
    const { StreamableHTTPClientTransport } = require(
      "@modelcontextprotocol/sdk/client/streamableHttp.js",
    );
    const { ElicitRequestSchema } = require("@modelcontextprotocol/sdk/types.js");
    const client = new Client(info, { capabilities: { elicitation: {} } });
    client.setRequestHandler(ElicitRequestSchema, answer);
    return { client, transport: new StreamableHTTPClientTransport(new URL(url)) };
  }
  if (sdk === "v2") {
    const { Client, StreamableHTTPClientTransport } = require("@modelcontextprotocol/client");
    const client = new Client(info, {
      capabilities: { elicitation: { form: {} } },
      versionNegotiation: { mode: { pin: "2026-07-28" } },
    });
    client.setRequestHandler("elicitation/create", answer);
    return { client, transport: new StreamableHTTPClientTransport(new URL(url)) };
  }
  throw new Error(`unknown SDK ${sdk} (v1 or v2)`);
}

async function main(sdk, url, specs) {
  const asked = [];
  const { client, transport } = clientFor(sdk, url, asked);
  await client.connect(transport);
  const out = {
    protocolVersion: client.getNegotiatedProtocolVersion?.() ?? transport.protocolVersion,
    era: client.getProtocolEra?.() ?? "legacy",
    tools: [],
    calls: {},
  };
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    out.tools.push(...page.tools.map((t) => t.name));
    cursor = page.nextCursor;
  } while (cursor);
  out.tools.sort();
  for (const spec of specs) {
    const at = spec.indexOf(":");
    const name = at < 0 ? spec : spec.slice(0, at);
    const args = at < 0 ? {} : JSON.parse(spec.slice(at + 1));
    try {
      out.calls[name] = await client.callTool({ name, arguments: args });
    } catch (err) {
      out.calls[name] = { error: String(err && err.stack ? err.stack : err) };
    }
  }
  out.asked = asked;
  await client.close();
  return out;
}

const [sdk, url, ...specs] = process.argv.slice(2);
main(sdk, url, specs).then(
  (out) => {
    process.stdout.write(JSON.stringify(out) + "\n");
    process.exit(0);
  },
  (err) => {
    process.stderr.write(`aggregate.cjs: ${err && err.stack ? err.stack : err}\n`);
    process.exit(1);
  },
);

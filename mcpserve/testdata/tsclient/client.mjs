// Drives an MCP server over stdio with the reference TypeScript SDK client
// and prints, as one JSON object on stdout, what the server answered.
//
//   node client.mjs <server command> [args...]
//
// The Go test (mcpserve/tsclient_test.go) starts this script and checks the
// answers; this script only reports, it judges nothing.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [command, ...args] = process.argv.slice(2);
if (!command) {
  console.error("usage: node client.mjs <server command> [args...]");
  process.exit(2);
}

const transport = new StdioClientTransport({ command, args, stderr: "inherit" });
const client = new Client({ name: "agentry-tsclient", version: "1.0.0" });
await client.connect(transport);

const out = {
  server: client.getServerVersion(),
  tools: (await client.listTools()).tools,
  whoami: await client.callTool({ name: "whoami", arguments: {} }),
  whoamiAgain: await client.callTool({ name: "whoami" }),
  scratch: await client.callTool({ name: "scratch", arguments: { text: "hello from typescript" } }),
  wider: await client.callTool({ name: "scratch", arguments: { text: "x", scope: "run" } }),
  badArgs: await client.callTool({ name: "scratch", arguments: { text: 5 } }),
};
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
